#include "core/host_pool.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "ATen/Functions.h"
#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"

namespace ckpt {
namespace {

// Counts live and peak bytes; what both pools share.
class Counter {
 public:
  void Add(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_ += bytes;
    peak_ = std::max(peak_, live_);
  }
  void Sub(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_ -= bytes;
  }
  HostStats Stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {live_, peak_};
  }
  void ResetPeak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = live_;
  }

 private:
  mutable std::mutex mutex_;
  int64_t live_ = 0, peak_ = 0;
};

// A CPU device's pool: blocks from the system (posix_memalign), freed by the tensor's deleter.
class CpuHostPool final : public HostPool {
 public:
  at::Tensor ToHost(const at::Tensor& t) override {
    if (!t.defined()) return {};
    const int64_t bytes = static_cast<int64_t>(t.numel() * t.element_size());
    void* data = nullptr;
    if (posix_memalign(&data, 64, std::max<size_t>(bytes, 1)) != 0) {
      C10_THROW_ERROR(OutOfMemoryError, absl::StrCat("ckptlab host pool: the system refused ",
                                                     bytes, " bytes for an offloaded tensor"));
    }
    counter_.Add(bytes);
    at::Tensor host = at::from_blob(
        data, t.sizes(),
        [this, bytes](void* p) {
          std::free(p);
          counter_.Sub(bytes);
        },
        t.options().device(c10::kCPU).requires_grad(false));
    host.copy_(t);
    return host;
  }
  at::Tensor ToDevice(const at::Tensor& host, const c10::Device& device) override {
    if (!host.defined()) return {};
    at::Tensor out = at::empty(host.sizes(), host.options().device(device));
    out.copy_(host);
    return out;
  }
  HostStats Stats() const override { return counter_.Stats(); }
  void ResetPeak() override { counter_.ResetPeak(); }

 private:
  Counter counter_;
};

// A CUDA device's pool: pinned blocks from LibTorch's pinned allocator, which records the copies
// that use a block and reuses it only once they are done. What callers hold is an alias of the
// pinned tensor whose deleter does the counting; copies back read the pinned tensor itself, so
// that the allocator sees them.
class CudaHostPool final : public HostPool {
 public:
  at::Tensor ToHost(const at::Tensor& t) override {
    if (!t.defined()) return {};
    at::Tensor pinned = at::empty(
        t.sizes(), t.options().device(c10::kCPU).pinned_memory(true).requires_grad(false));
    pinned.copy_(t, /*non_blocking=*/true);
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
  at::Tensor ToDevice(const at::Tensor& host, const c10::Device& device) override {
    if (!host.defined()) return {};
    at::Tensor pinned;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = pinned_.find(host.data_ptr());
      TORCH_CHECK(it != pinned_.end(), "ckptlab host pool: a tensor it did not make");
      pinned = it->second;
    }
    at::Tensor out =
        at::empty(pinned.sizes(), pinned.options().device(device).pinned_memory(false));
    out.copy_(pinned, /*non_blocking=*/true);
    return out;
  }
  HostStats Stats() const override { return counter_.Stats(); }
  void ResetPeak() override { counter_.ResetPeak(); }

 private:
  Counter counter_;
  std::mutex mutex_;
  std::unordered_map<void*, at::Tensor> pinned_;  // by data pointer, while an alias lives
};

}  // namespace

absl::StatusOr<HostPool*> HostPoolFor(const c10::Device& device) {
  if (device.is_cpu()) {
    static auto* pool = new CpuHostPool();  // leaked: tensors may outlive statics
    return pool;
  }
  if (device.is_cuda()) {
    static auto* pool = new CudaHostPool();
    return pool;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no host pool for device '", device.str(), "'; accepted: cpu, cuda"));
}

}  // namespace ckpt
