// The checkpoint primitive: run a function of several tensors without keeping its graph, and
// recompute it during backward. LibTorch has no C++ checkpoint API (pytorch issue #52744);
// this is ckptlab's, in the manner of PyTorch's reentrant torch.utils.checkpoint.
//
// Forward: runs `fn(inputs)` with grad disabled, keeping only the inputs (and, if asked, the
// RNG state at entry). Backward: restores that RNG state, reruns `fn` on detached copies of
// the inputs with grad enabled, and backpropagates the incoming gradients through the
// recomputed graph. Parameters used inside `fn` accumulate their gradients as usual; the
// inputs' gradients flow on to whatever produced them.
//
//   std::vector<at::Tensor> out = Checkpoint(
//       [&](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{mlp(in[0])}; },
//       {x});
//
// Inputs may not require grad (token ids, a mask); outputs that are not floating point are
// non-differentiable. Throws LibTorch's exceptions like any LibTorch op (see torch_status.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "ATen/core/Tensor.h"

namespace ckpt {

using TensorFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

struct CheckpointOptions {
  // Capture the CPU and CUDA generators at entry and replay them in the recomputation, so
  // dropout draws the same mask. Costs the generator state's bytes for as long as it is kept.
  bool preserve_rng_state = true;
  // If set, incremented once each time backward recomputes `fn`.
  std::atomic<int64_t>* recompute_count = nullptr;
};

// When grad mode is off (evaluation), simply returns fn(inputs).
std::vector<at::Tensor> Checkpoint(TensorFn fn, const std::vector<at::Tensor>& inputs,
                                   const CheckpointOptions& options = {});

}  // namespace ckpt
