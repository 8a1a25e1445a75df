#include "core/plan/device_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/printable.h"

namespace ckpt {

double DeviceModel::Ms(const OpWork& work, bool half) const {
  const double flops_per_ms = half ? half_flops_per_ms : float32_flops_per_ms;
  return static_cast<double>(work.matmul_flops) / flops_per_ms +
         static_cast<double>(work.bytes) / bytes_per_ms + static_cast<double>(work.ops) * ms_per_op;
}

double DeviceModel::HostMs(const OpWork& work, Pass pass) const {
  const double per_op = pass == Pass::kForward         ? host.forward_ms_per_op
                        : pass == Pass::kNoGradForward ? host.nograd_forward_ms_per_op
                                                       : host.backward_ms_per_op;
  return static_cast<double>(work.ops) * per_op;
}

double DeviceModel::PassMs(const OpWork& work, Pass pass, bool half) const {
  return std::max(Ms(work, half), HostMs(work, pass));
}

const std::vector<DeviceModel>& DeviceModels() {
  // Rates per ms: TFLOP/s x 1e9, GB/s x 1e6. The host's costs are those the H100's host showed
  // on the paper preset's small models (docs/performance.md): 24 us an operator recording the
  // graph or in backward, 18 us without a graph. Every model keeps them: its host is a guess.
  constexpr HostCosts kHost{0.024, 0.018, 0.024};
  static const auto* models = new std::vector<DeviceModel>{
      {"h100", "NVIDIA H100 SXM, 80 GB HBM3", 29.6e9, 600e9, 2.6e9, 0.006, kHost, 50e6,
       "float32 products at the 29.6 TFLOP/s measured on the card, bfloat16 at 61% of the "
       "published 989 (dense), memory at 78% of 3.35 TB/s, 6 us an operator, the host's cost per "
       "operator set on the card's small-model run (docs/performance.md sets its step ratios "
       "beside the card's)"},
      // The H100's efficiencies (44% of float32's peak, 61% of half's, 78% of the memory's) on
      // each card's published peaks; PCIe 4's host link.
      {"a100", "NVIDIA A100 SXM, 80 GB HBM2e", 8.6e9, 189e9, 1.59e9, 0.006, kHost, 25e6,
       "the H100's efficiencies on the published peaks (19.5 TFLOP/s float32, 312 bfloat16, "
       "2.04 TB/s) and the H100's host; not measured"},
      {"l4", "NVIDIA L4, 24 GB GDDR6", 13.4e9, 73e9, 0.234e9, 0.006, kHost, 25e6,
       "the H100's efficiencies on the published peaks (30.3 TFLOP/s float32, 121 bfloat16, "
       "300 GB/s) and the H100's host; not measured"},
  };
  return *models;
}

absl::StatusOr<const DeviceModel*> FindDeviceModel(absl::string_view name) {
  std::vector<std::string> names;
  for (const DeviceModel& model : DeviceModels()) {
    if (model.name == name) return &model;
    names.push_back(model.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device_model=", Printable(name),
                   " is not accepted; accepted: ", absl::StrJoin(names, ", ")));
}

absl::Status PriceProfile(const DeviceModel& device, ModelProfile& profile) {
  const bool half = !profile.autocast.empty();
  int64_t ops = profile.loss.forward_work.ops;
  for (const std::vector<StageProfile>& menu : profile.measured)
    ops += menu.front().forward_work.ops;
  if (ops == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the profile of ", profile.model, " has no work counted to price on ", device.name));
  }
  for (size_t i = 0; i < profile.measured.size(); ++i) {
    for (StageProfile& p : profile.measured[i]) {
      p.costs.forward_ms = device.PassMs(p.forward_work, Pass::kForward, half);
      p.costs.nograd_forward_ms = device.PassMs(p.nograd_work, Pass::kNoGradForward, half);
      p.costs.backward_ms = device.PassMs(p.backward_work, Pass::kBackward, half);
    }
  }
  profile.loss.forward_ms = device.PassMs(profile.loss.forward_work, Pass::kForward, half);
  profile.loss.backward_ms = device.PassMs(profile.loss.backward_work, Pass::kBackward, half);
  profile.to_host_bytes_per_ms = profile.from_host_bytes_per_ms = device.link_bytes_per_ms;
  profile.link_assumed = profile.copies_overlap = true;
  profile.timed = true;
  return absl::OkStatus();
}

}  // namespace ckpt
