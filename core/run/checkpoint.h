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
};

// For functions that draw no random numbers themselves (e.g. dropout whose seed was drawn
// outside and captured): no RNG snapshot, no bytes spent on one.
inline const CheckpointOptions kNoRngReplay{/*preserve_rng_state=*/false};

// Whether autograd can differentiate `t`: defined, and floating point or complex. Checkpoint
// and GraphInputs mark their other outputs non-differentiable; the profiler treats such tensors
// between stages as needing a gradient.
bool IsDifferentiable(const at::Tensor& t);

// Whether the code running on this thread is a rerun: a forward that backward runs again (the
// executor's rerun of a checkpointed segment, a checkpointed function's recomputation, the
// refill of a dropped output). A step's first run of a stage, with or without a graph, is not.
// Module state a training forward updates (BatchNorm's running statistics and batch counter,
// StageInfo::updates_state) is updated by the first run only: such a stage reads this and
// leaves its state alone on a rerun, so every plan trains the state as store_all does.
bool InRerun();

// Marks this thread's work as a rerun for its lifetime (nestable).
class RerunScope {
 public:
  RerunScope();
  ~RerunScope();
  RerunScope(const RerunScope&) = delete;
  RerunScope& operator=(const RerunScope&) = delete;

 private:
  bool previous_;
};

// When grad mode is off (evaluation), simply returns fn(inputs).
std::vector<at::Tensor> Checkpoint(TensorFn fn, const std::vector<at::Tensor>& inputs,
                                   const CheckpointOptions& options = {});

// Runs fn(inputs) under Checkpoint and `consumer` on its outputs, returning the consumer's.
// With grad enabled it then frees the storage of fn's outputs (what the consumer's graph saved
// of them) and, when backward first reaches the consumer's outputs, reruns fn without a graph
// from the kept inputs and refills that storage before the consumer's backward reads it:
// between forward and backward neither fn's outputs nor what fn saves are held, only fn's
// inputs (Megatron-Core's recompute of layernorm). The consumer must not return fn's outputs or
// views of them; fn must draw no random numbers.
std::vector<at::Tensor> CheckpointDroppingOutput(const TensorFn& fn,
                                                 const std::vector<at::Tensor>& inputs,
                                                 const TensorFn& consumer);

// A function of one chunk: `offset` is the chunk's first position along the chunked dim.
using ChunkFn =
    std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs, int64_t offset)>;

// Splits the inputs marked in `split` into `chunks` near-equal slices along `dim` (the first
// size % chunks one longer; more chunks than positions gives one position each) and runs `fn`
// on each slice (unmarked inputs whole) under Checkpoint, so only one chunk's intermediates
// are ever alive. Outputs are concatenated along `dim`; 0-dim outputs (partial sums) are
// added. With chunks <= 1, runs fn(inputs, 0) directly.
std::vector<at::Tensor> ChunkedCheckpoint(const ChunkFn& fn, const std::vector<at::Tensor>& inputs,
                                          const std::vector<bool>& split, int64_t dim, int chunks,
                                          const CheckpointOptions& options = {});

}  // namespace ckpt
