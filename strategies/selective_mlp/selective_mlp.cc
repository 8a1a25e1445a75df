#include "strategies/selective_mlp/selective_mlp.h"

#include "absl/strings/str_cat.h"

namespace ckpt {
namespace {
const StrategyRegistration<SelectiveMlp> registration;
}  // namespace

absl::StatusOr<std::unique_ptr<Strategy>> SelectiveMlp::Create(const ParamValues&) {
  return std::make_unique<SelectiveMlp>();
}

absl::StatusOr<Plan> SelectiveMlp::MakePlan(const ModelProfile& profile) const {
  const int n = profile.num_stages();
  Plan plan;
  if (n > 0) plan.segments.push_back({0, n, SegmentMode::kStored});
  int mlps = 0;
  for (const StageInfo& stage : profile.stages) {
    plan.stage_policies.push_back(
        PolicyFor(stage, PartKind::kMlpHidden, {PartAction::Recompute(PartKind::kMlpHidden)}));
    if (!plan.stage_policies.back().IsDefault()) ++mlps;
  }
  plan.summary = mlps == 0 ? "no MLP hidden parts: planned like store_all (every stage stored, "
                             "nothing recomputed)"
                           : absl::StrCat("every stage stored, but the hidden activation of the ",
                                          mlps, " MLP stages is recomputed in backward");
  return plan;
}

}  // namespace ckpt
