#include "strategies/chunked_sequence/chunked_sequence.h"

#include <algorithm>

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
  if (n > 0) plan.segments.push_back({0, n, SegmentMode::kStored});
  int chunked = 0, most = 0;  // stages chunked, and the most chunks any runs
  for (const StageInfo& stage : profile.stages) {
    const int part = stage.FindPart(PartKind::kSequence);
    const int64_t extent = part >= 0 ? stage.parts[part].extent : 0;
    const int chunks = extent > 0 ? static_cast<int>(std::min<int64_t>(chunks_, extent)) : chunks_;
    plan.stage_policies.push_back(
        chunks < 2 ? StagePolicy()  // one position, or chunks=1: the stage runs whole
                   : PolicyFor(stage, PartKind::kSequence, {PartAction::Chunk(), chunks}));
    if (!plan.stage_policies.back().IsDefault()) {
      ++chunked;
      most = std::max(most, chunks);
    }
  }
  // The label says what ran: no stage chunked (no sequence, or one position) runs whole, 1 chunk.
  const int ran = chunked > 0 ? most : 1;
  plan.shown = {{"chunks", absl::StrCat(ran)}};
  plan.summary =
      chunked == 0
          ? absl::StrCat("no stage of ", n, " has a sequence of two or more positions to chunk: ",
                         "every stage runs whole (", chunks_, " chunks asked)")
          : absl::StrCat(chunked, " of ", n, " stages run in ", ran,
                         " sequence chunks, each recomputed in backward",
                         ran < chunks_
                             ? absl::StrCat(" (", chunks_, " asked; no more chunks than positions)")
                             : "");
  return plan;
}

}  // namespace ckpt
