// The start of a recorded run (the executor's and the profiler's): its inputs begin a graph of
// their own, and backward leaves their gradients where the caller reads them instead of passing
// them on. Apart from checkpoint.h, which most code includes, for the IValue header this needs.
#pragma once

#include <cstddef>
#include <vector>

#include "ATen/core/Tensor.h"
#include "ATen/core/ivalue.h"

namespace ckpt {

// Where backward leaves the gradients of a recorded run's inputs (core/run/executor.cc).
struct InputGradients : torch::CustomClassHolder {
  // One per input; undefined where none arrived, and at a later place of a tensor named twice.
  std::vector<at::Tensor> grads;
  std::vector<size_t> first;  // per distinct input, the place of its first naming
};

// The start of a recorded run: `inputs` as views (no bytes) that begin a graph, the
// floating-point ones differentiable, whose gradients backward stores in `into` instead of
// passing them on. The graph holds an input's storage only where a stage saves it, as it would
// hold a tensor in the middle of one graph.
std::vector<at::Tensor> GraphInputs(const std::vector<at::Tensor>& inputs,
                                    c10::intrusive_ptr<InputGradients> into);

}  // namespace ckpt
