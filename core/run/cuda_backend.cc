// Everything that needs CUDA's headers: the CUDA memory meter and host pool, CUDA-event timers
// and device synchronisation. Compiled always; the CUDA parts only when the LibTorch in use has
// CUDA (CKPT_HAS_CUDA, set by third_party/libtorch/libtorch.bzl or the CMake build).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/bytes.h"
#include "core/run/device.h"
#include "core/run/host_pool.h"
#include "core/run/memory_meter.h"

#if CKPT_HAS_CUDA
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "ATen/Functions.h"
#include "ATen/cuda/CUDAContext.h"
#include "ATen/cuda/CUDAEvent.h"
#include "c10/cuda/CUDACachingAllocator.h"
#include "c10/cuda/CUDAFunctions.h"
#include "c10/cuda/CUDAGuard.h"
#include "c10/cuda/CUDAStream.h"
#include "core/base/status_macros.h"
#include "core/run/torch_compat.h"
#include "core/run/torch_status.h"
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
                        FormatGib(static_cast<int64_t>(gpu->totalGlobalMem), 1), " GiB",
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

// The end of one call's copies on the pool's stream: an event the compute stream waits on. Holds
// the copies' sources until then (host sources: counted until their copy back is done).
class CudaCopyFence final : public CopyFence {
 public:
  CudaCopyFence(c10::cuda::CUDAStream copies, std::vector<at::Tensor> sources)
      : index_(copies.device_index()), sources_(std::move(sources)) {
    done_.record(copies);
  }
  ~CudaCopyFence() override {
    try {
      Wait();
    } catch (...) {  // a failing CUDA call here fails the next one too, which reports it
    }
  }
  void Wait() override {
    if (waited_) return;
    done_.block(c10::cuda::getCurrentCUDAStream(index_));
    sources_.clear();
    waited_ = true;
  }

 private:
  c10::DeviceIndex index_;
  at::cuda::CUDAEvent done_;
  std::vector<at::Tensor> sources_;
  bool waited_ = false;
};

// A CUDA device's pool: pinned blocks from LibTorch's pinned allocator, which records the copies
// that use a block and reuses it only once they are done; copies on a stream of the pool's own,
// each call's after the work the compute stream was given before it. Device tensors are
// allocated on the compute stream (destinations before the copy stream starts on them, sources
// freed after the compute waited for the copy), so the caching allocator reuses their blocks in
// the compute stream's order without recording other streams. What callers hold is an alias of
// the pinned tensor whose deleter does the counting; copies back read the pinned tensor itself,
// so that the pinned allocator sees them.
class CudaHostPoolImpl final : public HostPool {
 public:
  explicit CudaHostPoolImpl(c10::DeviceIndex index)
      : index_(index), copies_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index)) {}

  Transfer CopyToHost(const std::vector<at::Tensor>& ts) override {
    StartAfterCompute();
    Transfer transfer;
    const c10::cuda::CUDAStreamGuard on_copies(copies_);
    for (const at::Tensor& t : ts) {
      if (!t.defined()) {
        transfer.tensors.emplace_back();
        continue;
      }
      at::Tensor pinned = at::empty(
          t.sizes(), t.options().device(c10::kCPU).pinned_memory(true).requires_grad(false));
      if (check_order_) Poison(pinned);  // host memory, not yet in any copy: written now
      pinned.copy_(t, /*non_blocking=*/true);
      transfer.tensors.push_back(Counted(pinned));
    }
    transfer.done = std::make_unique<CudaCopyFence>(copies_, ts);
    return transfer;
  }

  Transfer CopyToDevice(const std::vector<at::Tensor>& host, const c10::Device& device) override {
    TORCH_CHECK(device.is_cuda() && device.index() == index_, "ckptlab host pool of cuda:", index_,
                ": asked to copy to ", device.str());
    Transfer transfer;
    std::vector<at::Tensor> pinned;
    for (const at::Tensor& h : host) {
      pinned.push_back(h.defined() ? PinnedOf(h) : at::Tensor());
      at::Tensor out;
      if (h.defined()) {
        out = at::empty(h.sizes(), pinned.back().options().device(device).pinned_memory(false));
        if (check_order_) Poison(out);  // on the compute stream, before the copy's start
      }
      transfer.tensors.push_back(out);
    }
    StartAfterCompute();
    {
      const c10::cuda::CUDAStreamGuard on_copies(copies_);
      for (size_t i = 0; i < host.size(); ++i) {
        if (host[i].defined()) transfer.tensors[i].copy_(pinned[i], /*non_blocking=*/true);
      }
    }
    transfer.done = std::make_unique<CudaCopyFence>(copies_, host);
    return transfer;
  }

  HostStats Stats() const override { return counter_.Stats(); }
  void ResetPeak() override { counter_.ResetPeak(); }
  void CheckOrder(bool on) override { check_order_ = on; }

 private:
  // The copy stream waits for what the compute stream was given so far.
  void StartAfterCompute() {
    at::cuda::CUDAEvent issued;
    issued.record(c10::cuda::getCurrentCUDAStream(index_));
    issued.block(copies_);
  }

  // An alias of `pinned` that callers hold, counted until it is freed.
  at::Tensor Counted(const at::Tensor& pinned) {
    const int64_t bytes = static_cast<int64_t>(pinned.nbytes());
    void* data = pinned.data_ptr();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pinned_[data] = pinned;
    }
    counter_.Add(bytes);
    return at::from_blob(
        data, pinned.sizes(),
        [this, bytes](void* p) {
          std::lock_guard<std::mutex> lock(mutex_);
          pinned_.erase(p);  // the pinned tensor goes back to its allocator
          counter_.Sub(bytes);
        },
        pinned.options());
  }

  at::Tensor PinnedOf(const at::Tensor& alias) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pinned_.find(alias.data_ptr());
    TORCH_CHECK(it != pinned_.end(), "ckptlab host pool: a tensor it did not make");
    return it->second;
  }

  c10::DeviceIndex index_;
  c10::cuda::CUDAStream copies_;
  HostCounter counter_;
  std::mutex mutex_;
  std::unordered_map<void*, at::Tensor> pinned_;  // by data pointer, while an alias lives
  bool check_order_ = false;
};

}  // namespace

bool CudaBuilt() { return true; }

absl::StatusOr<HostPool*> CudaHostPool(c10::DeviceIndex index) {
  if (!torch::cuda::is_available()) {
    return absl::UnavailableError("no CUDA GPU is visible to this process");
  }
  if (index < 0) index = c10::cuda::current_device();
  const int count = static_cast<int>(torch::cuda::device_count());
  if (index >= count) {
    return absl::InvalidArgumentError(absl::StrCat("no CUDA device ", index, ": this process sees ",
                                                   count, " (indices 0 to ", count - 1, ")"));
  }
  static std::mutex mutex;
  static auto* pools = new std::map<int, std::unique_ptr<CudaHostPoolImpl>>();  // leaked
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<CudaHostPoolImpl>& pool = (*pools)[index];
  if (pool == nullptr) {
    RETURN_IF_ERROR(RunTorch([&] { pool = std::make_unique<CudaHostPoolImpl>(index); }));
  }
  return pool.get();
}

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

absl::Status CudaUseDevice(c10::DeviceIndex index) {
  return RunTorch([&] { c10::cuda::set_device(index); });
}

#else  // !CKPT_HAS_CUDA

bool CudaBuilt() { return false; }

absl::StatusOr<MemoryMeter*> CudaMemoryMeter(c10::DeviceIndex) {
  return absl::UnavailableError("this LibTorch was built without CUDA");
}

std::unique_ptr<StepTimer> MakeCudaStepTimer() { return nullptr; }

void CudaSynchronize() {}

absl::Status CudaUseDevice(c10::DeviceIndex) {
  return absl::UnavailableError("this LibTorch was built without CUDA");
}

absl::StatusOr<HostPool*> CudaHostPool(c10::DeviceIndex) {
  return absl::UnavailableError("this LibTorch was built without CUDA");
}

#endif  // CKPT_HAS_CUDA

}  // namespace ckpt
