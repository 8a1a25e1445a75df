// Devices, step timers and compute threads.
//
//   ASSIGN_OR_RETURN(c10::Device device, ResolveDevice("auto"));  // cuda if present, else cpu
//   std::unique_ptr<StepTimer> timer = MakeStepTimer(device);
//   timer->Start(); ...; double ms = timer->StopMs();
#pragma once

#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"

namespace ckpt {

// "auto" (CUDA when this LibTorch has it and a GPU is present, else CPU), "cpu", "cuda" or
// "cuda:N". InvalidArgument for other words; Unavailable for CUDA without a GPU.
absl::StatusOr<c10::Device> ResolveDevice(absl::string_view name);

// Times device work. CPU: the steady clock. CUDA: CUDA events on the current stream, so the
// time is the GPU's, not the launch overhead's (StopMs waits for the stop event).
class StepTimer {
 public:
  virtual ~StepTimer() = default;
  virtual void Start() = 0;
  virtual double StopMs() = 0;
};

std::unique_ptr<StepTimer> MakeStepTimer(const c10::Device& device);

// Waits for all queued work on the device (no-op on CPU).
void Synchronize(const c10::Device& device);

// Sets LibTorch's intra-op threads and, when LibTorch runs on OpenBLAS, OpenBLAS's threads
// (they are separate pools and contend when both are > 1 on small machines).
// InvalidArgument unless n >= 1.
absl::Status SetComputeThreads(int n);

// "LibTorch 1.13.0, BLAS: OpenBLAS 0.3.21 ..., 1 thread(s), CUDA: no"
std::string DescribeRuntime();

// Implemented in cuda_backend.cc.
bool CudaBuilt();
std::unique_ptr<StepTimer> MakeCudaStepTimer();
void CudaSynchronize();

}  // namespace ckpt
