#include "strategies/chunked_sequence/chunked_sequence.h"

#include "absl/strings/str_cat.h"

namespace ckpt {
namespace {
const StrategyRegistration<ChunkedSequence> registration;
}  // namespace

std::vector<ParamDef> ChunkedSequence::Params() {
  return {IntParam("chunks", "4", "sequence chunks per stage").Min(1).Max(1 << 20)};
}

absl::StatusOr<std::unique_ptr<Strategy>> ChunkedSequence::Create(const ParamValues& params) {
  return std::make_unique<ChunkedSequence>(static_cast<int>(params.Int("chunks")));
}

absl::StatusOr<Plan> ChunkedSequence::MakePlan(const ModelProfile& profile) const {
  const int n = profile.num_stages();
  Plan plan;
  plan.strategy = absl::StrCat(kId, ":chunks=", chunks_);
  if (n > 0) plan.segments.push_back({0, n, SegmentMode::kStored});
  int chunked = 0;
  for (const StageInfo& stage : profile.stages) {
    plan.stage_policies.push_back(
        PolicyFor(stage, PartKind::kSequence, {PartAction::kChunk, chunks_}));
    if (!plan.stage_policies.back().IsDefault()) ++chunked;
  }
  plan.summary = absl::StrCat(chunked, " of ", n, " stages run in ", chunks_,
                              " sequence chunks, each recomputed in backward");
  return plan;
}

}  // namespace ckpt
