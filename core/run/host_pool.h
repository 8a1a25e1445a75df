// The host pool: host memory where offloaded activations wait for the backward pass, counted
// apart from the device's meter, so that an offloading plan's device bytes and host bytes are
// two figures, each exact.
//
// Copies between the device and the pool run beside the device's compute, in the order they
// are issued, as one copy engine would run them; a Transfer's fence orders the compute after its
// copy. The contract, the same on every device:
//   - a copy's sources stay alive and unchanged until its fence's Wait();
//   - its results are read by the compute only after Wait() (host results may be handed to
//     ToDevice before it: copies run in issue order);
//   - Wait() costs the compute only what of the copy is still running.
// On CUDA the copies run on a stream of the pool's own and the fences are CUDA events that the
// compute stream waits on: a copy out runs beside the compute that follows it until Wait(), and
// no step synchronises the whole device. The host blocks are pinned memory from LibTorch's
// pinned allocator, which reuses a block only once the copies that use it are done; the pool
// counts the bytes it hands out until their tensors are freed. On a CPU device each copy is
// done at the Wait() of its fence or of a later one (a memcpy the step waits for either way),
// and its host blocks come from the system directly, not from the CPU meter's allocator: the
// meter then counts what a GPU would hold and the pool what its host would, and both count
// allocations as they happen (a host copy that outlives its use shows).
//
// With CheckOrder(true), a copy's results hold NaN (-1 for integers) until it is done, so a
// reader that skipped a Wait() reads poison: on a CPU device always, on CUDA unless the copy
// happened to finish first. The conformance suite runs so.
//
//   ASSIGN_OR_RETURN(HostPool* pool, HostPoolFor(device));
//   Transfer out = pool->ToHost({x});                // host bytes counted in pool->Stats()
//   ...                                              // compute that reads x, beside the copy
//   out.done->Wait();                                // now x may go
//   Transfer back = pool->ToDevice(out.tensors, device);  // from the device's allocator
//   out.tensors.clear();                             // host bytes no longer counted
//   ...                                              // compute beside the copy back
//   back.done->Wait();                               // back.tensors may be read
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"

namespace ckpt {

struct HostStats {
  int64_t live_bytes = 0;  // bytes of the pool's tensors alive now
  int64_t peak_bytes = 0;  // most live bytes since the last ResetPeak
};

// The end of one ToHost or ToDevice call's copies.
class CopyFence {
 public:
  virtual ~CopyFence() = default;
  // Orders the device's compute after the copies: from here the compute may read their results
  // and reuse their sources' memory. Idempotent; the destructor waits where no call did.
  virtual void Wait() = 0;
};

struct Transfer {
  std::vector<at::Tensor> tensors;  // the copies, one per source (undefined for undefined)
  std::unique_ptr<CopyFence> done;
  int64_t bytes = 0;  // the storages copied
};

class HostPool {
 public:
  virtual ~HostPool() = default;
  // Copies of `ts` in blocks of this pool, each counted until its storage is freed. What is
  // copied is storages, as the allocator holds them (core/plan/profile.h): each storage the
  // tensors name, once and whole, and each copy is the same view of its storage's copy as its
  // source is of its storage (two tensors sharing one share one copy). Tensors in no autograd
  // graph: the copies record none.
  Transfer ToHost(const std::vector<at::Tensor>& ts);
  // Copies of `host` (this pool's tensors) on `device`, from that device's allocator, the same
  // way.
  Transfer ToDevice(const std::vector<at::Tensor>& host, const c10::Device& device);
  virtual HostStats Stats() const = 0;
  // Starts a new peak window at the current live bytes.
  virtual void ResetPeak() = 0;
  // Whether copies' results hold poison until their copies are done (above). Off by default.
  virtual void CheckOrder(bool on) = 0;

 protected:
  // A contiguous copy of each of `flats` (whole storages, as bytes), one per source.
  virtual Transfer CopyToHost(const std::vector<at::Tensor>& flats) = 0;
  virtual Transfer CopyToDevice(const std::vector<at::Tensor>& flats,
                                const c10::Device& device) = 0;
};

// The pool for activations offloaded from `device` (cpu or cuda), created on first use; lives
// for the whole process. InvalidArgument for other devices.
absl::StatusOr<HostPool*> HostPoolFor(const c10::Device& device);

// The pool of CUDA device `index`. Implemented in cuda_backend.cc (Unavailable without CUDA).
absl::StatusOr<HostPool*> CudaHostPool(c10::DeviceIndex index);

// What the pools share: their live and peak bytes, thread-safe.
class HostCounter {
 public:
  void Add(int64_t bytes);
  void Sub(int64_t bytes);
  HostStats Stats() const;
  void ResetPeak();

 private:
  mutable std::mutex mutex_;
  int64_t live_ = 0, peak_ = 0;
};

// Fills `t` with the poison CheckOrder describes: NaN, or -1 for integer and boolean tensors.
void Poison(at::Tensor& t);

}  // namespace ckpt
