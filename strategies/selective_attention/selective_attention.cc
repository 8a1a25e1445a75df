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
  const int n = static_cast<int>(profile.stages.size());
  Plan plan;
  plan.strategy = kId;
  if (n > 0) plan.segments.push_back({0, n, SegmentMode::kStored});
  plan.stage_options.resize(n);
  int attention = 0;
  for (int i = 0; i < n; ++i) {
    if (profile.stages[i].info.kind == StageKind::kAttention) {
      plan.stage_options[i].recompute_attention_core = true;
      ++attention;
    }
  }
  plan.summary =
      attention == 0
          ? "no attention stages: planned like store_all (every stage stored, nothing recomputed)"
          : absl::StrCat("every stage stored, but the seq^2 core of the ", attention,
                         " attention stages is recomputed in backward");
  return plan;
}

}  // namespace ckpt
