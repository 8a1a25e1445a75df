// Everything that needs CUDA's headers: the CUDA memory meter, CUDA-event timers and device
// synchronisation. Compiled always; the CUDA parts only when the LibTorch in use has CUDA
// (CKPT_HAS_CUDA, set by third_party/libtorch/libtorch.bzl or the CMake build).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/device.h"
#include "core/memory_meter.h"

#if CKPT_HAS_CUDA
#include <mutex>

#include "ATen/cuda/CUDAContext.h"
#include "ATen/cuda/CUDAEvent.h"
#include "c10/cuda/CUDACachingAllocator.h"
#include "c10/cuda/CUDAFunctions.h"
#include "core/status_macros.h"
#include "core/torch_compat.h"
#include "core/torch_status.h"
#include "torch/cuda.h"
#endif

namespace ckpt {

#if CKPT_HAS_CUDA
namespace {

class CudaMemoryMeterImpl final : public MemoryMeter {
 public:
  explicit CudaMemoryMeterImpl(c10::DeviceIndex index) : index_(index) {}

  MemoryStats Stats() const override {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_);
    const auto& requested = compat::RequestedBytes(stats);
    const auto& allocated = stats.allocated_bytes[compat::kAggregateStat];
    const auto& reserved = stats.reserved_bytes[compat::kAggregateStat];
    return {requested.current, requested.peak, allocated.current, reserved.current, reserved.peak};
  }
  void ResetPeak() override { c10::cuda::CUDACachingAllocator::resetPeakStats(index_); }
  void ReleaseCached() override { c10::cuda::CUDACachingAllocator::emptyCache(); }
  absl::Status SetCap(std::optional<int64_t> bytes) override {
    const double total = static_cast<double>(at::cuda::getDeviceProperties(index_)->totalGlobalMem);
    if (bytes.has_value() && (*bytes < 0 || *bytes > total)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "memory cap ", *bytes, " bytes; accepted on this GPU: 0..", static_cast<int64_t>(total)));
    }
    RETURN_IF_ERROR(RunTorch([&] {
      c10::cuda::CUDACachingAllocator::setMemoryFraction(bytes ? *bytes / total : 1.0, index_);
    }));
    cap_ = bytes;
    return absl::OkStatus();
  }
  std::optional<int64_t> Cap() const override { return cap_; }
  std::string Describe() const override {
    const cudaDeviceProp* gpu = at::cuda::getDeviceProperties(index_);
    return absl::StrCat("cuda:", index_, " ", gpu->name, ", ",
                        absl::StrFormat("%.1f GiB", gpu->totalGlobalMem / double(1 << 30)),
                        " (caching allocator: ",
                        compat::kRequestedBytesExact ? "requested bytes, exact"
                                                     : "allocated bytes, in 512-byte blocks",
                        ")");
  }

  // Starts CUDA on this device, once. LibTorch sets up the caching allocator in CUDA's lazy
  // initialisation, which the first CUDA tensor triggers; before it, LibTorch 2.x's statistics
  // and memory-fraction calls throw "Allocator not initialized for device". A one-byte tensor
  // starts it the way any tensor would, on every LibTorch version.
  absl::Status Start() {
    std::call_once(started_, [&] {
      start_status_ = RunTorch(
          [&] { at::empty({1}, at::TensorOptions().dtype(at::kByte).device(c10::kCUDA, index_)); });
    });
    return start_status_;
  }

 private:
  c10::DeviceIndex index_;
  std::optional<int64_t> cap_;
  std::once_flag started_;
  absl::Status start_status_;
};

class CudaStepTimer final : public StepTimer {
 public:
  void Start() override { start_.record(); }
  double StopMs() override {
    stop_.record();
    stop_.synchronize();
    return start_.elapsed_time(stop_);
  }

 private:
  at::cuda::CUDAEvent start_{cudaEventDefault};
  at::cuda::CUDAEvent stop_{cudaEventDefault};
};

}  // namespace

bool CudaBuilt() { return true; }

absl::StatusOr<MemoryMeter*> CudaMemoryMeter(c10::DeviceIndex index) {
  if (!torch::cuda::is_available()) {
    return absl::UnavailableError("no CUDA GPU is visible to this process");
  }
  static const auto* meters = [] {
    auto* all = new std::vector<std::unique_ptr<CudaMemoryMeterImpl>>();
    // device_count() is a size_t in LibTorch 1.13 and a c10::DeviceIndex in 2.x.
    const int count = static_cast<int>(torch::cuda::device_count());
    for (int i = 0; i < count; ++i) {
      all->push_back(std::make_unique<CudaMemoryMeterImpl>(static_cast<c10::DeviceIndex>(i)));
    }
    return all;
  }();
  const int count = static_cast<int>(meters->size());
  if (index < 0 || index >= count) {
    return absl::InvalidArgumentError(absl::StrCat("no CUDA device ", index, ": this process sees ",
                                                   count, " (indices 0 to ", count - 1, ")"));
  }
  CudaMemoryMeterImpl* meter = (*meters)[index].get();
  RETURN_IF_ERROR(meter->Start());
  return meter;
}

std::unique_ptr<StepTimer> MakeCudaStepTimer() { return std::make_unique<CudaStepTimer>(); }

void CudaSynchronize() { c10::cuda::device_synchronize(); }

#else  // !CKPT_HAS_CUDA

bool CudaBuilt() { return false; }

absl::StatusOr<MemoryMeter*> CudaMemoryMeter(c10::DeviceIndex) {
  return absl::UnavailableError("this LibTorch was built without CUDA");
}

std::unique_ptr<StepTimer> MakeCudaStepTimer() { return nullptr; }

void CudaSynchronize() {}

#endif  // CKPT_HAS_CUDA

}  // namespace ckpt
