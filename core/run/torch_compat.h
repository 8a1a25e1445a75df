// The LibTorch C++ API differences between the versions ckptlab builds against, in one place:
// Debian 12's LibTorch 1.13 and the 2.x of official distributions and pip packages.
//
// - c10::Allocator: since 2.3 `allocate` is no longer const and `copy_data` is pure virtual
//   (absent in 1.13). Allocators declare `allocate(...) CKPT_ALLOCATE_CONST override` and
//   define copy_data without `override` (core/run/memory_meter.cc).
// - CUDA caching-allocator statistics: the stat-type enum moved from
//   c10::cuda::CUDACachingAllocator::StatType (1.13) to c10::CachingAllocator::StatType (2.x)
//   and DeviceStats to c10::CachingDeviceAllocator (2.6+). Both keep `getDeviceStats` in
//   c10::cuda::CUDACachingAllocator and index the stat arrays by the enum's value, with
//   AGGREGATE = 0; kAggregateStat names that index so no version's type name is spelled.
// - Autocast state: per-device functions (is_cpu_enabled, get_autocast_cpu_dtype, ...) in
//   1.13, one function taking a device type (is_autocast_enabled(kCPU), ...) since 2.4.
//   GetAutocast/SetAutocast below hide the difference (in torch_compat.cc, so that this header
//   needs no ATen/autocast_mode.h, which includes all of ATen).
// - The caching allocator counts the bytes tensors requested (requested_bytes) since 2.1;
//   1.13 has only allocated_bytes, rounded up to its 512-byte blocks. RequestedBytes picks the
//   first where it exists, so CUDA live and peak bytes are exact, as on CPU.
// - scaled_dot_product_attention (fused attention kernels) exists since 2.0: kHasFusedAttention.
// - The autograd engine sums two gradients for one input in place since 2.0:
//   kEngineSumsInPlace.
#pragma once

#include <cstddef>
#include <optional>

#include "c10/core/DeviceType.h"
#include "c10/core/ScalarType.h"
#include "torch/version.h"

#define CKPT_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||               \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if CKPT_TORCH_VERSION_AT_LEAST(2, 3)
#define CKPT_ALLOCATE_CONST
#else
#define CKPT_ALLOCATE_CONST const
#endif

namespace ckpt::compat {

// Whether at::scaled_dot_product_attention exists (LibTorch 2.0 and newer).
inline constexpr bool kHasFusedAttention = CKPT_TORCH_VERSION_AT_LEAST(2, 0);

// Whether the autograd engine, when a second gradient for one input of a node arrives, adds it
// into the first in place where the first is a contiguous tensor whose storage nothing else
// shares (PyTorch pull request 88339, LibTorch 2.0). 1.13 always makes a new tensor for the
// sum of two dense gradients; a view (a transposed product's gradient) shares its base's
// storage and gets a new tensor on every version.
inline constexpr bool kEngineSumsInPlace = CKPT_TORCH_VERSION_AT_LEAST(2, 0);

// Index of the AGGREGATE entry (all pool types together) in the CUDA allocator's StatArray.
inline constexpr std::size_t kAggregateStat = 0;

// Whether the CUDA allocator's statistics have requested_bytes (exact) or only allocated_bytes.
inline constexpr bool kRequestedBytesExact = CKPT_TORCH_VERSION_AT_LEAST(2, 1);

// The AGGREGATE requested-bytes Stat of a CUDA DeviceStats (allocated bytes before 2.1).
template <typename DeviceStats>
const auto& RequestedBytes(const DeviceStats& stats) {
#if CKPT_TORCH_VERSION_AT_LEAST(2, 1)
  return stats.requested_bytes[kAggregateStat];
#else
  return stats.allocated_bytes[kAggregateStat];
#endif
}

// Autocast's thread-local state for CPU and CUDA.
struct AutocastState {
  bool cpu = false;
  c10::ScalarType cpu_dtype = c10::ScalarType::BFloat16;
  bool cuda = false;
  c10::ScalarType cuda_dtype = c10::ScalarType::Half;
};

// Autocast to `dtype` on a device of type `device` (CPU or CUDA), off on the other; all off
// without a dtype.
inline AutocastState AutocastOn(c10::DeviceType device, std::optional<c10::ScalarType> dtype) {
  AutocastState state;
  if (!dtype) return state;
  (device == c10::DeviceType::CUDA ? state.cuda : state.cpu) = true;
  (device == c10::DeviceType::CUDA ? state.cuda_dtype : state.cpu_dtype) = *dtype;
  return state;
}

// The autocast state of this thread, and setting it (the autocast cache cleared when all is off).
AutocastState GetAutocast();
void SetAutocast(const AutocastState& s);

// Sets an autocast state for a scope (the autocast cache off) and restores the previous one
// after it.
class ScopedAutocast {
 public:
  explicit ScopedAutocast(const AutocastState& state);
  ~ScopedAutocast();
  ScopedAutocast(const ScopedAutocast&) = delete;
  ScopedAutocast& operator=(const ScopedAutocast&) = delete;

 private:
  AutocastState saved_;
  bool saved_cache_;
};

}  // namespace ckpt::compat
