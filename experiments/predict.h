// Full-size answers from a small machine (--predict): what every strategy would need to train a
// model too large to build here, from a profile of a shallow copy of it.
//
//   ASSIGN_OR_RETURN(std::vector<Prediction> rows, Predict(options, setting, meter, std::cerr));
//   std::cout << PredictionTable(rows);
//
// A model with a `depth` parameter is built and profiled at depth 2 (its parameters' memory is
// that of two blocks; more where the first or last blocks differ: ShallowModel), and the profile
// extended to the full depth by giving every further block the measurements of its twin
// (ExpandProfile: the same code on the same shapes costs the same); a model without one is built
// whole. The copy's profile is extrapolated from smaller batches and sequences where it can be
// (PredictSetting::extrapolate, core/plan/extrapolate.h). Every strategy then plans on the
// full-depth profile as one data-parallel rank sees its step (core/plan/states.h: replicated or
// sharded state across ranks), and the memory and time models predict that step: the same
// predictions the sweep checks against measured steps, with a card's times where a device model
// prices the profile's work (PredictSetting::device_model). The profile is measured under the
// sweep's autocast (--amp) where asked; the state keeps the parameters' dtype, float32.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/plan/device_model.h"
#include "core/plan/states.h"
#include "core/run/memory_meter.h"
#include "experiments/presets.h"
#include "experiments/sweep.h"

namespace ckpt {

// One strategy on one model: its plan's predicted step and the training memory around it.
struct Prediction {
  std::string model;     // the full model's canonical spec
  std::string profiled;  // the spec that was built and profiled
  // The device model whose prices the times are (PredictSetting::device_model), empty for
  // this machine's times.
  std::string device_model;
  // Where its bytes were extrapolated from smaller sizes, the samples (ModelProfile::extrapolated:
  // its times then scaled, not measured); empty where measured at its own size.
  std::string extrapolated;
  std::string strategy;  // resolved, as planned
  RowStatus status = RowStatus::kOk;
  std::string error;  // empty, or why the model or the strategy could not be predicted
  std::string plan;   // as text (docs/plans.md)
  // The setting: the state's layout across world_size ranks (every byte below is one rank's),
  // the autocast dtype the profile ran under ("" for none), and whether the step time counts
  // the collectives (a collective rate was given).
  std::string states = "replicated";
  int world_size = 1;
  std::string autocast;
  bool collectives_timed = false;
  // Under autocast: the operators any stage ran in float32 (StageProfile::float32_ops), sorted.
  std::vector<std::string> float32_ops;
  int64_t parameter_bytes = 0;       // resident: all, or the rank's shard (zero3)
  int64_t buffer_bytes = 0;          // the model's buffers (BatchNorm's statistics), every rank's
  int64_t gradient_bytes = 0;        // at the end of backward: all, or the shard (zero2, zero3)
  int64_t optimizer_bytes = 0;       // AdamW's two moments: all, or the shard (zero1 to zero3)
  int64_t batch_bytes = 0;           // the batch's inputs and targets
  int64_t largest_gather_bytes = 0;  // zero3: the most one stage gathers beyond the shard
  int64_t activation_bytes = 0;      // live after forward and loss, above the step's baseline
  // The step's peak above its baseline: gradients (or their shards) made by then, and under
  // zero3 the gathered parameters of the stage running.
  int64_t step_peak_bytes = 0;
  // Parameters, buffers, AdamW's moments and the batch (a training step's baseline once the
  // optimizer has its state), plus the larger of the step's peak above it and every gradient (the
  // state the optimizer step starts from; its own temporaries are not counted).
  int64_t total_peak_bytes = 0;
  double step_ms = 0;  // the time model's, from the measured stage times
  // With --device_memory (else 0): the card's bytes and the allocator's margin assumed for the
  // model (AllocatorMargin).
  int64_t device_memory = 0;
  double allocator_margin = 0;

  // With --device_memory, for an ok row: whether the total peak times the margin fits the card.
  std::optional<bool> Fits() const;
};

// What the caching allocator reserves over the bytes a step requests, as a factor, for the
// model family of `model_spec`: the largest reserved-over-requested peak measured on a card for
// that family, the largest of all for a family never measured.
double AllocatorMargin(absl::string_view model_spec);

// `model` at the least depth from 2 to 4 whose stages hold a counterpart of every stage of the
// full model (ExpandProfile), where the model has a depth parameter and that depth has fewer
// stages; `model` itself otherwise.
absl::StatusOr<BoundModel> ShallowModel(const BoundModel& model);

// What a prediction is for, besides the models and strategies: the state's layout across
// ranks, the card's memory, whether bytes are extrapolated and whose times the step takes.
struct PredictSetting {
  StatesSetting states;
  // A card's bytes: each row says whether it fits (Prediction::fits), and every strategy that
  // plans to a budget plans again, in a row after the model's others, to what the card leaves
  // the step: its bytes over the margin, less the parameters, AdamW's moments and the batch.
  std::optional<int64_t> device_memory;
  // Each shallow copy's bytes extrapolated from samples at smaller sizes where it declares sizes
  // to extrapolate along and the samples agree (Workload::Extrapolate; the report says which),
  // else measured.
  bool extrapolate = false;
  // Where set, the times are this device model's prices of the profile's work
  // (core/plan/device_model.h), and the planners plan with them; else this machine's.
  const DeviceModel* device_model = nullptr;
};

// A prediction per model and strategy of `options` (store_all first) for one rank of
// `setting.states`, profiling each model's shallow spec once on options.device (under
// options.autocast), or planning from the profile options.kept holds for it, where it keeps
// what it measured. Progress lines go to `progress`. Errors of building and profiling end it; a
// strategy that cannot plan is a row with its error.
absl::StatusOr<std::vector<Prediction>> Predict(const SweepOptions& options,
                                                const PredictSetting& setting, MemoryMeter& meter,
                                                std::ostream& progress);

// The predictions as a table for a reader (Markdown), per model, in MiB and GiB; with
// --device_memory, first a line per model: whether it fits the card, and the fastest plan that
// does, at what step ratio against store_all.
std::string PredictionTable(const std::vector<Prediction>& rows);
// Per model that `published` has a figure for: the publication's training memory without and
// with checkpointing beside the predicted total and activation bytes of store_all and of
// uniform and optimal, with the savings (Markdown). Empty when none applies.
std::string SavingsBesidePublished(const std::vector<Prediction>& rows,
                                   const std::vector<PublishedSaving>& published);
// predict.md: the command, how the figures were made, SavingsBesidePublished's table when it has
// rows, and PredictionTable.
std::string PredictionReport(const std::vector<Prediction>& rows,
                             const std::vector<PublishedSaving>& published,
                             const std::string& command);
// The predictions as CSV, a row each, bytes exact; one header line.
std::string PredictionCsv(const std::vector<Prediction>& rows);

}  // namespace ckpt
