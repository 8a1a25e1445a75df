// The host pool: host memory where offloaded activations wait for the backward pass, counted
// apart from the device's meter, so that an offloading plan's device bytes and host bytes are
// two figures, each exact.
//
// On a CPU device the pool's blocks come from the system directly, not from the CPU meter's
// allocator: the meter then counts what a GPU would hold and the pool what its host would, and
// both count allocations as they happen (a host copy that outlives its use shows). On CUDA the
// blocks are pinned (page-locked) memory from LibTorch's pinned allocator, so that copies are
// asynchronous on the current stream, ordered with the compute around them and without waiting
// for the device; the pool counts the bytes it hands out until their tensors are freed.
//
//   ASSIGN_OR_RETURN(HostPool* pool, HostPoolFor(device));
//   at::Tensor kept = pool->ToHost(x);               // counted in pool->Stats()
//   at::Tensor back = pool->ToDevice(kept, device);  // from the device's allocator
//   kept.reset();                                    // no longer counted
#pragma once

#include <cstdint>

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"

namespace ckpt {

struct HostStats {
  int64_t live_bytes = 0;  // bytes of the pool's tensors alive now
  int64_t peak_bytes = 0;  // most live bytes since the last ResetPeak
};

class HostPool {
 public:
  virtual ~HostPool() = default;
  // A contiguous copy of `t` (undefined: undefined) in a block of this pool, counted until the
  // copy's storage is freed. Tensors in no autograd graph: the copy records none.
  virtual at::Tensor ToHost(const at::Tensor& t) = 0;
  // A copy of `host` (one of this pool's tensors, or undefined) on `device`, from that device's
  // allocator; on CUDA ordered after the copy out on the current stream.
  virtual at::Tensor ToDevice(const at::Tensor& host, const c10::Device& device) = 0;
  virtual HostStats Stats() const = 0;
  // Starts a new peak window at the current live bytes.
  virtual void ResetPeak() = 0;
};

// The pool for activations offloaded from `device` (cpu or cuda), created on first use; lives
// for the whole process. InvalidArgument for other devices.
absl::StatusOr<HostPool*> HostPoolFor(const c10::Device& device);

}  // namespace ckpt
