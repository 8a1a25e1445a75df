// The analytical memory model: from a profile (per-stage bytes under each policy, measured
// once) and a plan, predict the activation bytes after forward and the peak during the step,
// without running the plan.
//
//   ASSIGN_OR_RETURN(MemoryPrediction p, PredictMemory(profile, plan));
//
// How memory is counted: bytes of live storages above the step's baseline (parameters, batch,
// gradients kept from before), each storage once however many tensors name it. The model replays
// the plan's program (core/plan/schedule.h) op by op as the executor runs it: a recorded run adds,
// stage by stage, what each graph retains and the output storages each stage allocates (an output
// that is its input, or a view of it, adds none); a storage lives while a boundary's tensors (the
// executor, a graph or the run's loop holding them) or a graph that keeps it refers to it;
// a forward without a graph keeps one boundary at a time; a backward call holds the run's
// outputs and its incoming gradient until it returns, and swaps each stage's retained bytes for
// its input's gradient and the parameters' first gradients; RNG snapshots live from their
// capture to their release; an offloaded value's copy lives in the host pool from its copy out to
// its fetch, which makes a new device value. How exact it is, measured: docs/memory-model.md. Needs
// no LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan/plan.h"
#include "core/plan/profile.h"

namespace ckpt {

// What planners that fit a plan to a byte budget leave between the predicted peak and the
// budget: the replay places the step's scalars (the loss, gradient seeds, 4 bytes each) only
// approximately (docs/memory-model.md has the largest miss seen).
inline constexpr int64_t kBudgetSlackBytes = 64;

struct MemoryPrediction {
  int64_t activation_bytes = 0;  // live after forward and loss, above the baseline
  int64_t peak_bytes = 0;        // highest live during the step, above the baseline
  // Offloading plans: the host pool's highest live bytes during the step (core/run/host_pool.h),
  // and the bytes copied to it (as many come back). The device figures above exclude them.
  int64_t host_peak_bytes = 0;
  int64_t offloaded_bytes = 0;
};

// `plan` must be valid for the profile's stages (ValidatePlan), and `profile` must hold every
// stage under the plan's policy for it (ExtendProfile measures what it lacks);
// FailedPrecondition names the first that is missing. `timeline`, if given, receives a line
// per stage forward and backward of the replay with the live and peak bytes before it
// ("backward block3.mlp: live 1234, peak 5678").
absl::StatusOr<MemoryPrediction> PredictMemory(const ModelProfile& profile, const Plan& plan,
                                               std::vector<std::string>* timeline = nullptr);

// PredictMemory's prediction when the peak stays at or below `limit`; nullopt as soon as the
// replay passes it (the rest is not replayed): how a planner rules a candidate out cheaply.
absl::StatusOr<std::optional<MemoryPrediction>> PredictMemoryWithin(const ModelProfile& profile,
                                                                    const Plan& plan,
                                                                    int64_t limit);

// The fastest of `candidates` whose predicted peak plus kBudgetSlackBytes is within `budget`: by
// PredictStepMs where the profile is timed, else by stage forwards rerun; the first of equals.
// Every candidate's time is predicted, then memory is replayed in order of time, each candidate
// only until it passes the budget, up to the first that fits. nullopt when none fits, with
// `least` (if given) the least peak plus slack of them all: what the budget would have to be.
struct BudgetChoice {
  Plan plan;
  MemoryPrediction predicted;
  double ms = 0;  // PredictStepMs, or the stage forwards rerun where the profile has no times
};
absl::StatusOr<std::optional<BudgetChoice>> FastestWithinBudget(const ModelProfile& profile,
                                                                std::vector<Plan> candidates,
                                                                int64_t budget,
                                                                int64_t* least = nullptr);

}  // namespace ckpt
