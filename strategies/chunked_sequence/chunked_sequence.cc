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
  const int n = static_cast<int>(profile.stages.size());
  Plan plan;
  plan.strategy = absl::StrCat(kId, ":chunks=", chunks_);
  if (n > 0) plan.segments.push_back({0, n, SegmentMode::kStored});
  plan.stage_options.resize(n);
  int chunked = 0;
  for (int i = 0; i < n; ++i) {
    const StageInfo& info = profile.stages[i].info;
    // Embedding lookups have no intermediates worth chunking, and each chunk's backward would
    // materialise a dense gradient of the whole table.
    if (info.kind == StageKind::kEmbedding) continue;
    if (info.position_wise || info.kind == StageKind::kAttention) {
      plan.stage_options[i].sequence_chunks = chunks_;
      ++chunked;
    }
  }
  plan.summary = absl::StrCat(chunked, " of ", n, " stages run in ", chunks_,
                              " sequence chunks, each recomputed in backward");
  return plan;
}

}  // namespace ckpt
