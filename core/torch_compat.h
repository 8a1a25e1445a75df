// The LibTorch C++ API differences between the versions ckptlab builds against, in one place:
// Debian 12's LibTorch 1.13 and the 2.x of official distributions and pip packages.
//
// - c10::Allocator: since 2.3 `allocate` is no longer const and `copy_data` is pure virtual
//   (absent in 1.13). Allocators declare `allocate(...) CKPT_ALLOCATE_CONST override` and
//   define copy_data without `override` (core/memory_meter.cc).
// - CUDA caching-allocator statistics: the stat-type enum moved from
//   c10::cuda::CUDACachingAllocator::StatType (1.13) to c10::CachingAllocator::StatType (2.x)
//   and DeviceStats to c10::CachingDeviceAllocator (2.6+). Both keep `getDeviceStats` in
//   c10::cuda::CUDACachingAllocator and index the stat arrays by the enum's value, with
//   AGGREGATE = 0; kAggregateStat names that index so no version's type name is spelled.
#pragma once

#include <cstddef>

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

// Index of the AGGREGATE entry (all pool types together) in the CUDA allocator's StatArray.
inline constexpr std::size_t kAggregateStat = 0;

}  // namespace ckpt::compat
