#include "core/run/memory_meter.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "c10/core/Allocator.h"
#include "c10/core/CPUAllocator.h"
#include "c10/util/Exception.h"
#include "core/base/files.h"
#include "core/run/torch_compat.h"

namespace ckpt {
namespace {

// Each block starts with a header recording the bytes the tensor asked for and the block's
// size, so the deleter, which gets only the data pointer, can count the free. The header is one
// alignment unit, keeping the data as aligned as c10's own CPU allocations. The context is the
// data pointer itself, as LibTorch's raw_allocate/raw_deallocate (used by some kernels for
// scratch space) require.
constexpr size_t kHeaderBytes = 64;
struct BlockHeader {
  int64_t requested;  // what the tensor asked for: what live bytes count
  int64_t block;      // the block's data bytes (a size class): what it occupies
};
static_assert(sizeof(BlockHeader) <= kHeaderBytes);

// The block size that serves a request of `n` bytes: up to 4 KiB a multiple of 64 bytes, above
// it `n` rounded up to a quarter of its power of two (at most 25% more, so that a request of a
// size seen before, or near it, finds a cached block of its class).
size_t BlockBytes(size_t n) {
  if (n <= 4096) return (n + 63) & ~size_t{63};
  int log2 = 0;
  while ((size_t{2} << log2) <= n) ++log2;  // 2^log2 <= n < 2^(log2 + 1)
  const size_t step = size_t{1} << (log2 - 2);
  return (n + step - 1) & ~(step - 1);
}

// The CPU allocator, caching like CUDA's: a freed block is kept, by its size class, for the
// next request of that class, so that a training step, which frees and asks again for the same
// sizes every step, stops handing memory back to the system and faulting it in again (a freed
// and re-faulted page is slow, with a long tail, on virtual machines). Counts, all exact:
//   live      the bytes tensors asked for and hold (what the memory model predicts);
//   allocated the blocks serving them (their size classes);
//   reserved  every block held from the system: allocated plus the cached free ones.
// The cap bounds live bytes; before a new block would take reserved bytes past it, the cache is
// handed back. A block the system refuses is an out-of-memory error after the cache has been
// handed back and the request retried once; the counts are then as they were.
class CachingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) CKPT_ALLOCATE_CONST override {
    if (nbytes == 0) return {nullptr, nullptr, &Delete, c10::Device(c10::DeviceType::CPU)};
    const int64_t requested = static_cast<int64_t>(nbytes);
    const int64_t block = static_cast<int64_t>(BlockBytes(nbytes));
    void* data = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cap_ >= 0 && live_ + requested > cap_) {
        const int64_t wanted = live_ + requested;
        C10_THROW_ERROR(OutOfMemoryError,
                        absl::StrCat("ckptlab CPU memory cap: allocating ", nbytes,
                                     " bytes would bring tensors to ", wanted,
                                     " bytes, over the cap of ", cap_, " bytes"));
      }
      data = TakeCached(block);
      if (data == nullptr) {
        if (cap_ >= 0 && reserved_ + block > cap_) ReleaseCachedLocked();
        data = FromSystem(block);
        if (data == nullptr && cached_bytes_ > 0) {
          ReleaseCachedLocked();
          data = FromSystem(block);
        }
        if (data == nullptr) {
          C10_THROW_ERROR(OutOfMemoryError,
                          absl::StrCat("ckptlab CPU allocator: the system refused ", block,
                                       " bytes (for a tensor of ", nbytes, " bytes, with ", live_,
                                       " bytes of tensors live)"));
        }
        reserved_ += block;
        peak_reserved_ = std::max(peak_reserved_, reserved_);
      }
      BlockHeader* header = HeaderOf(data);
      header->requested = requested;
      header->block = block;
      live_ += requested;
      allocated_ += block;
      peak_ = std::max(peak_, live_);
      if (tracing_) candidates_.push_back(live_);
    }
    return {data, data, &Delete, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }

  // Pure virtual in LibTorch 2.3+, absent in 1.13: no `override` (see core/run/torch_compat.h).
  void copy_data(void* dest, const void* src, std::size_t count) const {
    std::memcpy(dest, src, count);
  }

  MemoryStats Stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {live_, peak_, allocated_, reserved_, peak_reserved_};
  }
  void ResetPeak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = live_;
    peak_reserved_ = reserved_;
    if (tracing_) candidates_.assign(1, live_);
  }
  void TracePeaks(bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    tracing_ = on;
    candidates_.assign(on ? 1 : 0, live_);
  }
  std::vector<int64_t> PeakCandidates() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return candidates_;
  }
  void SetCap(int64_t cap) {
    std::lock_guard<std::mutex> lock(mutex_);
    cap_ = cap;
  }
  void ReleaseCached() {
    std::lock_guard<std::mutex> lock(mutex_);
    ReleaseCachedLocked();
  }

  static CachingCpuAllocator& Instance() {
    static auto* allocator = new CachingCpuAllocator();  // leaked: tensors outlive statics
    return *allocator;
  }

 private:
  static BlockHeader* HeaderOf(void* data) {
    return reinterpret_cast<BlockHeader*>(static_cast<char*>(data) - kHeaderBytes);
  }

  static void Delete(void* data) {
    if (data == nullptr) return;
    Instance().Free(data);
  }

  void Free(void* data) {
    std::lock_guard<std::mutex> lock(mutex_);
    const BlockHeader* header = HeaderOf(data);
    live_ -= header->requested;
    allocated_ -= header->block;
    cached_bytes_ += header->block;
    cache_[header->block].push_back(data);
  }

  // A cached block of exactly this size class, or nullptr.
  void* TakeCached(int64_t block) const {
    auto it = cache_.find(block);
    if (it == cache_.end() || it->second.empty()) return nullptr;
    void* data = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= block;
    return data;
  }

  // A new block's data from the system (its header before it), or nullptr if refused.
  static void* FromSystem(int64_t block) {
    void* base = nullptr;
    if (posix_memalign(&base, kHeaderBytes, kHeaderBytes + static_cast<size_t>(block)) != 0) {
      return nullptr;
    }
    return static_cast<char*>(base) + kHeaderBytes;
  }

  void ReleaseCachedLocked() const {
    for (auto& [block, blocks] : cache_) {
      for (void* data : blocks) std::free(static_cast<char*>(data) - kHeaderBytes);
      reserved_ -= block * static_cast<int64_t>(blocks.size());
    }
    cache_.clear();
    cached_bytes_ = 0;
  }

  // `allocate` is const in LibTorch 1.13's interface, so what it changes is mutable.
  mutable std::mutex mutex_;
  mutable std::unordered_map<int64_t, std::vector<void*>> cache_;  // free blocks by size
  mutable int64_t cached_bytes_ = 0;
  mutable int64_t live_ = 0, peak_ = 0;
  mutable int64_t allocated_ = 0;
  mutable int64_t reserved_ = 0, peak_reserved_ = 0;
  int64_t cap_ = -1;  // on live bytes; -1: none
  bool tracing_ = false;
  mutable std::vector<int64_t> candidates_;  // while tracing: MemoryMeter::PeakCandidates
};

class CpuMemoryMeter final : public MemoryMeter {
 public:
  CpuMemoryMeter() {
    // Priority 100: wins over LibTorch's default CPU allocator (priority 0) and stays.
    c10::SetCPUAllocator(&CachingCpuAllocator::Instance(), /*priority=*/100);
  }
  MemoryStats Stats() const override { return CachingCpuAllocator::Instance().Stats(); }
  void ResetPeak() override { CachingCpuAllocator::Instance().ResetPeak(); }
  absl::Status SetCap(std::optional<int64_t> bytes) override {
    if (bytes.has_value() && *bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory cap ", *bytes, " is negative; accepted: bytes >= 0"));
    }
    CachingCpuAllocator::Instance().SetCap(bytes.value_or(-1));
    cap_ = bytes;
    return absl::OkStatus();
  }
  std::optional<int64_t> Cap() const override { return cap_; }
  void ReleaseCached() override { CachingCpuAllocator::Instance().ReleaseCached(); }
  absl::Status TracePeaks(bool on) override {
    CachingCpuAllocator::Instance().TracePeaks(on);
    return absl::OkStatus();
  }
  std::vector<int64_t> PeakCandidates() const override {
    return CachingCpuAllocator::Instance().PeakCandidates();
  }
  std::string Describe() const override { return "cpu (caching allocator, exact counts)"; }

 private:
  std::optional<int64_t> cap_;
};

}  // namespace

ScopedMemoryCap::ScopedMemoryCap(MemoryMeter& meter, std::optional<int64_t> bytes)
    : meter_(meter), saved_(meter.Cap()) {
  if (bytes.has_value() && (!saved_.has_value() || *bytes < *saved_)) {
    meter_.SetCap(bytes).IgnoreError();  // a negative cap is refused where it is parsed
  }
}

ScopedMemoryCap::~ScopedMemoryCap() { meter_.SetCap(saved_).IgnoreError(); }

std::optional<int64_t> AvailableMemoryBytes() {
  static const std::optional<int64_t> available = []() -> std::optional<int64_t> {
    absl::StatusOr<std::string> meminfo = ReadRegularFile("/proc/meminfo", int64_t{1} << 20);
    if (!meminfo.ok()) return std::nullopt;
    for (absl::string_view line : absl::StrSplit(*meminfo, '\n')) {
      int64_t kib = 0;
      if (absl::ConsumePrefix(&line, "MemAvailable:") &&
          absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(line), " kB"), &kib) &&
          kib >= 0 && kib <= std::numeric_limits<int64_t>::max() / 1024) {
        return kib * 1024;
      }
    }
    return std::nullopt;
  }();
  return available;
}

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
