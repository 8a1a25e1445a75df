// Devices, step timers and compute threads.
//
//   ASSIGN_OR_RETURN(c10::Device device, ResolveDevice("auto"));  // cuda if present, else cpu
//   std::unique_ptr<StepTimer> timer = MakeStepTimer(device);
//   timer->Start(); ...; double ms = timer->StopMs();
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "c10/core/Device.h"

namespace ckpt {

// "auto" (CUDA when this LibTorch has it and a GPU is present, else CPU), "cpu", "cuda" or
// "cuda:N". Where the name gives no GPU's index (auto, cuda), `local_rank` picks one:
// cuda:(local_rank mod the GPUs visible), each rank of a host on its own GPU as a launcher's
// LOCAL_RANK means. InvalidArgument for other words; Unavailable for CUDA without a GPU.
absl::StatusOr<c10::Device> ResolveDevice(absl::string_view name, int local_rank = 0);

// The CUDA GPUs this process sees; 0 without CUDA.
int VisibleGpus();

// Makes `device` this process's current CUDA device (the one whose current stream the step
// timers, the host pool's events and LibTorch's own defaults use); nothing on the CPU.
absl::Status UseDevice(const c10::Device& device);

// Times device work. CPU: the steady clock. CUDA: CUDA events on the current stream, so the
// time is the GPU's, not the launch overhead's (StopMs waits for the stop event).
class StepTimer {
 public:
  virtual ~StepTimer() = default;
  virtual void Start() = 0;
  virtual double StopMs() = 0;
};

std::unique_ptr<StepTimer> MakeStepTimer(const c10::Device& device);

// The median of `samples`, NaN when there are none: how repeated timings are summarized.
double Median(std::vector<double> samples);

// Waits for all queued work on the device (no-op on CPU).
void Synchronize(const c10::Device& device);

// The CPU's compute threads: LibTorch's intra-op pool (elementwise work, reductions, and the
// matrix products when LibTorch has its own BLAS) and, when LibTorch runs on OpenBLAS (Debian's
// does, through the system libblas.so.3), OpenBLAS's own pool for the matrix products. They are
// separate pools: with both wider than one they contend for the same cores.
struct ComputeThreads {
  int intra_op = 1;
  int blas = 1;
};

// The cores this process may run on (its CPU affinity mask).
int UsableCores();

// A thread count as a user gives it: an integer from 1 to UsableCores(), or "auto": the count
// the environment variable `env` asks the library for where it is set and not empty
// (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, as the libraries read them; at most UsableCores()),
// else UsableCores(). More threads than cores measure contention, and past what the process may
// start LibTorch's pool waits forever. InvalidArgument naming `flag` (or `env`) and the
// accepted values.
absl::StatusOr<int> ParseThreadCount(absl::string_view flag, absl::string_view text,
                                     const char* env);

// Sets both pools and returns the counts they run with, read back from them (OpenBLAS caps
// its pool at the number it was built for; `blas` is 0 when the BLAS is not OpenBLAS, whose
// threads are then not set). InvalidArgument unless both counts are >= 1.
absl::StatusOr<ComputeThreads> SetComputeThreads(const ComputeThreads& threads);

// "LibTorch 1.13.0; intra-op threads 1 (OMP_WAIT_POLICY unset); BLAS OpenBLAS 0.3.21 ..., 2
// thread(s); CUDA not built"
std::string DescribeRuntime();

// The device's measured float32 matrix-product rate: square products of `n` x `n` (2 n^3 FLOPs
// each) timed one by one, after one untimed, until `min_seconds` have passed; the median
// product's rate in GFLOP/s. What a model's achieved rate is compared with. LibTorch errors
// become a Status.
absl::StatusOr<double> MeasureGemmGflops(const c10::Device& device, int64_t n = 1024,
                                         double min_seconds = 0.5);

// Implemented in cuda_backend.cc.
bool CudaBuilt();
std::unique_ptr<StepTimer> MakeCudaStepTimer();
void CudaSynchronize();
absl::Status CudaUseDevice(c10::DeviceIndex index);

}  // namespace ckpt
