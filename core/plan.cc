#include "core/plan.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ckpt {

absl::string_view StageKindName(StageKind kind) {
  switch (kind) {
    case StageKind::kEmbedding: return "embedding";
    case StageKind::kAttention: return "attention";
    case StageKind::kMlp: return "mlp";
    case StageKind::kNorm: return "norm";
    case StageKind::kHead: return "head";
    case StageKind::kOther: return "other";
  }
  return "unknown";
}

absl::string_view SegmentModeName(SegmentMode mode) {
  switch (mode) {
    case SegmentMode::kStored: return "stored";
    case SegmentMode::kCheckpointed: return "checkpointed";
    case SegmentMode::kRecomputeAll: return "recompute-all";
  }
  return "unknown";
}

const StageOptions& Plan::OptionsOf(int stage) const {
  static const StageOptions kDefault;
  return stage_options.empty() ? kDefault : stage_options[stage];
}

bool Plan::ChunksSequence() const {
  for (const StageOptions& o : stage_options) {
    if (o.sequence_chunks > 1) return true;
  }
  return false;
}

int64_t Plan::RecomputedStages() const {
  int64_t n = 0;
  for (const Segment& s : segments) {
    const int64_t k = s.size();
    if (s.mode == SegmentMode::kCheckpointed) n += k;
    if (s.mode == SegmentMode::kRecomputeAll) n += k * (k + 1) / 2;
  }
  return n;
}

std::string Plan::Describe() const {
  std::string out =
      absl::StrCat(segments.size(), " segment", segments.size() == 1 ? "" : "s", ": ",
                   absl::StrJoin(segments, ", ", [](std::string* out, const Segment& s) {
                     absl::StrAppend(out, "[", s.begin, ",", s.end, ") ",
                                     SegmentModeName(s.mode));
                   }));
  std::vector<int> chunked, selective;
  int chunks = 1;
  for (size_t i = 0; i < stage_options.size(); ++i) {
    if (stage_options[i].sequence_chunks > 1) {
      chunked.push_back(static_cast<int>(i));
      chunks = stage_options[i].sequence_chunks;
    }
    if (stage_options[i].recompute_attention_core) selective.push_back(static_cast<int>(i));
  }
  if (!selective.empty()) {
    absl::StrAppend(&out, "; attention core recomputed in stages ", absl::StrJoin(selective, ","));
  }
  if (!chunked.empty()) {
    absl::StrAppend(&out, "; ", chunks, " sequence chunks in stages ", absl::StrJoin(chunked, ","));
  }
  return out;
}

absl::Status ValidatePlan(const Plan& plan, const std::vector<StageInfo>& stages) {
  const int num_stages = static_cast<int>(stages.size());
  int next = 0;
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    if (s.begin != next || s.end <= s.begin || s.end > num_stages) {
      return absl::InternalError(absl::StrCat(
          "plan of ", plan.strategy, " is invalid for ", num_stages, " stages: segment ", i,
          " is [", s.begin, ",", s.end, "), expected a non-empty segment starting at ", next,
          " and ending by ", num_stages, " (", plan.Describe(), ")"));
    }
    next = s.end;
  }
  if (next != num_stages) {
    return absl::InternalError(absl::StrCat("plan of ", plan.strategy, " covers stages [0,",
                                            next, ") of ", num_stages, " (", plan.Describe(),
                                            ")"));
  }
  if (!plan.stage_options.empty() && static_cast<int>(plan.stage_options.size()) != num_stages) {
    return absl::InternalError(absl::StrCat("plan of ", plan.strategy, " has options for ",
                                            plan.stage_options.size(), " stages, not ",
                                            num_stages));
  }
  for (size_t i = 0; i < plan.stage_options.size(); ++i) {
    const StageOptions& o = plan.stage_options[i];
    const StageInfo& info = stages[i];
    const bool attention = info.kind == StageKind::kAttention;
    if (o.sequence_chunks < 1 || (o.sequence_chunks > 1 && !info.position_wise && !attention)) {
      return absl::InternalError(absl::StrCat(
          "plan of ", plan.strategy, " asks stage ", i, " (", info.name, ", ",
          StageKindName(info.kind), ") for ", o.sequence_chunks,
          " sequence chunks; only position-wise and attention stages can be chunked"));
    }
    if (o.recompute_attention_core && !attention) {
      return absl::InternalError(absl::StrCat("plan of ", plan.strategy, " asks stage ", i,
                                              " (", info.name, ", ", StageKindName(info.kind),
                                              ") to recompute an attention core it lacks"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ckpt
