// The one loop every mode runs over model x strategy configurations (the sweep, the depth scan,
// --predict, --explain, training): each model built and profiled once, every strategy planned on
// that profile, a failure the configuration's (or the model's) status; a mode is what it does
// with each model so prepared.
//
//   LoopOptions loop(WorkloadOptionsFor(options));
//   RETURN_IF_ERROR(ForEachModel(options.models, options.strategies, loop, meter, progress,
//                                [&](PreparedModel& m) { ... m.configurations ... }));
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/plan/plan.h"
#include "core/plan/profile.h"
#include "core/plan/strategy.h"
#include "core/run/chain_model.h"
#include "core/run/memory_meter.h"
#include "core/run/workload.h"
#include "experiments/kept_profiles.h"
#include "experiments/progress.h"
#include "experiments/records/cohort.h"

namespace ckpt {

// One strategy on a model.
struct Configuration {
  const BoundStrategy* strategy = nullptr;
  absl::Status status;            // OK, or why it has no plan (prepared: or no executor)
  Plan plan;                      // where OK
  std::optional<PlannedRun> run;  // where OK and the loop prepares (LoopOptions::prepare)
};

// A model as the loop hands it to its mode.
struct PreparedModel {
  const BoundModel* model = nullptr;  // as the run names it
  // OK, or why the model could not be built, profiled or planned on: then every configuration's
  // failure, and `configurations` is empty.
  absl::Status status;
  std::string built;                 // the spec built (the model's, or its stand-in's), if known
  std::optional<Workload> workload;  // what was built: the model, or its stand-in; profiled
  // What every plan was made on (the ranks' mean; prepared, extended by the policies the plans
  // use).
  ModelProfile profile;
  std::vector<Configuration> configurations;  // a strategy each, in the run's order
};

struct LoopOptions {
  explicit LoopOptions(WorkloadOptions workload, Cohort cohort = Cohort(nullptr))
      : workload(std::move(workload)), cohort(cohort) {}

  // How each model is built and profiled (the loop sets the profile's progress).
  WorkloadOptions workload;
  // The ranks that run the loop together: they agree on every outcome, plan from their mean
  // profile and must arrive at the same plans.
  Cohort cohort;
  // Each plan prepared on the built model (Workload::Prepare: its executor made, the profile
  // extended with its policies); false where the plans are for another model than the one
  // built (planned_on).
  bool prepare = true;
  // Where set: the model built and profiled in place of the one asked (--predict: a shallow
  // copy), and the profile planned on, made from the asked model and the measured profile.
  std::function<absl::StatusOr<BoundModel>(const BoundModel&)> stand_in;
  std::function<absl::StatusOr<ModelProfile>(const BoundModel&, const ModelProfile&)> planned_on;
  // Where set: models that are not run, as they hold every row already (--resume).
  std::function<bool(const BoundModel&)> done;
  // Each model's profile extrapolated from samples at smaller sizes (Workload::Extrapolate),
  // where it declares sizes to extrapolate along and the samples agree; else measured.
  bool extrapolate = false;
  // Where set: profiles kept by earlier runs, one of which is taken for the model built in place
  // of measuring it where it was kept for it (the mode keeps what it measured there).
  const KeptProfiles* kept = nullptr;
  // > 0: once this many seconds are spent, no further model starts (the first always does).
  double time_limit_s = 0;
};

// Prepares each model of `models` in order and hands it to `visit`; an error from `visit`, or
// ranks that cannot go on together, end the loop with it. Progress says which model and phase.
absl::Status ForEachModel(const std::vector<BoundModel>& models,
                          const std::vector<BoundStrategy>& strategies, const LoopOptions& loop,
                          MemoryMeter& meter, Progress& progress,
                          const std::function<absl::Status(PreparedModel&)>& visit);

}  // namespace ckpt
