// Memory meters: live and peak bytes held by tensors, on CPU and CUDA, behind one interface.
//
// CPU: a counting allocator installed with c10::SetCPUAllocator counts every byte that CPU
// tensors allocate and free, so live and peak bytes are exact (not sampled). It can also
// enforce a cap, throwing c10::OutOfMemoryError past it, so "does this fit in N GiB?" can be
// answered on CPU. CUDA: the caching allocator's statistics, current and peak: the bytes
// tensors requested (live_bytes, the same quantity the CPU meter counts, so activation and
// peak bytes mean the same on both), the bytes of the blocks that serve them (allocated:
// rounded up to 512 bytes, or a whole segment when the rest is too small to split) and the
// bytes held from the driver (reserved: what the process occupies, cached free blocks
// included); the cap is the per-process memory fraction.
//
//   ASSIGN_OR_RETURN(MemoryMeter* meter, MemoryMeterFor(torch::kCPU));
//   meter->ResetPeak();
//   ... run a step ...
//   int64_t peak = meter->Stats().peak_bytes;
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "c10/core/Device.h"

namespace ckpt {

struct MemoryStats {
  int64_t live_bytes = 0;  // bytes tensors requested and hold now (CUDA: see core/torch_compat.h)
  int64_t peak_bytes = 0;  // most live bytes since the last ResetPeak
  int64_t allocated_bytes = 0;       // the allocator's blocks serving them (CPU: = live)
  int64_t peak_allocated_bytes = 0;  // (CPU: = peak)
  int64_t reserved_bytes = 0;        // bytes the allocator holds from the system (CPU: = live)
  int64_t peak_reserved_bytes = 0;   // (CPU: = peak)
};

class MemoryMeter {
 public:
  virtual ~MemoryMeter() = default;
  virtual MemoryStats Stats() const = 0;
  // Starts a new peak window at the current live bytes.
  virtual void ResetPeak() = 0;
  // Allocations that would take live bytes past `bytes` fail with c10::OutOfMemoryError
  // (CPU) or the caching allocator's out-of-memory error (CUDA). nullopt removes the cap.
  virtual absl::Status SetCap(std::optional<int64_t> bytes) = 0;
  // Hands the allocator's cached free blocks back to the system, so that reserved bytes start
  // over from the blocks tensors hold. CUDA: the caching allocator's emptyCache (every
  // device's cache). CPU caches nothing: nothing to do.
  virtual void ReleaseCached() {}
  // "cpu (counting allocator, exact)" or "cuda:0 (caching allocator)".
  virtual std::string Describe() const = 0;
};

// The meter for `device`, created (and for CPU, its allocator installed) on first use; lives
// for the whole process. Tensors allocated on CPU before the first call are not counted.
// Unavailable for CUDA when this LibTorch has no CUDA or no GPU is present.
absl::StatusOr<MemoryMeter*> MemoryMeterFor(const c10::Device& device);

// Implemented in cuda_backend.cc (an Unavailable error without CUDA).
absl::StatusOr<MemoryMeter*> CudaMemoryMeter(c10::DeviceIndex index);

}  // namespace ckpt
