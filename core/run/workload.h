// One path from specs to a running plan: a model and its batch built from a model spec, its
// profile, a strategy's plan for it with the plan's predicted memory, and the executor. Every
// caller (the sweep, --explain, training, the benchmarks, the tests) builds through it, so
// that they cannot drift apart.
//
//   ASSIGN_OR_RETURN(Workload w, Workload::Build("gpt2:depth=4", {device, /*seed=*/0}));
//   ASSIGN_OR_RETURN(const ModelProfile* profile, w.Profile(meter));
//   ASSIGN_OR_RETURN(BoundStrategy uniform, BoundStrategy::Bind("uniform"));
//   ASSIGN_OR_RETURN(PlannedRun run, w.Prepare(uniform, *profile, meter));
//   ASSIGN_OR_RETURN(StepResult r, run.executor.Step(w.batch()));
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "core/plan/memory_model.h"
#include "core/plan/plan.h"
#include "core/plan/profile.h"
#include "core/plan/strategy.h"
#include "core/run/chain_model.h"
#include "core/run/executor.h"
#include "core/run/memory_meter.h"
#include "core/run/profiler.h"

namespace ckpt {

struct WorkloadOptions {
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  uint64_t seed = 0;     // parameters are initialised from it, the batch drawn from it
  bool training = true;  // the model's mode (dropout on)
  // Data parallel: this rank's share of a global batch. The model spec's `batch` is the rows
  // per rank, b; the batch is rows [rank b, (rank + 1) b) of the one a model of the same spec
  // with batch world_size b draws from the seed, so N ranks together see what one process
  // with N times the batch sees. A model whose batch is its own (BoundModel::BatchRanks: a
  // chain file's) is for its number of ranks only, each stepping its share of that batch.
  int rank = 0;
  int world_size = 1;
  ProfileOptions profile;  // how Profile measures
};

// A plan for a workload, with what the memory model predicts of it and the executor that runs
// it.
struct PlannedRun {
  Plan plan;
  MemoryPrediction predicted;  // above the baseline
  ChainExecutor executor;
};

// `model` with its batch parameter `factor` times larger: the model of the global batch that
// `factor` ranks of `model` share. InvalidArgument for a model without a batch parameter.
absl::StatusOr<BoundModel> ScaledBatch(const BoundModel& model, int factor);

// Whether `world_size` ranks can share `model`'s batch: InvalidArgument naming the model where
// it has no batch parameter, or its batch is its own and for another number of ranks.
absl::Status CheckRanks(const BoundModel& model, int world_size);

class Workload {
 public:
  // `model` on the device, initialised from the seed, in the mode asked for, and its batch (this
  // rank's share). Errors name the spec (InvalidArgument: a model without a batch parameter
  // cannot be shared among ranks) or are LibTorch's.
  static absl::StatusOr<Workload> Build(const BoundModel& model, const WorkloadOptions& options);
  // Bind, then Build: for a spec written once in code or a test.
  static absl::StatusOr<Workload> Build(const std::string& model_spec,
                                        const WorkloadOptions& options);

  // The model's profile, measured on first call (under the meter's cap in force) and kept.
  absl::StatusOr<const ModelProfile*> Profile(MemoryMeter& meter);
  // Makes the profile Profile returns from samples at smaller sizes instead
  // (core/plan/extrapolate.h): the model at each sample's sizes built and profiled as the options
  // say, traced (the held-out sample alone timed, where the options time), and the samples
  // extrapolated to this model's sizes. NotFound where the model declares no size large enough
  // to extrapolate along; FailedPrecondition where the samples do not extrapolate, or the model
  // refuses a sample's sizes (measure with Profile then); the meter's Unimplemented where it keeps
  // no peak candidates. `starting`, if set, is told each sample as it starts ("sample 2 of 5,
  // seq=20"); each sample's profile reports to the options' progress as this model's would.
  absl::Status Extrapolate(MemoryMeter& meter,
                           const std::function<void(const std::string&)>& starting = nullptr);
  // Takes `profile` (measured by an earlier run: experiments/kept_profiles.h) as the one Profile
  // returns, in place of measuring. InvalidArgument when it is of another model spec, or its
  // stages are not the model's as built (the model's code declares them otherwise now).
  absl::Status AdoptProfile(ModelProfile profile);

  // `strategy`'s plan from `profile` (this workload's, or one of the same model spec:
  // training plans fresh copies of a model from one profile), validated; the profile is
  // extended with the plan's policies where it lacks them, the memory predicted, and the
  // executor created.
  absl::StatusOr<PlannedRun> Prepare(const BoundStrategy& strategy, ModelProfile& profile,
                                     MemoryMeter& meter);
  // The same from this workload's own profile (measured first if need be).
  absl::StatusOr<PlannedRun> Prepare(const BoundStrategy& strategy, MemoryMeter& meter);
  // A plan made elsewhere (a test's generated one): validated (ValidatePlan's error), the
  // profile extended, the memory predicted, the executor created.
  absl::StatusOr<PlannedRun> Prepare(ckpt::Plan plan, ModelProfile& profile, MemoryMeter& meter);

  // The batch drawn from `seed`, this rank's share of it, as the workload's own is drawn from
  // the options' seed: training draws one per micro-batch. With world_size > 1 the first call
  // builds a model of the global batch's spec to draw from (its parameters' bytes), kept for
  // the later calls.
  absl::StatusOr<Batch> MakeBatch(uint64_t seed);

  const BoundModel& bound_model() const { return bound_; }
  const std::shared_ptr<ChainModel>& model() const { return model_; }
  const Batch& batch() const { return batch_; }
  const WorkloadOptions& options() const { return options_; }

 private:
  Workload(BoundModel bound, std::shared_ptr<ChainModel> model, Batch batch,
           WorkloadOptions options)
      : bound_(std::move(bound)),
        model_(std::move(model)),
        batch_(std::move(batch)),
        options_(std::move(options)) {}
  // Prepare for a plan validated already.
  absl::StatusOr<PlannedRun> PrepareValid(ckpt::Plan plan, ModelProfile& profile,
                                          MemoryMeter& meter);

  BoundModel bound_;
  std::shared_ptr<ChainModel> model_;
  std::shared_ptr<ChainModel> drawer_;  // of the global batch's spec, once MakeBatch needs it
  Batch batch_;
  WorkloadOptions options_;
  std::unique_ptr<ModelProfile> profile_;
};

}  // namespace ckpt
