// The time model: a plan's step time predicted from the profile's measured stage times, beside
// the memory model's bytes. Budget planners optimise it, so its error against the measured
// step is their error.
//
//   ASSIGN_OR_RETURN(double ms, PredictStepMs(profile, plan));
//
// The time of each operation of the plan's program (core/plan/schedule.h), summed: a stage run with
// its graph costs its forward under its policy (StageCosts::forward_ms), one run without a
// graph its every-part-stored time without a graph (StageCosts::nograd_forward_ms of Stored():
// planners decide a stage's policy where it runs with its graph, after its no-graph runs, and
// the difference, a chunked stage's extra launches, is small), its backward its backward_ms;
// the loss its forward and backward. An offload copy costs its bytes at the profile's copy rate
// that way; where copies run beside the compute (ModelProfile::copies_overlap: a GPU, or an
// assumed link), only what the compute op it overlaps does not hide (a copy out the forward
// after it, a fetch the backward call after it). Nothing is added for the executor's own work,
// the checkpoint primitive's, or the allocator's. Needs no LibTorch.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan/plan.h"
#include "core/plan/profile.h"

namespace ckpt {

// `plan` must be valid for the profile's stages (ValidatePlan). FailedPrecondition when the
// profile lacks a stage's policy (as PredictMemory), or when it was measured without times
// (ProfileOptions::timed).
absl::StatusOr<double> PredictStepMs(const ModelProfile& profile, const Plan& plan);

}  // namespace ckpt
