#include "experiments/sweep.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "ATen/Context.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/bytes.h"
#include "core/base/printable.h"
#include "core/base/status_macros.h"
#include "core/plan/memory_model.h"
#include "core/plan/plan_text.h"
#include "core/plan/time_model.h"
#include "core/run/executor.h"
#include "core/run/workload.h"
#include "experiments/configurations.h"
#include "experiments/gradient_check.h"
#include "experiments/kept_profiles.h"
#include "experiments/progress.h"
#include "experiments/records/cohort.h"
#include "experiments/records/results_csv.h"

namespace ckpt {
namespace {

// What a configuration's rounds time beside its plan, right after it in each round at the same
// seed, for the rows to report the difference: the part of the step that the variant leaves out.
enum class Variant {
  kNone,
  kTwin,            // the plan without its copies (Plan::WithoutOffload): what the copies expose
  kWithoutReducer,  // with ranks, the same step without the gradients' all-reduce
};

// One strategy's state during a model's sweep.
struct Config {
  ConfigResult result;
  Plan plan;                              // as planned
  std::optional<ChainExecutor> executor;  // empty once it failed
  Variant variant = Variant::kNone;
  std::optional<ChainExecutor> twin;  // kTwin's executor
  std::vector<double> variant_ms;     // the variant's step in each timed round
};

// Seeds the default generators of CPU and the device so every strategy sees the same random
// stream (dropout) in the same round.
void SeedRound(uint64_t seed) { at::manual_seed(seed); }

// A configuration per strategy, in strategy order (store_all first), not yet planned.
std::vector<Config> NewConfigs(const SweepOptions& options, const BoundModel& model) {
  std::vector<Config> configs;
  for (const BoundStrategy& strategy : options.strategies) {
    ConfigResult& r = configs.emplace_back().result;
    r.strategy = r.strategy_spec = strategy.spec();
    r.device = options.device.str();
    r.model = r.model_spec = model.spec();
    r.threads = options.threads.intra_op;
    r.blas_threads = options.threads.blas;
    if (options.group != nullptr) {
      r.world_size = options.group->world_size();
      r.backend = options.group->backend();
    }
  }
  return configs;
}

// An offloading configuration's copy figures that need no step, and (one process only) its
// twin without the copies, to time it against.
void PlanTwin(const Cohort& cohort, Workload& workload, const Plan& plan, ModelProfile& profile,
              MemoryMeter& meter, Config& c) {
  ConfigResult& r = c.result;
  const double bytes = static_cast<double>(r.predicted.offloaded_bytes);
  if (profile.to_host_bytes_per_ms > 0 && profile.from_host_bytes_per_ms > 0) {
    r.to_host_gbps = profile.to_host_bytes_per_ms / 1e6;
    r.from_host_gbps = profile.from_host_bytes_per_ms / 1e6;
    r.copy_ms = bytes / profile.to_host_bytes_per_ms + bytes / profile.from_host_bytes_per_ms;
  }
  const Plan twin = plan.WithoutOffload();
  absl::StatusOr<double> twin_ms = PredictStepMs(profile, twin);
  if (twin_ms.ok()) r.predicted_copy_exposed_ms = r.predicted_step_ms - *twin_ms;
  // Against an assumed link a measured step says nothing of that link's copies.
  // With ranks, the variant timed is the step without its reducer.
  if (!cohort.alone() || profile.link_assumed) return;
  absl::StatusOr<PlannedRun> run = workload.Prepare(twin, profile, meter);
  if (!run.ok()) return;  // the measured figure stays unknown
  c.twin.emplace(std::move(run->executor));
  c.variant = Variant::kTwin;
}

// Plans every configuration on the profiled workload and builds its executor; a strategy that
// cannot plan (its budget is too small, say) fails alone. With a group, every rank plans from

// The loop's plans into the configurations' rows and executors: a strategy that could not plan
// (its budget is too small, say) fails alone.
void TakePlans(const Cohort& cohort, PreparedModel& m, MemoryMeter& meter,
               std::vector<Config>& configs) {
  const double step_flops = 3 * ForwardFlops(m.profile.stages);
  for (size_t i = 0; i < configs.size(); ++i) {
    Config& c = configs[i];
    Configuration& planned = m.configurations[i];
    c.result.step_gflop = step_flops / 1e9;
    if (!planned.status.ok()) {
      MarkFailed(c.result, planned.status);
      continue;
    }
    PlannedRun& run = *planned.run;
    c.result.strategy = run.plan.strategy;
    c.result.plan = PlanToText(run.plan, m.profile.stages);
    c.result.predicted = run.predicted;
    c.result.predicted_step_ms =
        PredictStepMs(m.profile, run.plan).value_or(ConfigResult::kUnknown);
    c.plan = run.plan;
    if (run.predicted.offloaded_bytes > 0) {
      PlanTwin(cohort, *m.workload, run.plan, m.profile, meter, c);
    }
    c.executor.emplace(std::move(run.executor));
    if (!cohort.alone()) c.variant = Variant::kWithoutReducer;
  }
}

// A step's figures into its configuration's row (the rounds' maxima, the last round's bytes).
void Record(const StepResult& r, ConfigResult& result) {
  result.step_ms.push_back(r.step_ms);
  result.baseline_bytes = r.baseline_bytes;
  result.activation_bytes = r.activation_bytes;
  result.peak_bytes = std::max(result.peak_bytes, r.peak_bytes);
  result.recompute_forwards = r.recompute_forwards;
  result.host_peak_bytes = std::max(result.host_peak_bytes, r.host_peak_bytes);
  result.offloaded_bytes = r.offloaded_bytes;
  result.loss = r.loss;
}

// A configuration's steps in one round: its plan's (with the turn's `reducer`, if any), then
// its variant's, each seeded alike and agreed on by the ranks. A plan that fails a step (out of
// memory) is out of the later rounds; a variant that fails leaves its difference unknown.
absl::Status StepRound(const SweepOptions& options, const Cohort& cohort, const Batch& batch,
                       int round, GradientReducer* reducer, Progress& progress, Config& c) {
  const int rounds = options.warmup + options.steps;
  const bool timed = round >= options.warmup;
  SeedRound(options.seed + round);
  // The first round starts each configuration from an empty allocator cache, so its reserved
  // peak is this configuration's own: on CUDA the blocks that store_all (or the model before)
  // left cached would otherwise count for every strategy after it.
  StepOptions step_options = SweepStepOptions(options);
  step_options.release_cached = round == 0;
  step_options.hooks = reducer;
  absl::StatusOr<StepResult> r = c.executor->Step(batch, step_options);
  progress.Steps(1);
  RETURN_IF_ERROR(cohort.AgreeOn(r.status()));
  const bool has_variant = c.variant != Variant::kNone;
  if (!r.ok()) {
    MarkFailed(c.result, r.status());
    c.executor.reset();
    // Its later rounds, and its variant's from this one, will not run.
    progress.AddToTotal(-(rounds - round - 1) - (has_variant ? rounds - round : 0));
    return absl::OkStatus();
  }
  if (round == 0) c.result.peak_reserved_bytes = r->peak_reserved_bytes;
  if (timed) Record(*r, c.result);
  if (!has_variant) return absl::OkStatus();
  SeedRound(options.seed + round);
  ChainExecutor& variant = c.variant == Variant::kTwin ? *c.twin : *c.executor;
  absl::StatusOr<StepResult> v = variant.Step(batch, SweepStepOptions(options));
  progress.Steps(1);
  RETURN_IF_ERROR(cohort.AgreeOn(v.status()));
  if (!v.ok()) {
    c.variant = Variant::kNone;
    c.twin.reset();
    c.variant_ms.clear();
    progress.AddToTotal(-(rounds - round - 1));
  } else if (timed) {
    c.variant_ms.push_back(v->step_ms);
  }
  return absl::OkStatus();
}

// Timing and memory, under the measured cap, warm-up rounds first. The configurations run in
// turns: for one process a single turn of them all, interleaved (A B C C B A A B C ...) so that
// machine drift and a place in the round hit them alike; with ranks, each configuration a turn
// of its own with a reducer of its own (c10d's learns its plan in its first step, and the
// baseline then holds one reducer's buckets). Each round steps a configuration's plan and then
// its variant. At a turn's end the ranks' rows are combined (Cohort::Combine).
absl::Status MeasureRounds(const SweepOptions& options, const Cohort& cohort, Workload& workload,
                           MemoryMeter& meter, Progress& progress, std::vector<Config>& configs) {
  const int rounds = options.warmup + options.steps;
  std::vector<std::vector<Config*>> turns(cohort.alone() ? 1 : 0);
  for (Config& c : configs) {
    if (!c.executor) {
      progress.AddToTotal(-rounds);
      continue;
    }
    if (c.variant != Variant::kNone) progress.AddToTotal(rounds);
    if (cohort.alone()) {
      turns[0].push_back(&c);
    } else {
      turns.push_back({&c});
    }
  }
  for (const std::vector<Config*>& turn : turns) {
    std::unique_ptr<GradientReducer> reducer;
    if (!cohort.alone()) {
      absl::StatusOr<std::unique_ptr<GradientReducer>> made = GradientReducer::Create(
          *cohort.group(), workload.model()->Parameters(), workload.model()->State());
      if (!made.ok()) return RankError(*cohort.group(), "could not make a reducer", made.status());
      reducer = *std::move(made);
    }
    {
      ScopedMemoryCap cap(meter, options.memory_cap);
      for (int round = 0; round < rounds; ++round) {
        // Forward in even rounds, backward in odd ones: what a configuration's place in a round
        // costs or gains (running right after another's allocations, say) falls on each alike.
        for (size_t k = 0; k < turn.size(); ++k) {
          Config& c = *turn[round % 2 == 0 ? k : turn.size() - 1 - k];
          if (!c.executor) continue;
          RETURN_IF_ERROR(
              StepRound(options, cohort, workload.batch(), round, reducer.get(), progress, c));
        }
        if (cohort.alone()) {
          progress.Line(absl::StrFormat("%s: round %d/%d%s", workload.model()->spec(), round + 1,
                                        rounds, round < options.warmup ? " (warm-up)" : ""));
        }
      }
    }
    for (Config* c : turn) {
      if (!c->executor) continue;
      if (reducer != nullptr) {
        absl::StatusOr<double> alone = reducer->AllReduceAloneMs();
        if (!alone.ok()) return RankError(*cohort.group(), "lost the other ranks", alone.status());
        c->result.allreduce_alone_ms = *alone;
      }
      RETURN_IF_ERROR(cohort.Combine(c->result, c->variant_ms));
    }
    if (!cohort.alone()) {
      progress.Line(absl::StrFormat("%s %s: %d rounds on %d ranks", workload.model()->spec(),
                                    turn[0]->result.strategy, rounds, cohort.world_size()));
    }
  }
  return absl::OkStatus();
}

// The results: ratios against store_all's (configs[0]) round by round, and the summaries of
// the rounds as results.csv holds them.
std::vector<ConfigResult> Summarize(std::vector<Config>& configs) {
  const ConfigResult& ref = configs[0].result;
  const bool have_ref = ref.ok() && !ref.step_ms.empty();
  std::vector<ConfigResult> out;
  for (Config& c : configs) {
    ConfigResult& r = c.result;
    r.overhead_vs_store_all = r.activation_vs_store_all = r.peak_vs_store_all =
        ConfigResult::kUnknown;
    if (have_ref && r.ok()) {
      r.overhead_vs_store_all = OverheadRatio(r.step_ms, ref.step_ms);
      r.activation_vs_store_all =
          static_cast<double>(r.activation_bytes) / static_cast<double>(ref.activation_bytes);
      r.peak_vs_store_all = static_cast<double>(r.peak_bytes - r.baseline_bytes) /
                            static_cast<double>(ref.peak_bytes - ref.baseline_bytes);
    }
    r.steps = static_cast<int64_t>(r.step_ms.size());
    // What the variant leaves out of the step: the median over rounds of the difference.
    if (r.ok() && !c.variant_ms.empty() && c.variant_ms.size() == r.step_ms.size()) {
      std::vector<double> exposed;
      for (size_t i = 0; i < r.step_ms.size(); ++i)
        exposed.push_back(r.step_ms[i] - c.variant_ms[i]);
      (c.variant == Variant::kTwin ? r.copy_exposed_ms : r.allreduce_exposed_ms) = Median(exposed);
    }
    if (!r.step_ms.empty()) {
      r.step_ms_median = Median(r.step_ms);
      r.step_ms_min = *std::min_element(r.step_ms.begin(), r.step_ms.end());
      r.step_ms_max = *std::max_element(r.step_ms.begin(), r.step_ms.end());
      if (r.step_gflop > 0) r.achieved_gflops = r.step_gflop / (r.step_ms_median / 1000);
    }
    out.push_back(r);
  }
  return out;
}

// Every strategy on one prepared model: results in strategy order, store_all first. An error
// only when a data-parallel sweep cannot go on.
absl::StatusOr<std::vector<ConfigResult>> SweepModel(const SweepOptions& options,
                                                     const Cohort& cohort, PreparedModel& m,
                                                     MemoryMeter& meter, Progress& progress) {
  std::vector<Config> configs = NewConfigs(options, *m.model);
  if (!m.status.ok()) {
    for (Config& c : configs) MarkFailed(c.result, m.status);
    return Summarize(configs);
  }
  TakePlans(cohort, m, meter, configs);
  RETURN_IF_ERROR(MeasureRounds(options, cohort, *m.workload, meter, progress, configs));
  if (configs.size() > 1) {  // a step each: on a long chain, seconds
    progress.Line(absl::StrFormat("%s: comparing %d strategies' gradients with store_all's",
                                  m.model->spec(), configs.size() - 1));
  }
  std::vector<CheckedConfig> checked;
  for (Config& c : configs) checked.push_back({c.executor ? &*c.executor : nullptr, &c.result});
  RETURN_IF_ERROR(CheckGradients(options, cohort, *m.workload, meter, configs[0].plan, checked));
  return Summarize(configs);
}

std::string Num(double v, int decimals) {
  if (std::isnan(v)) return "";
  return absl::StrFormat("%.*f", decimals, v);
}

}  // namespace

absl::StatusOr<std::vector<ConfigResult>> RunSweep(
    const SweepOptions& options, MemoryMeter& meter,
    const std::function<absl::Status(const ConfigResult&)>& on_result, std::ostream& out) {
  RETURN_IF_ERROR(ValidateSweep(options));
  const Cohort cohort(options.group);
  LoopOptions loop(WorkloadOptionsFor(options), cohort);
  loop.done = [&](const BoundModel& model) {
    return HasEveryRow(model.spec(), options.strategies, options.completed);
  };
  loop.time_limit_s = options.time_limit_s;
  loop.kept = options.kept;
  int64_t to_run = 0;
  for (const BoundModel& model : options.models) to_run += loop.done(model) ? 0 : 1;
  // Per model: every round steps every strategy, then one gradient-check step each.
  Progress progress(out, to_run * static_cast<int64_t>(options.strategies.size()) *
                             (options.warmup + options.steps + 1));
  std::vector<ConfigResult> all;
  RETURN_IF_ERROR(ForEachModel(
      options.models, options.strategies, loop, meter, progress,
      [&](PreparedModel& m) -> absl::Status {
        // What the plans were made from, with every policy they use:
        // kept before the steps, for a run that is stopped in them.
        if (options.kept != nullptr && m.status.ok()) {
          options.kept->Keep(m.workload->bound_model(), m.profile, progress);
        }
        ASSIGN_OR_RETURN(std::vector<ConfigResult> rows,
                         SweepModel(options, cohort, m, meter, progress));
        for (ConfigResult& r : rows) {
          progress.Steps(1);
          if (options.completed.count({r.model_spec, r.strategy_spec})) continue;
          RETURN_IF_ERROR(on_result(r));
          progress.Line(absl::StrFormat("%s %s: %s%s", r.model, r.strategy, RowStatusName(r.status),
                                        r.message.empty() ? "" : " (" + r.message + ")"));
          all.push_back(std::move(r));
        }
        return absl::OkStatus();
      }));
  return all;
}

absl::StatusOr<std::vector<DepthPoint>> RunDepthScan(const SweepOptions& options,
                                                     const std::vector<int>& depths,
                                                     MemoryMeter& meter, std::ostream& out) {
  RETURN_IF_ERROR(ValidateSweep(options));
  std::vector<BoundModel> models;
  for (const BoundModel& model : options.models) {
    ASSIGN_OR_RETURN(std::vector<BoundModel> deep, DepthScanModels(model, depths));
    models.insert(models.end(), deep.begin(), deep.end());
  }
  LoopOptions loop(WorkloadOptionsFor(options));
  // Bytes are what this scan reports; planners get one timing of each stage.
  loop.workload.profile.min_repeats = 1;
  loop.workload.profile.min_time_ms = 0;
  Progress progress(out, static_cast<int64_t>(models.size() * options.strategies.size()));
  std::vector<DepthPoint> points;
  RETURN_IF_ERROR(
      ForEachModel(models, options.strategies, loop, meter, progress, [&](PreparedModel& m) {
        const std::string& model_spec = m.model->spec();
        if (!m.status.ok()) {
          progress.Line(absl::StrCat(model_spec, ": ", m.status.message()));
          progress.Steps(static_cast<int64_t>(options.strategies.size()));
          return absl::OkStatus();
        }
        for (Configuration& c : m.configurations) {
          progress.Steps(1);
          at::manual_seed(options.seed);
          absl::StatusOr<StepResult> step =
              c.status.ok() ? c.run->executor.Step(m.workload->batch(), SweepStepOptions(options))
                            : absl::StatusOr<StepResult>(c.status);
          if (!step.ok()) {
            progress.Line(
                absl::StrCat(model_spec, " ", c.strategy->spec(), ": ", step.status().message()));
            continue;
          }
          // Labelled as given: "uniform" resolves to other segment counts at other depths.
          points.push_back({WithoutDepth(*m.model), c.strategy->spec(),
                            static_cast<int>(m.model->values().Int("depth")),
                            step->activation_bytes});
        }
        progress.Line(absl::StrCat(model_spec, ": done"));
        return absl::OkStatus();
      }));
  return points;
}

double OverheadRatio(const std::vector<double>& step_ms, const std::vector<double>& reference_ms) {
  std::vector<double> ratios;
  for (size_t i = 0; i < step_ms.size() && i < reference_ms.size(); ++i) {
    ratios.push_back(step_ms[i] / reference_ms[i]);
  }
  return Median(ratios);
}

std::string FormatTable(const std::vector<ConfigResult>& results) {
  std::string out;
  std::string last_model;
  const std::string header = absl::StrFormat(
      "  %-28s %-6s %12s %8s %10s %8s %10s %9s %10s %11s\n", "strategy", "status", "activ. MiB",
      "vs s_a", "peak+ MiB", "vs s_a", "step ms", "overhead", "recompute", "max|dgrad|");
  for (const ConfigResult& r : results) {
    if (r.model != last_model) {
      absl::StrAppend(&out, last_model.empty() ? "" : "\n", r.model, "\n", header);
      last_model = r.model;
    }
    if (!r.ok()) {
      absl::StrAppend(&out,
                      absl::StrFormat("  %-28s %-6s %s\n", r.strategy, RowStatusName(r.status),
                                      Printable(r.message).substr(0, 90)));
      continue;
    }
    absl::StrAppend(
        &out, absl::StrFormat("  %-28s %-6s %12s %8s %10s %8s %10s %9s %10d %11s\n", r.strategy,
                              RowStatusName(r.status), FormatMib(r.activation_bytes, 2),
                              Num(r.activation_vs_store_all, 3),
                              FormatMib(r.peak_bytes - r.baseline_bytes, 2),
                              Num(r.peak_vs_store_all, 3), Num(r.step_ms_median, 1),
                              Num(r.overhead_vs_store_all, 3), r.recompute_forwards,
                              std::isnan(r.max_grad_diff_vs_store_all)
                                  ? std::string("-")
                                  : absl::StrFormat("%.3g", r.max_grad_diff_vs_store_all)));
  }
  return out;
}

}  // namespace ckpt
