// The time model: a plan's step time predicted from the profile's measured stage times, beside
// the memory model's bytes. Budget planners optimise it, so its error against the measured
// step is their error.
//
//   ASSIGN_OR_RETURN(double ms, PredictStepMs(profile, plan));
//
// A step runs every stage's forward with a graph once and its backward once, each under the
// stage's policy (StageCosts::forward_ms, backward_ms), and the loss's forward and backward;
// on top of that, every time a stage runs without a graph: once in the first pass of each
// checkpointed segment that holds it, at any depth, and in a recompute-all segment once in its
// first pass and once more for every later stage of the segment. A forward without a graph is
// taken at the stage's every-part-stored time (StageCosts::nograd_forward_ms of Stored()):
// planners decide a stage's policy where it runs with its graph, after its no-graph runs, and
// the difference (a chunked stage's extra launches) is small. Nothing is added for the
// executor's own work, the checkpoint primitive's, or the allocator's. Needs no LibTorch.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan.h"
#include "core/profile.h"

namespace ckpt {

// How often each stage runs without a graph under `plan` (its "recomputations" are these
// for checkpointed segments, plus the graph runs inside reruns).
std::vector<int64_t> NoGradRuns(const Plan& plan, int num_stages);

// FailedPrecondition when the profile lacks a stage's policy (as PredictMemory), or when it was
// measured without times (ProfileOptions::timed).
absl::StatusOr<double> PredictStepMs(const ModelProfile& profile, const Plan& plan);

}  // namespace ckpt
