#include "core/run/host_pool.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <limits>
#include <mutex>
#include <utility>

#include "ATen/Functions.h"
#include "ATen/core/grad_mode.h"
#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"

namespace ckpt {
namespace {

// A CPU device's pool: blocks from the system (posix_memalign), freed by the tensor's deleter.
// Copies wait in a queue, in issue order, until a fence's Wait() does them and those before.
class CpuHostPool final : public HostPool {
 public:
  Transfer CopyToHost(const std::vector<at::Tensor>& ts) override {
    std::vector<at::Tensor> copies;
    for (const at::Tensor& t : ts) copies.push_back(t.defined() ? Allocate(t) : at::Tensor());
    return Enqueue(ts, std::move(copies));
  }
  Transfer CopyToDevice(const std::vector<at::Tensor>& host, const c10::Device& device) override {
    std::vector<at::Tensor> copies;
    for (const at::Tensor& h : host) {
      copies.push_back(h.defined() ? at::empty(h.sizes(), h.options().device(device))
                                   : at::Tensor());
    }
    return Enqueue(host, std::move(copies));
  }
  HostStats Stats() const override { return counter_.Stats(); }
  void ResetPeak() override { counter_.ResetPeak(); }
  void CheckOrder(bool on) override { check_order_ = on; }

 private:
  struct Copy {
    uint64_t fence;
    at::Tensor from, to;
  };
  class Fence final : public CopyFence {
   public:
    Fence(CpuHostPool* pool, uint64_t id) : pool_(pool), id_(id) {}
    ~Fence() override {
      try {
        Wait();
      } catch (...) {  // a copy that cannot be done leaves its destination unwritten
      }
    }
    void Wait() override {
      if (pool_ != nullptr) pool_->CopyThrough(id_);
      pool_ = nullptr;
    }

   private:
    CpuHostPool* pool_;
    uint64_t id_;
  };

  // A block of the system's for a copy of `t`, counted until the copy's storage is freed.
  at::Tensor Allocate(const at::Tensor& t) {
    const int64_t bytes = static_cast<int64_t>(t.numel() * t.element_size());
    void* data = nullptr;
    if (posix_memalign(&data, 64, std::max<size_t>(bytes, 1)) != 0) {
      C10_THROW_ERROR(OutOfMemoryError, absl::StrCat("ckptlab host pool: the system refused ",
                                                     bytes, " bytes for an offloaded tensor"));
    }
    counter_.Add(bytes);
    return at::from_blob(
        data, t.sizes(),
        [this, bytes](void* p) {
          std::free(p);
          counter_.Sub(bytes);
        },
        t.options().device(c10::kCPU).requires_grad(false));
  }

  Transfer Enqueue(const std::vector<at::Tensor>& from, std::vector<at::Tensor> to) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t id = ++issued_;
    for (size_t i = 0; i < from.size(); ++i) {
      if (!to[i].defined()) continue;
      if (check_order_) Poison(to[i]);
      queue_.push_back({id, from[i], to[i]});
    }
    return {std::move(to), std::make_unique<Fence>(this, id)};
  }

  // Does the queued copies of fence `id` and of every fence issued before it.
  void CopyThrough(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    at::NoGradGuard no_grad;
    while (!queue_.empty() && queue_.front().fence <= id) {
      queue_.front().to.copy_(queue_.front().from);
      queue_.pop_front();  // the source goes: a host block's bytes are no longer counted
    }
  }

  HostCounter counter_;
  std::mutex mutex_;
  std::deque<Copy> queue_;
  uint64_t issued_ = 0;
  bool check_order_ = false;
};

// The storages some tensors name, each once, as flat byte tensors over the whole of each, and
// for each tensor the index of its storage's (-1 for an undefined one).
struct Flattened {
  explicit Flattened(const std::vector<at::Tensor>& ts) {
    std::vector<const c10::StorageImpl*> ids;
    for (const at::Tensor& t : ts) {
      if (!t.defined()) {
        of.push_back(-1);
        continue;
      }
      const c10::StorageImpl* id = t.storage().unsafeGetStorageImpl();
      const auto at = std::find(ids.begin(), ids.end(), id);
      of.push_back(static_cast<int>(at - ids.begin()));
      if (at != ids.end()) continue;
      ids.push_back(id);
      const int64_t bytes = static_cast<int64_t>(t.storage().nbytes());
      flats.push_back(at::empty({0}, t.options().dtype(at::kByte).requires_grad(false))
                          .set_(t.storage(), 0, {bytes}, {1}));
      total += bytes;
    }
  }
  // Each of `ts` as the same view of copies[of[i]] (the copies of `flats`); a tensor named
  // twice comes back as one tensor.
  std::vector<at::Tensor> Views(const std::vector<at::Tensor>& ts,
                                const std::vector<at::Tensor>& copies) const {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < ts.size(); ++i) {
      const at::Tensor& t = ts[i];
      size_t same = 0;
      while (same < i && !(t.defined() && ts[same].is_same(t))) ++same;
      if (same < i) {
        out.push_back(out[same]);
      } else if (of[i] < 0) {
        out.emplace_back();
      } else {
        out.push_back(
            at::empty({0}, copies[of[i]].options().dtype(t.dtype()))
                .set_(copies[of[i]].storage(), t.storage_offset(), t.sizes(), t.strides()));
      }
    }
    return out;
  }

  std::vector<at::Tensor> flats;
  std::vector<int> of;
  int64_t total = 0;
};

}  // namespace

Transfer HostPool::ToHost(const std::vector<at::Tensor>& ts) {
  const Flattened storages(ts);
  Transfer copied = CopyToHost(storages.flats);
  return {storages.Views(ts, copied.tensors), std::move(copied.done), storages.total};
}

Transfer HostPool::ToDevice(const std::vector<at::Tensor>& host, const c10::Device& device) {
  const Flattened storages(host);
  Transfer copied = CopyToDevice(storages.flats, device);
  return {storages.Views(host, copied.tensors), std::move(copied.done), storages.total};
}

void HostCounter::Add(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  live_ += bytes;
  peak_ = std::max(peak_, live_);
}

void HostCounter::Sub(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  live_ -= bytes;
}

HostStats HostCounter::Stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {live_, peak_};
}

void HostCounter::ResetPeak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = live_;
}

void Poison(at::Tensor& t) {
  at::NoGradGuard no_grad;
  if (t.is_floating_point() || t.is_complex()) {
    t.fill_(std::numeric_limits<double>::quiet_NaN());
  } else {
    t.fill_(-1);
  }
}

absl::StatusOr<HostPool*> HostPoolFor(const c10::Device& device) {
  if (device.is_cpu()) {
    static auto* pool = new CpuHostPool();  // leaked: tensors may outlive statics
    return pool;
  }
  if (device.is_cuda()) return CudaHostPool(device.has_index() ? device.index() : -1);
  return absl::InvalidArgumentError(
      absl::StrCat("no host pool for device '", device.str(), "'; accepted: cpu, cuda"));
}

}  // namespace ckpt
