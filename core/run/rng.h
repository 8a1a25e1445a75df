// RNG replay: capture and restore the default generators, so that recomputing a stage that
// draws random numbers (dropout) reproduces exactly what its forward pass drew.
//
//   RngState state = CaptureRng(devices);  // before the forward
//   ...
//   RngState now = CaptureRng(devices);
//   RestoreRng(state);   // recompute: draws the same numbers
//   RestoreRng(now);     // the rest of the program continues its own stream
//
// Capturing the CPU state allocates its state tensor (5056 bytes for mt19937), which counts
// as live memory while kept; callers capture only around stages that are stochastic.
#pragma once

#include <vector>

#include "ATen/core/Tensor.h"
#include "c10/core/Device.h"

namespace ckpt {

struct RngState {
  at::Tensor cpu;
  std::vector<std::pair<c10::Device, at::Tensor>> cuda;  // one per CUDA device involved
};

// Captures the CPU generator and the default generator of each CUDA device in `devices`.
RngState CaptureRng(const std::vector<c10::Device>& devices);
void RestoreRng(const RngState& state);

// The distinct CUDA devices the tensors live on.
std::vector<c10::Device> CudaDevicesOf(const std::vector<at::Tensor>& tensors);

}  // namespace ckpt
