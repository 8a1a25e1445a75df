#include "strategies/selective_attention/selective_attention.h"

#include "absl/strings/str_cat.h"

namespace ckpt {
namespace {
const StrategyRegistration<SelectiveAttention> registration;
}  // namespace

absl::StatusOr<std::unique_ptr<Strategy>> SelectiveAttention::Create(const ParamValues&) {
  return std::make_unique<SelectiveAttention>();
}

absl::StatusOr<Plan> SelectiveAttention::MakePlan(const ModelProfile& profile) const {
  const int n = profile.num_stages();
  Plan plan;
  if (n > 0) plan.segments.push_back({0, n, SegmentMode::kStored});
  int attention = 0;
  for (const StageInfo& stage : profile.stages) {
    plan.stage_policies.push_back(PolicyFor(stage, PartKind::kAttentionCore,
                                            {PartAction::Recompute(PartKind::kAttentionCore)}));
    if (!plan.stage_policies.back().IsDefault()) ++attention;
  }
  plan.summary =
      attention == 0
          ? "no attention cores: planned like store_all (every stage stored, nothing recomputed)"
          : absl::StrCat("every stage stored, but the seq^2 core of the ", attention,
                         " attention stages is recomputed in backward");
  return plan;
}

}  // namespace ckpt
