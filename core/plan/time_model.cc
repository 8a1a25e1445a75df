#include "core/plan/time_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/plan/schedule.h"

namespace ckpt {

absl::StatusOr<double> PredictStepMs(const ModelProfile& profile, const Plan& plan) {
  if (!profile.timed) {
    return absl::FailedPreconditionError(
        absl::StrCat("the profile of ", profile.model, " was measured without times"));
  }
  ASSIGN_OR_RETURN(const std::vector<const StageProfile*> stages, profile.MeasuredUnder(plan));
  const Program program = Compile(plan, profile.stages);
  if (program.num_host > 0 &&
      (profile.to_host_bytes_per_ms <= 0 || profile.from_host_bytes_per_ms <= 0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the profile of ", profile.model, " has no copy rates for the plan's offloads"));
  }
  // Each op's compute time, and the bytes of the values and host buffers it moves.
  std::vector<double> compute(program.ops.size(), 0.0);
  std::vector<int64_t> value_bytes(program.num_values, 0), host_bytes(program.num_host, 0);
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    for (int j = op.begin; j < op.end; ++j) {
      if (op.code == OpCode::kForward) {
        // Without a graph a stage is taken at its every-part-stored time (see the header).
        compute[i] +=
            op.run >= 0 ? stages[j]->costs.forward_ms : profile.Stored(j).costs.nograd_forward_ms;
      } else if (op.code == OpCode::kBackward) {
        compute[i] += stages[j]->costs.backward_ms;
      }
    }
    if (op.loss) {
      compute[i] +=
          op.code == OpCode::kForward ? profile.loss.forward_ms : profile.loss.backward_ms;
    }
    if (op.code == OpCode::kForward && op.output >= 0) {
      value_bytes[op.output] = stages[op.end - 1]->output_bytes;
    } else if (op.code == OpCode::kOffload) {
      host_bytes[op.host] = value_bytes[op.input];
    } else if (op.code == OpCode::kFetch) {
      value_bytes[op.output] = host_bytes[op.host];
    }
  }
  // A copy out overlaps the forward right after it (the segment's first pass, which reads the
  // same input); a fetch the backward call right after it (the one it was placed before; a
  // fetch placed just before its rerun, which needs it, overlaps nothing). Where copies run
  // beside the compute, that op's time hides them.
  std::vector<double> spare = compute;
  double ms = 0;
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    ms += compute[i];
    if (op.code != OpCode::kOffload && op.code != OpCode::kFetch) continue;
    const bool out = op.code == OpCode::kOffload;
    const double copy = static_cast<double>(host_bytes[op.host]) /
                        (out ? profile.to_host_bytes_per_ms : profile.from_host_bytes_per_ms);
    double hidden = 0;
    const size_t next = i + 1;
    if (profile.copies_overlap && next < program.ops.size() &&
        program.ops[next].code == (out ? OpCode::kForward : OpCode::kBackward)) {
      hidden = std::min(copy, spare[next]);
      spare[next] -= hidden;
    }
    ms += copy - hidden;
  }
  return ms;
}

}  // namespace ckpt
