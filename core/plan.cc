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
  }
  return "unknown";
}

int64_t Plan::RecomputedStages() const {
  int64_t n = 0;
  for (const Segment& s : segments) {
    if (s.mode == SegmentMode::kCheckpointed) n += s.size();
  }
  return n;
}

std::string Plan::Describe() const {
  return absl::StrCat(segments.size(), " segment", segments.size() == 1 ? "" : "s", ": ",
                      absl::StrJoin(segments, ", ", [](std::string* out, const Segment& s) {
                        absl::StrAppend(out, "[", s.begin, ",", s.end, ") ",
                                        SegmentModeName(s.mode));
                      }));
}

absl::Status ValidatePlan(const Plan& plan, int num_stages) {
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
  return absl::OkStatus();
}

}  // namespace ckpt
