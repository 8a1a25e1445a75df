// A device's times from a profile's work instead of the times measured where it was profiled:
// how --predict answers for a card that is not in hand (--device_model=h100).
//
// Each pass of a stage is priced from the work the profiler counted (OpWork). The device's time is
// its matrix products at the device's product rate, the bytes its operators read and write at its
// memory rate, and a fixed cost per operator (a kernel's tail): a roofline summed over the pass,
// not per operator, and without fused kernels' savings. The host issues the pass's operators at
// a cost per operator that depends on the pass (recording the graph, running without it, the
// autograd engine's backward), and a pass takes the longer of the two: small models wait for the
// host. docs/performance.md says how the figures were set on the measured H100 runs and where the
// model misses.
//
//   ASSIGN_OR_RETURN(const DeviceModel* h100, FindDeviceModel("h100"));
//   RETURN_IF_ERROR(PriceProfile(*h100, profile));  // its times are h100's now
//
// Needs no LibTorch.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/plan/profile.h"

namespace ckpt {

// Which pass of a stage (or the loss) a work count is of.
enum class Pass { kForward, kNoGradForward, kBackward };

// The host's time to issue one operator, per pass (ms).
struct HostCosts {
  double forward_ms_per_op = 0;         // forward recording the graph
  double nograd_forward_ms_per_op = 0;  // forward without a graph (before a recomputation)
  double backward_ms_per_op = 0;        // the autograd engine's backward
};

struct DeviceModel {
  std::string name;                 // as --device_model names it
  std::string described;            // "NVIDIA H100 SXM (80 GB HBM3)"
  double float32_flops_per_ms = 0;  // matrix products in float32 (no TF32)
  double half_flops_per_ms = 0;     // in bfloat16 or float16 (autocast)
  double bytes_per_ms = 0;          // memory reads and writes
  double ms_per_op = 0;             // each operator's fixed cost on the device
  HostCosts host;                   // issuing the operators
  double link_bytes_per_ms = 0;     // offload copies each way (host link)
  std::string calibrated;           // where the figures come from

  // The device's time of `work`, under autocast when `half` (products at the half rate).
  double Ms(const OpWork& work, bool half) const;
  // The host's time to issue `work`'s operators in `pass`.
  double HostMs(const OpWork& work, Pass pass) const;
  // A pass's time: the longer of the device's and the host's.
  double PassMs(const OpWork& work, Pass pass, bool half) const;
};

// The device models --device_model accepts, by name.
const std::vector<DeviceModel>& DeviceModels();
// The model named `name`; InvalidArgument naming it (as --device_model, escaped) and the accepted
// names.
absl::StatusOr<const DeviceModel*> FindDeviceModel(absl::string_view name);

// `profile`'s times (every stage's passes, the loss's, the offload link) replaced by `device`'s
// prices of their work, the profile marked timed. FailedPrecondition where a stage has no work
// counted (a profile made before the profiler counted it).
absl::Status PriceProfile(const DeviceModel& device, ModelProfile& profile);

}  // namespace ckpt
