// What a run is made of: its models and strategies, each bound once and in the order the run
// takes them (store_all first), and the settings every mode's steps share; checked before anything
// runs.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "core/dist/data_parallel.h"
#include "core/plan/strategy.h"
#include "core/run/chain_model.h"
#include "core/run/device.h"
#include "core/run/executor.h"
#include "core/run/workload.h"
#include "experiments/records/results.h"

namespace ckpt {

class KeptProfiles;  // experiments/kept_profiles.h

struct SweepOptions {
  // The models, bound where the request was read (BindModels: each once); rows record their
  // specs.
  std::vector<BoundModel> models;
  // The strategies, bound where the request was read (BindStrategies: store_all first, each
  // once); rows record their specs.
  std::vector<BoundStrategy> strategies;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  // Cap on live tensor bytes (absolute, as peak_bytes) for the configurations' own steps: the
  // timed rounds and their warm-up, in which a configuration past it fails as "oom". The
  // sweep's own work (building, profiling and planning each model, the gradient check's
  // reference copy) runs under the meter's cap in force, not this one.
  std::optional<int64_t> memory_cap;
  // > 0: the offload copies' rate, bytes per second each way, of a link the time model and the
  // planners assume (a GPU's, on a CPU run) instead of the measured copies (--link_bandwidth).
  int64_t link_bytes_per_s = 0;  // 0: none (measured)
  // --amp: every step the sweep runs and the profile it predicts from, under autocast to this
  // dtype (AmpDtype: bfloat16 on CPU, float16 on CUDA); none: the model's own dtype.
  std::optional<c10::ScalarType> autocast;
  // Whether profiles time each stage on this machine. --predict with a device model prices the
  // work the profiler counts instead, and times nothing: a profile kept untimed is another key
  // (ProfileSetting), so it serves only such questions.
  bool profile_times = true;
  int steps = 5;           // timed rounds
  int warmup = 1;          // untimed rounds before them
  ComputeThreads threads;  // as the pools run them: recorded in every row
  uint64_t seed = 0;
  // Wall-clock budget in seconds, 0 for none: once it is spent no further model starts (the
  // first one to run always does), so a bounded run still ends with rows, a report and a
  // results.csv that --resume continues. A model that has started runs to its end.
  double time_limit_s = 0;
  // Data parallel: this rank's process group (core/dist/data_parallel.h), or none for one process.
  // Every rank runs the sweep alike on its share of each batch (WorkloadOptions::rank), and
  // every rank gets the rows, each combining all ranks' figures (ConfigResult::world_size);
  // `completed` must be the same on every rank. The ranks act on profiles averaged over them
  // so that they plan alike, and measure one configuration at a time, each with a reducer of
  // its own (c10d's learns its plan in its first step), its rounds' steps each followed by the
  // same step without the reducer (the computation alone). A rank that fails or disagrees ends
  // the sweep with an error on every rank that can still tell.
  ProcessGroup* group = nullptr;
  // (model spec, strategy spec) pairs already in results.csv (--resume), canonical (as
  // BoundModel::spec and BoundStrategy::spec write them): a model whose pairs are all there is
  // skipped; otherwise it runs again and only the missing rows are reported.
  std::set<std::pair<std::string, std::string>> completed;
  // Where set (one process, writing an output folder): the profiles kept there. A model kept for
  // is planned from its kept profile instead of being measured, and a model measured is kept.
  KeptProfiles* kept = nullptr;
};

// How the sweep's workloads are built: its device, seed, and the profile's assumed link and
// autocast.
WorkloadOptions WorkloadOptionsFor(const SweepOptions& options);

// The dtype mixed precision (--amp) autocasts to on `device`: bfloat16 on a CPU, float16 on a
// GPU (where training scales the loss).
c10::ScalarType AmpDtype(c10::Device device);

// A step's options under the sweep's autocast.
StepOptions SweepStepOptions(const SweepOptions& options);

// Checks each strategy against each model's stages (CheckStages: a written plan's fit) and the
// numbers for sense, touching no tensor: InvalidArgument naming the offending value and the
// accepted ones. The models must be as BindModels returns them (each once, non-empty) and the
// strategies as BindStrategies does (store_all first, each once): InvalidArgument otherwise.
absl::Status ValidateSweep(const SweepOptions& options);

// The models of `texts`, each spec bound once, in order: a model given twice (by canonical spec,
// as "heavy_mlp:depth=4" and "heavy_mlp:depth=+4") is InvalidArgument naming both writings; a
// spec that does not bind is its error, after "--models: " where the text names no model.
absl::StatusOr<std::vector<BoundModel>> BindModels(const std::vector<std::string>& texts);

// The models the depth scan builds of `model` (its depth set to each of `depths`), checked:
// InvalidArgument for a model without a depth parameter, a depth outside its range, or a spec
// the model refuses.
absl::StatusOr<std::vector<BoundModel>> DepthScanModels(const BoundModel& model,
                                                        const std::vector<int>& depths);
// `model`'s spec without its depth: what names a depth scan's panel.
std::string WithoutDepth(const BoundModel& model);

// The strategies a sweep runs, each spec bound once: store_all first (the reference, whether
// given or not), then the given ones in order. A strategy given twice (by canonical spec, as
// "uniform" and "uniform:segments=auto") is InvalidArgument naming both writings; a spec that
// does not bind is its error.
absl::StatusOr<std::vector<BoundStrategy>> BindStrategies(const std::vector<std::string>& texts);
// The same for strategies bound already, each with the text it was bound from (for the
// message naming a repeat): what BindStrategies returns after binding each text.
absl::StatusOr<std::vector<BoundStrategy>> SweepOrder(
    const std::vector<std::pair<std::string, BoundStrategy>>& given);

// `strategies`, then every one of them that plans to a budget (budget_param) at each of
// `budgets` (BoundStrategy::WithBudget), in order, without repeats; a budget a strategy refuses
// is its error, after "--budgets: ".
absl::StatusOr<std::vector<BoundStrategy>> WithBudgets(const std::vector<BoundStrategy>& strategies,
                                                       const std::vector<int64_t>& budgets);

// The specs of `strategies` or `models`, in order.
std::vector<std::string> SpecsOf(const std::vector<BoundStrategy>& strategies);
std::vector<std::string> SpecsOf(const std::vector<BoundModel>& models);

// Whether `rows` ((model, strategy) canonical specs, as in results.csv) holds a row of `model`
// for every one of `strategies`: what --resume skips, and what a time limit left out when it does
// not.
bool HasEveryRow(const std::string& model, const std::vector<BoundStrategy>& strategies,
                 const std::set<std::pair<std::string, std::string>>& rows);

// The (model, strategy) pairs of `rows` (as results.csv holds them) in their canonical writing:
// what --resume skips. InvalidArgument naming a cell that is not a spec ("... holds a row whose
// spec is not one").
absl::StatusOr<std::set<std::pair<std::string, std::string>>> CompletedPairs(
    const std::vector<ConfigResult>& rows);

// `row` failed for `why`: its status (FailureStatus) and message.
void MarkFailed(ConfigResult& row, const absl::Status& why);

}  // namespace ckpt
