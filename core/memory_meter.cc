#include "core/memory_meter.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "c10/core/Allocator.h"
#include "c10/core/CPUAllocator.h"
#include "c10/core/impl/alloc_cpu.h"
#include "c10/util/Exception.h"
#include "core/torch_compat.h"

namespace ckpt {
namespace {

// Each allocation is preceded by a header that records its size, so the deleter, which gets
// only the data pointer, can subtract it. The header is one alignment unit, keeping the data
// as aligned as c10's own CPU allocations. The context is the data pointer itself, as
// LibTorch's raw_allocate/raw_deallocate (used by some kernels for scratch space) require.
constexpr size_t kHeaderBytes = 64;

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) CKPT_ALLOCATE_CONST override {
    if (nbytes == 0) return {nullptr, nullptr, &Delete, c10::Device(c10::DeviceType::CPU)};
    const int64_t size = static_cast<int64_t>(nbytes);
    const int64_t live = live_.fetch_add(size) + size;
    const int64_t cap = cap_.load();
    if (cap >= 0 && live > cap) {
      live_.fetch_sub(size);
      C10_THROW_ERROR(OutOfMemoryError,
                      absl::StrCat("ckptlab CPU memory cap: allocating ", nbytes,
                                   " bytes would bring tensors to ", live, " bytes, over the cap of ",
                                   cap, " bytes"));
    }
    UpdatePeak(live);
    void* base = c10::alloc_cpu(nbytes + kHeaderBytes);
    *static_cast<int64_t*>(base) = size;
    void* data = static_cast<char*>(base) + kHeaderBytes;
    return {data, data, &Delete, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }

  // Pure virtual in LibTorch 2.3+, absent in 1.13: no `override` (see core/torch_compat.h).
  void copy_data(void* dest, const void* src, std::size_t count) const {
    std::memcpy(dest, src, count);
  }

  MemoryStats Stats() const {
    const int64_t live = live_.load();
    const int64_t peak = peak_.load();
    return {live, peak, live, peak, live, peak};
  }
  void ResetPeak() { peak_.store(live_.load()); }
  void SetCap(int64_t cap) { cap_.store(cap); }

  static CountingCpuAllocator& Instance() {
    static auto* allocator = new CountingCpuAllocator();  // leaked: tensors outlive statics
    return *allocator;
  }

 private:
  static void Delete(void* data) {
    if (data == nullptr) return;
    void* base = static_cast<char*>(data) - kHeaderBytes;
    Instance().live_.fetch_sub(*static_cast<int64_t*>(base));
    c10::free_cpu(base);
  }

  void UpdatePeak(int64_t live) const {
    int64_t peak = peak_.load();
    while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
    }
  }

  mutable std::atomic<int64_t> live_{0};
  mutable std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> cap_{-1};
};

class CpuMemoryMeter final : public MemoryMeter {
 public:
  CpuMemoryMeter() {
    // Priority 100: wins over LibTorch's default CPU allocator (priority 0) and stays.
    c10::SetCPUAllocator(&CountingCpuAllocator::Instance(), /*priority=*/100);
  }
  MemoryStats Stats() const override { return CountingCpuAllocator::Instance().Stats(); }
  void ResetPeak() override { CountingCpuAllocator::Instance().ResetPeak(); }
  absl::Status SetCap(std::optional<int64_t> bytes) override {
    if (bytes.has_value() && *bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory cap ", *bytes, " is negative; accepted: bytes >= 0"));
    }
    CountingCpuAllocator::Instance().SetCap(bytes.value_or(-1));
    return absl::OkStatus();
  }
  std::string Describe() const override { return "cpu (counting allocator, exact)"; }
};

}  // namespace

absl::StatusOr<MemoryMeter*> MemoryMeterFor(const c10::Device& device) {
  if (device.is_cpu()) {
    static auto* meter = new CpuMemoryMeter();
    return meter;
  }
  if (device.is_cuda()) return CudaMemoryMeter(device.has_index() ? device.index() : 0);
  return absl::InvalidArgumentError(
      absl::StrCat("no memory meter for device '", device.str(), "'; accepted: cpu, cuda"));
}

}  // namespace ckpt
