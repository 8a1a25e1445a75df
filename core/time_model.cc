#include "core/time_model.h"

#include "absl/strings/str_cat.h"
#include "core/schedule.h"

namespace ckpt {

absl::StatusOr<double> PredictStepMs(const ModelProfile& profile, const Plan& plan) {
  if (!profile.timed) {
    return absl::FailedPreconditionError(
        absl::StrCat("the profile of ", profile.model, " was measured without times"));
  }
  std::vector<const StageProfile*> stages;
  for (int j = 0; j < profile.num_stages(); ++j) {
    stages.push_back(profile.Find(j, plan.PolicyOf(j)));
    if (stages.back() == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the profile of ", profile.model, " has no measurement of stage ", j, " (",
          profile.stages[j].name, ") with ", DescribePolicy(profile.stages[j], plan.PolicyOf(j))));
    }
  }
  double ms = 0;
  for (const Op& op : Compile(plan, profile.stages).ops) {
    for (int j = op.begin; j < op.end; ++j) {
      if (op.code == OpCode::kForward) {
        // Without a graph a stage is taken at its every-part-stored time (see the header).
        ms += op.run >= 0 ? stages[j]->costs.forward_ms : profile.Stored(j).costs.nograd_forward_ms;
      } else if (op.code == OpCode::kBackward) {
        ms += stages[j]->costs.backward_ms;
      }
    }
    if (op.loss)
      ms += op.code == OpCode::kForward ? profile.loss.forward_ms : profile.loss.backward_ms;
  }
  return ms;
}

}  // namespace ckpt
