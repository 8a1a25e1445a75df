// Memory meters: live and peak bytes held by tensors, on CPU and CUDA, behind one interface.
//
// CPU: ckptlab's allocator, installed with c10::SetCPUAllocator, counts every byte that CPU
// tensors allocate and free, so live and peak bytes are exact (not sampled). It caches like
// CUDA's: freed blocks are kept, by size class, for the next request of their class, so that
// steps stop handing memory back to the system and faulting it in again, which on virtual
// machines is slow with a long tail; allocated bytes are the blocks serving tensors, reserved
// bytes those plus the cached free ones. It can also enforce a cap, throwing
// c10::OutOfMemoryError past it, so "does this fit in N GiB?" can be answered on CPU; a block
// the system refuses is the same error, with the counts left as they were. CUDA: the caching
// allocator's statistics, current and peak: the bytes tensors requested (live_bytes, the same
// quantity the CPU meter counts, so activation and peak bytes mean the same on both), the bytes of
// the blocks that serve them (allocated: rounded up to 512 bytes, or a whole segment when the rest
// is too small to split) and the bytes held from the driver (reserved: what the process occupies,
// cached free blocks included); the cap is the per-process memory fraction.
//
//   ASSIGN_OR_RETURN(MemoryMeter* meter, MemoryMeterFor(torch::kCPU));
//   meter->ResetPeak();
//   ... run a step ...
//   int64_t peak = meter->Stats().peak_bytes;
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "c10/core/Device.h"

namespace ckpt {

struct MemoryStats {
  int64_t live_bytes =
      0;  // bytes tensors requested and hold now (CUDA: see core/run/torch_compat.h)
  int64_t peak_bytes = 0;       // most live bytes since the last ResetPeak
  int64_t allocated_bytes = 0;  // the allocator's blocks serving them
  int64_t reserved_bytes = 0;   // bytes the allocator holds from the system, cache included
  int64_t peak_reserved_bytes = 0;
};

class MemoryMeter {
 public:
  virtual ~MemoryMeter() = default;
  virtual MemoryStats Stats() const = 0;
  // Starts a new peak window at the current live bytes.
  virtual void ResetPeak() = 0;
  // Allocations that would take live bytes past `bytes` fail with c10::OutOfMemoryError
  // (CPU) or the caching allocator's out-of-memory error (CUDA). nullopt removes the cap. On
  // CPU the cache is handed back before it would take reserved bytes past the cap.
  virtual absl::Status SetCap(std::optional<int64_t> bytes) = 0;
  // The cap SetCap set last (nullopt: none).
  virtual std::optional<int64_t> Cap() const = 0;
  // While on, the meter keeps the peak's candidates: the live bytes at the last ResetPeak, then
  // after each allocation since (peak_bytes is their largest), so that a peak measured at small
  // sizes can be extrapolated term by term (core/plan/extrapolate.h). CPU only: Unimplemented
  // elsewhere.
  virtual absl::Status TracePeaks(bool on) {
    if (!on) return absl::OkStatus();
    return absl::UnimplementedError(absl::StrCat(Describe(), " keeps no peak candidates"));
  }
  // The candidates since the last ResetPeak, while TracePeaks is on (else empty).
  virtual std::vector<int64_t> PeakCandidates() const { return {}; }
  // Hands the allocator's cached free blocks back to the system, so that reserved bytes start
  // over from the blocks tensors hold. CUDA: the caching allocator's emptyCache (every
  // device's cache).
  virtual void ReleaseCached() {}
  // "cpu (caching allocator, exact counts)" or "cuda:0 (caching allocator)".
  virtual std::string Describe() const = 0;
};

// Lowers the meter's cap to `bytes` (if that is lower than the cap in force) for a scope, and
// puts the cap in force back after it: how a harness caps the configuration it measures and
// not its own work around it.
class ScopedMemoryCap {
 public:
  ScopedMemoryCap(MemoryMeter& meter, std::optional<int64_t> bytes);
  ~ScopedMemoryCap();
  ScopedMemoryCap(const ScopedMemoryCap&) = delete;
  ScopedMemoryCap& operator=(const ScopedMemoryCap&) = delete;

 private:
  MemoryMeter& meter_;
  std::optional<int64_t> saved_;
};

// The bytes of memory this machine had available when first asked (MemAvailable in
// /proc/meminfo: free memory plus what the kernel can reclaim without swapping), or nullopt
// where that cannot be read.
std::optional<int64_t> AvailableMemoryBytes();

// The meter for `device`, created (and for CPU, its allocator installed) on first use; lives
// for the whole process. Tensors allocated on CPU before the first call are not counted.
// Unavailable for CUDA when this LibTorch has no CUDA or no GPU is present.
absl::StatusOr<MemoryMeter*> MemoryMeterFor(const c10::Device& device);

// Implemented in cuda_backend.cc (an Unavailable error without CUDA).
absl::StatusOr<MemoryMeter*> CudaMemoryMeter(c10::DeviceIndex index);

}  // namespace ckpt
