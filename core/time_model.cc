#include "core/time_model.h"

#include "absl/strings/str_cat.h"

namespace ckpt {
namespace {

void Count(const std::vector<Segment>& segments, int64_t enclosing, std::vector<int64_t>& runs) {
  for (const Segment& s : segments) {
    switch (s.mode) {
      case SegmentMode::kStored:
        for (int j = s.begin; j < s.end; ++j) runs[j] += enclosing;
        break;
      case SegmentMode::kCheckpointed:
        if (s.inner.empty()) {
          for (int j = s.begin; j < s.end; ++j) runs[j] += enclosing + 1;
        } else {
          Count(s.inner, enclosing + 1, runs);
        }
        break;
      case SegmentMode::kRecomputeAll:
        // First pass, then stages begin..k-1 again for every stage k of the segment.
        for (int j = s.begin; j < s.end; ++j) runs[j] += enclosing + 1 + (s.end - 1 - j);
        break;
    }
  }
}

}  // namespace

std::vector<int64_t> NoGradRuns(const Plan& plan, int num_stages) {
  std::vector<int64_t> runs(num_stages, 0);
  Count(plan.segments, 0, runs);
  return runs;
}

absl::StatusOr<double> PredictStepMs(const ModelProfile& profile, const Plan& plan) {
  if (!profile.timed) {
    return absl::FailedPreconditionError(
        absl::StrCat("the profile of ", profile.model, " was measured without times"));
  }
  if (absl::Status s = ValidatePlan(plan, profile.stages); !s.ok()) return s;
  const std::vector<int64_t> runs = NoGradRuns(plan, profile.num_stages());
  double ms = profile.loss.forward_ms + profile.loss.backward_ms;
  for (int j = 0; j < profile.num_stages(); ++j) {
    const StageProfile* s = profile.Find(j, plan.PolicyOf(j));
    if (s == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the profile of ", profile.model, " has no measurement of stage ", j, " (",
          profile.stages[j].name, ") with ", DescribePolicy(profile.stages[j], plan.PolicyOf(j))));
    }
    ms += s->costs.forward_ms + s->costs.backward_ms +
          static_cast<double>(runs[j]) * profile.Stored(j).costs.nograd_forward_ms;
  }
  return ms;
}

}  // namespace ckpt
