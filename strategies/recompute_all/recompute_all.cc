#include "strategies/recompute_all/recompute_all.h"

#include "absl/strings/str_cat.h"

namespace ckpt {
namespace {
const StrategyRegistration<RecomputeAll> registration;
}  // namespace

absl::StatusOr<std::unique_ptr<Strategy>> RecomputeAll::Create(const ParamValues&) {
  return std::make_unique<RecomputeAll>();
}

absl::StatusOr<Plan> RecomputeAll::MakePlan(const ModelProfile& profile) const {
  const int n = static_cast<int>(profile.stages.size());
  Plan plan;
  if (n > 0) plan.segments.push_back({0, n, SegmentMode::kRecomputeAll});
  plan.summary = absl::StrCat("only the input of the ", n, " stages is kept; backward reruns ",
                              n * (n + 1) / 2, " stage forwards");
  return plan;
}

}  // namespace ckpt
