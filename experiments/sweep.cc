#include "experiments/sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "ATen/Context.h"
#include "ATen/core/grad_mode.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "c10/core/DefaultDtype.h"
#include "core/base/printable.h"
#include "core/base/status_macros.h"
#include "core/plan/memory_model.h"
#include "core/plan/plan_text.h"
#include "core/plan/spec.h"
#include "core/plan/strategy.h"
#include "core/plan/time_model.h"
#include "core/run/chain_model.h"
#include "core/run/executor.h"
#include "core/run/profiler.h"
#include "core/run/torch_status.h"
#include "core/run/workload.h"
#include "experiments/cohort.h"
#include "experiments/progress.h"
#include "experiments/report.h"
#include "experiments/results_csv.h"

namespace ckpt {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kGradTolerance = 1e-5;

void Fail(ConfigResult& r, const absl::Status& s) {
  r.status = FailureStatus(s);
  r.message = std::string(s.message());
}

// What a configuration's rounds time beside its plan, right after it in each round at the same
// seed, for the rows to report the difference: the part of the step that the variant leaves out.
enum class Variant {
  kNone,
  kTwin,            // the plan without its copies (Plan::WithoutOffload): what the copies expose
  kWithoutReducer,  // with ranks, the same step without the gradients' all-reduce
};

// One strategy's state during a model's sweep.
struct Config {
  explicit Config(BoundStrategy bound) : strategy(std::move(bound)) {}
  BoundStrategy strategy;
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

std::vector<at::Tensor> CollectGradients(ChainModel& model, const Batch& batch) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : model.Parameters()) grads.push_back(p.grad());
  for (const at::Tensor& x : batch.inputs) grads.push_back(x.grad());
  return grads;
}

// A configuration per strategy, in strategy order (store_all first), not yet planned.
std::vector<Config> NewConfigs(const SweepOptions& options, const BoundModel& model) {
  std::vector<Config> configs;
  for (const BoundStrategy& strategy : options.strategies) {
    ConfigResult& r = configs.emplace_back(strategy).result;
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

// The profile's measured times (and copy rates) replaced by their mean over the ranks, so that
// every rank's planners see the same profile and make the same plans.
absl::Status ShareProfileTimes(const Cohort& cohort, ModelProfile& profile) {
  if (cohort.alone()) return absl::OkStatus();
  std::vector<double*> fields = {&profile.loss.forward_ms, &profile.loss.backward_ms,
                                 &profile.to_host_bytes_per_ms, &profile.from_host_bytes_per_ms};
  std::string shape;  // which policies were measured: the same on every rank, or a bug
  for (size_t i = 0; i < profile.measured.size(); ++i) {
    for (StageProfile& p : profile.measured[i]) {
      absl::StrAppend(&shape, DescribePolicy(profile.stages[i], p.policy), ";");
      for (double* f : {&p.costs.forward_ms, &p.costs.nograd_forward_ms, &p.costs.backward_ms}) {
        fields.push_back(f);
      }
    }
    absl::StrAppend(&shape, "|");
  }
  RETURN_IF_ERROR(cohort.Same(shape, "profiled policies"));
  std::vector<double> values;
  for (const double* f : fields) values.push_back(*f);
  ASSIGN_OR_RETURN(const std::vector<double> mean, cohort.Mean(values));
  for (size_t i = 0; i < fields.size(); ++i) *fields[i] = mean[i];
  return absl::OkStatus();
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
// the ranks' mean profile and must arrive at the same plan.
absl::Status PlanConfigs(const Cohort& cohort, Workload& workload, const ModelProfile& measured,
                         MemoryMeter& meter, Progress& progress, std::vector<Config>& configs) {
  ModelProfile profile = measured;  // plans may extend it with the policies they use
  RETURN_IF_ERROR(ShareProfileTimes(cohort, profile));
  const double step_flops = 3 * ForwardFlops(profile.stages);
  // The phase, then each plan where the one before it took seconds (a budget planner on a long
  // chain can).
  progress.Line(absl::StrFormat("%s: profiled; planning %d strategies", workload.model()->spec(),
                                configs.size()));
  for (size_t i = 0; i < configs.size(); ++i) {
    Config& c = configs[i];
    progress.Lazily(absl::StrFormat("%s: planning %s (%d of %d)", workload.model()->spec(),
                                    c.result.strategy, i + 1, configs.size()));
    c.result.model = workload.model()->spec();
    c.result.step_gflop = step_flops / 1e9;
    absl::StatusOr<PlannedRun> run = workload.Prepare(c.strategy, profile, meter);
    RETURN_IF_ERROR(cohort.AgreeOn(run.status()));
    if (!run.ok()) {
      Fail(c.result, run.status());
      continue;
    }
    RETURN_IF_ERROR(ShareProfileTimes(cohort, profile));  // the policies the plan added
    c.result.strategy = run->plan.strategy;
    c.result.plan = PlanToText(run->plan, profile.stages);
    RETURN_IF_ERROR(cohort.Same(c.result.plan, "plans"));
    c.result.predicted = run->predicted;
    c.result.predicted_step_ms = PredictStepMs(profile, run->plan).value_or(kNaN);
    c.plan = run->plan;
    if (run->predicted.offloaded_bytes > 0) {
      PlanTwin(cohort, workload, run->plan, profile, meter, c);
    }
    c.executor.emplace(std::move(run->executor));
    if (!cohort.alone()) c.variant = Variant::kWithoutReducer;
  }
  return absl::OkStatus();
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
    Fail(c.result, r.status());
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

// The largest |g| over gradients (empty ones have none).
double LargestMagnitude(const std::vector<at::Tensor>& grads) {
  double m = 0;
  for (const at::Tensor& g : grads) {
    if (g.defined() && g.numel() > 0) m = std::max(m, g.abs().max().item<double>());
  }
  return m;
}

// Sets LibTorch's default dtype for a scope: a model built inside is made in it.
class ScopedDefaultDtype {
 public:
  explicit ScopedDefaultDtype(caffe2::TypeMeta dtype) : saved_(c10::get_default_dtype()) {
    c10::set_default_dtype(dtype);
  }
  ~ScopedDefaultDtype() { c10::set_default_dtype(saved_); }
  ScopedDefaultDtype(const ScopedDefaultDtype&) = delete;
  ScopedDefaultDtype& operator=(const ScopedDefaultDtype&) = delete;

 private:
  caffe2::TypeMeta saved_;
};

// Seeded steps of one model, each from the model's state as it was when made: gradients from
// steps that start alike can be compared (a stage may read the state it updates).
class GradientSteps {
 public:
  GradientSteps(const SweepOptions& options, const Cohort& cohort, ChainModel& model,
                const Batch& batch, std::optional<c10::ScalarType> autocast)
      : options_(options), cohort_(cohort), model_(model), batch_(batch), autocast_(autocast) {
    at::NoGradGuard no_grad;
    for (const at::Tensor& t : model_.State()) state_.push_back(t.clone());
  }

  // A seeded step of `executor` (the step's own outcome in `stepped`), its gradients (every
  // parameter's, then every input's) in `grads`; an error when the sweep cannot go on.
  absl::Status Step(ChainExecutor& executor, absl::Status& stepped,
                    std::vector<at::Tensor>& grads) {
    std::unique_ptr<GradientReducer> reducer;
    if (!cohort_.alone()) {
      absl::StatusOr<std::unique_ptr<GradientReducer>> made =
          GradientReducer::Create(*cohort_.group(), model_.Parameters(), model_.State());
      if (!made.ok()) return RankError(*cohort_.group(), "could not make a reducer", made.status());
      reducer = *std::move(made);
    }
    stepped = RunTorch([&] {
      at::NoGradGuard no_grad;
      const std::vector<at::Tensor> state = model_.State();
      for (size_t i = 0; i < state.size() && i < state_.size(); ++i) state[i].copy_(state_[i]);
    });
    SeedRound(options_.seed);
    StepOptions step_options = SweepStepOptions(options_);
    step_options.autocast = autocast_;
    step_options.hooks = reducer.get();
    if (stepped.ok()) stepped = executor.Step(batch_, step_options).status();
    grads.clear();
    if (stepped.ok()) grads = CollectGradients(model_, batch_);
    return cohort_.AgreeOn(stepped);
  }

 private:
  const SweepOptions& options_;
  const Cohort& cohort_;
  ChainModel& model_;
  const Batch& batch_;
  std::optional<c10::ScalarType> autocast_;
  std::vector<at::Tensor> state_;
};

// The float64 twin of a model (the same spec, seed and batch, made with float64 as the default
// dtype) and store_all's gradients on it: where a plan sums in another order than store_all
// (Plan::Reassociates), the exact check of its arithmetic, independent of rounding in the run's
// dtype (2^-53 against float32's 2^-24 and bfloat16's 2^-8). Steps run without autocast and,
// with ranks, on each rank's own rows without reducing (the plan's arithmetic is each rank's).
class Float64Twin {
 public:
  static constexpr double kTolerance = 1e-9;  // of the largest gradient (at least 1)

  static absl::StatusOr<std::unique_ptr<Float64Twin>> Make(const SweepOptions& options,
                                                           const BoundModel& model,
                                                           const Plan& store_all,
                                                           MemoryMeter& meter) {
    const ScopedDefaultDtype float64(caffe2::TypeMeta::Make<double>());
    ASSIGN_OR_RETURN(Workload workload, Workload::Build(model, WorkloadOptionsFor(options)));
    auto twin = std::unique_ptr<Float64Twin>(new Float64Twin(options, std::move(workload), meter));
    ASSIGN_OR_RETURN(twin->reference_, twin->Gradients(store_all));
    return twin;
  }

  // max |g - g_store_all| / max(max |g_store_all|, 1) of `plan` on the twin.
  absl::StatusOr<double> RelativeDifference(const Plan& plan) {
    ASSIGN_OR_RETURN(const std::vector<at::Tensor> grads, Gradients(plan));
    return RunTorch([&] {
      return MaxGradientDifference(grads, reference_) / std::max(LargestMagnitude(reference_), 1.0);
    });
  }

 private:
  Float64Twin(const SweepOptions& options, Workload workload, MemoryMeter& meter)
      : options_(options),
        workload_(std::move(workload)),
        meter_(meter),
        cohort_(nullptr),
        steps_(options_, cohort_, *workload_.model(), workload_.batch(), std::nullopt) {}

  // The plan's gradients on the twin, its steps in float64 too (what factories make without a
  // dtype: a dropout mask, a model's own constants).
  absl::StatusOr<std::vector<at::Tensor>> Gradients(const Plan& plan) {
    const ScopedDefaultDtype float64(caffe2::TypeMeta::Make<double>());
    ASSIGN_OR_RETURN(ChainExecutor executor,
                     ChainExecutor::Create(workload_.model(), plan, &meter_, options_.device));
    absl::Status stepped;
    std::vector<at::Tensor> grads;
    RETURN_IF_ERROR(steps_.Step(executor, stepped, grads));
    RETURN_IF_ERROR(stepped);
    return RunTorch([&] {
      for (at::Tensor& g : grads) g = g.defined() ? g.clone() : g;
      return grads;
    });
  }

  const SweepOptions& options_;
  Workload workload_;
  MemoryMeter& meter_;
  const Cohort cohort_;  // alone: a twin's steps reduce nothing
  GradientSteps steps_;
  std::vector<at::Tensor> reference_;
};

// What a configuration's step ran in: "float32", "float32 under bfloat16 autocast".
std::string StepDtype(const SweepOptions& options) {
  std::string dtype(c10::get_default_dtype().name());
  if (dtype == "float") dtype = "float32";
  if (dtype == "double") dtype = "float64";
  if (!options.autocast) return dtype;
  return absl::StrCat(dtype, " under ", *options.autocast == at::kBFloat16 ? "bfloat16" : "float16",
                      " autocast");
}

// Every configuration's gradients against store_all's (configs[0]), one more seeded step each,
// every step from the model's state as it was before the first. Run after the measurements, so
// that the reference copy never inflates anyone's memory figures, and outside the measured cap,
// which it would count against: store_all's reference step runs even where store_all's own
// configuration did not fit the cap. With a group, each step has a reducer of its own (its first
// step reduces after backward), so the gradients compared are the ranks' mean, and the
// difference is the largest rank's.
//
// A row stays ok only when its gradients were compared and agree, and says what with
// (ConfigResult::grad_check): in the run's dtype, within float32 rounding of the largest
// gradient (the same arithmetic as store_all's is exactly equal on a CPU); and where the plan
// sums in another order (chunks, a fused kernel) and under autocast, or where that rounding is
// exceeded, on the float64 twins (Float64Twin). A comparison that cannot run is the row's error.
absl::Status CheckGradients(const SweepOptions& options, const Cohort& cohort,
                            const BoundModel& bound, Workload& workload, MemoryMeter& meter,
                            std::vector<Config>& configs) {
  ChainModel& model = *workload.model();
  GradientSteps steps(options, cohort, model, workload.batch(), options.autocast);
  // store_all's executor, or a new one where its configuration failed under the cap.
  Config& reference = configs[0];
  std::optional<ChainExecutor> rebuilt;
  ChainExecutor* reference_executor = reference.executor ? &*reference.executor : nullptr;
  absl::Status no_reference = absl::OkStatus();
  if (reference_executor == nullptr && reference.plan.segments.empty()) {
    no_reference = absl::FailedPreconditionError("store_all was not planned");
  } else if (reference_executor == nullptr) {
    absl::StatusOr<ChainExecutor> made =
        ChainExecutor::Create(workload.model(), reference.plan, &meter, options.device);
    if (made.ok()) {
      rebuilt.emplace(*std::move(made));
      reference_executor = &*rebuilt;
    } else {
      no_reference = made.status();
    }
  }
  std::vector<at::Tensor> reference_grads;
  double reference_scale = 0;
  ASSIGN_OR_RETURN(const bool can_step, cohort.OnEvery(reference_executor != nullptr));
  if (can_step) {
    absl::Status stepped;
    std::vector<at::Tensor> grads;
    RETURN_IF_ERROR(steps.Step(*reference_executor, stepped, grads));
    const absl::Status copied = !stepped.ok() ? stepped : RunTorch([&] {
      for (const at::Tensor& g : grads) reference_grads.push_back(g.defined() ? g.clone() : g);
      reference_scale = LargestMagnitude(reference_grads);
    });
    if (!copied.ok()) {
      reference_grads.clear();
      no_reference = copied;
    }
  }
  ASSIGN_OR_RETURN(const bool have_reference,
                   cohort.OnEvery(!reference_grads.empty() || model.Parameters().empty()));
  if (have_reference) {
    ASSIGN_OR_RETURN(const std::vector<double> scale, cohort.Max({reference_scale}));
    reference_scale = scale[0];
  } else if (no_reference.ok()) {
    no_reference = absl::InternalError("another rank could not make them");
  }
  std::unique_ptr<Float64Twin> twin;
  absl::Status no_twin = absl::OkStatus();
  for (Config& c : configs) {
    ConfigResult& r = c.result;
    r.max_grad_diff_vs_store_all = kNaN;
    r.grad_check.clear();
    if (!c.executor) continue;  // its row says why
    if (!have_reference) {
      r.status = "error";
      r.message = absl::StrCat("its gradients could not be compared: store_all's reference step: ",
                               no_reference.message());
      continue;
    }
    absl::Status stepped;
    std::vector<at::Tensor> grads;
    RETURN_IF_ERROR(steps.Step(*c.executor, stepped, grads));
    if (!stepped.ok()) {
      Fail(r, stepped);
      continue;
    }
    absl::StatusOr<double> diff =
        RunTorch([&] { return MaxGradientDifference(grads, reference_grads); });
    const double local = diff.ok() ? *diff : kNaN;
    // The largest rank's; unknown (NaN) on any rank is unknown.
    ASSIGN_OR_RETURN(const std::vector<double> most,
                     cohort.Max({std::isnan(local) ? 1.0 : 0.0, std::isnan(local) ? 0.0 : local}));
    r.max_grad_diff_vs_store_all = most[0] > 0 ? kNaN : most[1];
    if (most[0] > 0) {
      r.status = "error";
      r.message = absl::StrCat("its gradients could not be compared with store_all's: ",
                               diff.ok() ? "on another rank" : diff.status().message());
      continue;
    }
    // Float32 rounding relative to the gradients' scale (the same arithmetic on a CPU: 0).
    const double tolerance = kGradTolerance * (1 + reference_scale);
    r.grad_check = StepDtype(options);
    const Plan& plan = c.executor->plan();
    if (!plan.Reassociates() || (!options.autocast && r.max_grad_diff_vs_store_all <= tolerance)) {
      if (!(r.max_grad_diff_vs_store_all <= tolerance)) {
        r.status = "error";
        r.message = absl::StrFormat(
            "gradients differ from store_all's by %g in %s (max |grad| %g, tolerance %g relative)",
            r.max_grad_diff_vs_store_all, r.grad_check, reference_scale, kGradTolerance);
      }
      continue;
    }
    // The exact check: on the float64 twins, made once per model where needed.
    if (twin == nullptr && no_twin.ok()) {
      absl::StatusOr<std::unique_ptr<Float64Twin>> made =
          Float64Twin::Make(options, bound, reference.plan, meter);
      if (made.ok()) {
        twin = *std::move(made);
      } else {
        no_twin = made.status();
      }
    }
    absl::StatusOr<double> twin_diff =
        twin != nullptr ? twin->RelativeDifference(plan) : absl::StatusOr<double>(no_twin);
    const double twin_local = twin_diff.ok() ? *twin_diff : kNaN;
    ASSIGN_OR_RETURN(const std::vector<double> twin_most,
                     cohort.Max({std::isnan(twin_local) ? 1.0 : 0.0,
                                 std::isnan(twin_local) ? 0.0 : twin_local}));
    r.grad_check = "float64 twin";
    if (twin_most[0] > 0) {
      r.status = "error";
      r.message = absl::StrCat(
          "its gradients could not be compared exactly: the plan sums in another order than "
          "store_all's, so they are compared on float64 twins, which failed: ",
          twin_diff.ok() ? "on another rank" : twin_diff.status().message());
    } else if (!(twin_most[1] <= Float64Twin::kTolerance)) {
      r.status = "error";
      r.message = absl::StrFormat(
          "gradients differ from store_all's on the float64 twins by %g of the largest "
          "(tolerance %g): the plan changes what is computed, not only its rounding",
          twin_most[1], Float64Twin::kTolerance);
    }
  }
  return absl::OkStatus();
}

// The results: ratios against store_all's (configs[0]) round by round, and the summaries of
// the rounds as results.csv holds them.
std::vector<ConfigResult> Summarize(std::vector<Config>& configs) {
  const ConfigResult& ref = configs[0].result;
  const bool have_ref = ref.status == "ok" && !ref.step_ms.empty();
  std::vector<ConfigResult> out;
  for (Config& c : configs) {
    ConfigResult& r = c.result;
    r.overhead_vs_store_all = r.activation_vs_store_all = r.peak_vs_store_all = kNaN;
    if (have_ref && r.status == "ok") {
      r.overhead_vs_store_all = OverheadRatio(r.step_ms, ref.step_ms);
      r.activation_vs_store_all =
          static_cast<double>(r.activation_bytes) / static_cast<double>(ref.activation_bytes);
      r.peak_vs_store_all = static_cast<double>(r.peak_bytes - r.baseline_bytes) /
                            static_cast<double>(ref.peak_bytes - ref.baseline_bytes);
    }
    r.steps = static_cast<int64_t>(r.step_ms.size());
    // What the variant leaves out of the step: the median over rounds of the difference.
    if (r.status == "ok" && !c.variant_ms.empty() && c.variant_ms.size() == r.step_ms.size()) {
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

// Runs every strategy on one model. Results in strategy order, store_all first. An error only
// when a data-parallel sweep cannot go on.
absl::StatusOr<std::vector<ConfigResult>> SweepModel(const SweepOptions& options,
                                                     const BoundModel& model, MemoryMeter& meter,
                                                     Progress& progress) {
  const std::string& model_spec = model.spec();
  std::vector<Config> configs = NewConfigs(options, model);
  WorkloadOptions workload_options = WorkloadOptionsFor(options);
  workload_options.profile.progress = progress.Profiling(model_spec);
  absl::StatusOr<Workload> workload = Workload::Build(model, workload_options);
  absl::StatusOr<const ModelProfile*> profiled =
      workload.ok() ? workload->Profile(meter) : workload.status();
  const Cohort cohort(options.group);
  RETURN_IF_ERROR(cohort.AgreeOn(profiled.status()));
  if (!profiled.ok()) {
    for (Config& c : configs) Fail(c.result, profiled.status());
    return Summarize(configs);
  }
  RETURN_IF_ERROR(PlanConfigs(cohort, *workload, **profiled, meter, progress, configs));
  RETURN_IF_ERROR(MeasureRounds(options, cohort, *workload, meter, progress, configs));
  if (configs.size() > 1) {  // a step each: on a long chain, seconds
    progress.Line(absl::StrFormat("%s: comparing %d strategies' gradients with store_all's",
                                  model_spec, configs.size() - 1));
  }
  RETURN_IF_ERROR(CheckGradients(options, cohort, model, *workload, meter, configs));
  return Summarize(configs);
}

std::string Num(double v, int decimals) {
  if (std::isnan(v)) return "";
  return absl::StrFormat("%.*f", decimals, v);
}

std::string Mib(int64_t bytes) { return absl::StrFormat("%.2f", bytes / 1048576.0); }

}  // namespace

WorkloadOptions WorkloadOptionsFor(const SweepOptions& options) {
  WorkloadOptions workload;
  workload.device = options.device;
  workload.seed = options.seed;
  if (options.group != nullptr) {
    workload.rank = options.group->rank();
    workload.world_size = options.group->world_size();
  }
  workload.profile.link_bytes_per_ms = static_cast<double>(options.link_bytes_per_s) / 1000.0;
  workload.profile.autocast = options.autocast;
  return workload;
}

c10::ScalarType AmpDtype(c10::Device device) {
  return device.is_cuda() ? c10::ScalarType::Half : c10::ScalarType::BFloat16;
}

StepOptions SweepStepOptions(const SweepOptions& options) {
  StepOptions step;
  step.autocast = options.autocast;
  return step;
}

absl::Status ValidateSweep(const SweepOptions& options) {
  if (options.models.empty()) return absl::InvalidArgumentError("no models given (--models)");
  // Bounded so that counts of steps never overflow (a step takes at least a millisecond).
  constexpr int kMostSteps = 1000000;
  if (options.steps < 1 || options.steps > kMostSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps=", options.steps, " is not accepted; accepted: 1..", kMostSteps));
  }
  if (options.warmup < 0 || options.warmup > kMostSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("warmup=", options.warmup, " is not accepted; accepted: 0..", kMostSteps));
  }
  if (options.memory_cap.has_value() && *options.memory_cap < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory cap ", *options.memory_cap, " is not accepted; accepted: bytes >= 0"));
  }
  if (!(options.time_limit_s >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("time limit ", options.time_limit_s,
                                                   " s is not accepted; accepted: >= 0 (0: none)"));
  }
  // Each spec once: two that say the same thing (uniform and uniform:segments=auto) would
  // measure the same configuration twice.
  if (options.strategies.empty() || options.strategies.front().id() != "store_all") {
    return absl::InvalidArgumentError(
        "the strategies do not start with store_all; accepted: a list BindStrategies made");
  }
  std::set<std::string> specs;
  for (const BoundStrategy& strategy : options.strategies) {
    if (!specs.insert(strategy.spec()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the strategies list ", strategy.spec(), " twice; accepted: a list BindStrategies made"));
    }
  }
  specs.clear();
  for (const BoundModel& model : options.models) {
    if (!specs.insert(model.spec()).second) {
      return absl::InvalidArgumentError(absl::StrCat("the models list ", model.spec(),
                                                     " twice; accepted: a list BindModels made"));
    }
  }
  // What can be checked of a strategy against each model's stages (a written plan's fit), before
  // anything runs.
  for (const BoundModel& model : options.models) {
    const std::vector<StageInfo> stages = model.Stages();
    for (const BoundStrategy& strategy : options.strategies) {
      if (absl::Status s = strategy.strategy().CheckStages(stages); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(s.message(), " (on ", model.spec(), ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<BoundModel>> BindModels(const std::vector<std::string>& texts) {
  std::vector<BoundModel> models;
  std::map<std::string, std::string> seen;  // canonical spec -> as given
  for (const std::string& text : texts) {
    ASSIGN_OR_RETURN(BoundModel model, BoundModel::Bind(text));
    auto [it, inserted] = seen.emplace(model.spec(), text);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("--models lists ", model.spec(),
                                                     " twice (as '", it->second, "' and '", text,
                                                     "'); accepted: each once"));
    }
    models.push_back(std::move(model));
  }
  return models;
}

absl::StatusOr<std::vector<BoundModel>> DepthScanModels(const BoundModel& model,
                                                        const std::vector<int>& depths) {
  const std::vector<ParamDef>& params = model.params();
  const auto depth_def = std::find_if(params.begin(), params.end(),
                                      [](const ParamDef& p) { return p.key == "depth"; });
  if (depth_def == params.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--depths: model '", model.id(), "' has no depth parameter; accepted: models with one"));
  }
  std::vector<BoundModel> models;
  for (const int depth : depths) {
    if (depth < depth_def->min_value || depth > depth_def->max_value) {
      return absl::InvalidArgumentError(
          absl::StrCat("--depths: depth ", depth, " is outside ", model.id(),
                       "'s range; accepted: ", depth_def->min_value, "..", depth_def->max_value));
    }
    ASSIGN_OR_RETURN(BoundModel deep, model.With("depth", absl::StrCat(depth)));
    models.push_back(std::move(deep));
  }
  return models;
}

std::string WithoutDepth(const BoundModel& model) {
  std::string base = model.id();
  for (const auto& [key, value] : model.values().Entries()) {
    if (key != "depth") absl::StrAppend(&base, ":", key, "=", value);
  }
  return base;
}

absl::StatusOr<std::vector<ConfigResult>> RunSweep(
    const SweepOptions& options, MemoryMeter& meter,
    const std::function<absl::Status(const ConfigResult&)>& on_result, std::ostream& out) {
  RETURN_IF_ERROR(ValidateSweep(options));
  const std::vector<BoundStrategy>& order = options.strategies;
  auto is_done = [&](const BoundModel& model) {
    return HasEveryRow(model.spec(), options.strategies, options.completed);
  };
  int64_t to_run = 0;
  for (const BoundModel& model : options.models) to_run += is_done(model) ? 0 : 1;
  // Per model: every round steps every strategy, then one gradient-check step each.
  Progress progress(
      out, to_run * static_cast<int64_t>(order.size()) * (options.warmup + options.steps + 1));
  std::vector<ConfigResult> all;
  const auto start = std::chrono::steady_clock::now();
  bool started_one = false;
  for (size_t m = 0; m < options.models.size(); ++m) {
    const BoundModel& model = options.models[m];
    if (is_done(model)) {
      progress.Line(absl::StrFormat("model %d/%d %s: already in results.csv, skipped", m + 1,
                                    options.models.size(), model.spec()));
      continue;
    }
    // Every rank stops at the same model: when the time is spent on any of them.
    ASSIGN_OR_RETURN(const bool in_time, Cohort(options.group)
                                             .OnEvery(!started_one || options.time_limit_s <= 0 ||
                                                      Elapsed(start) < options.time_limit_s));
    if (!in_time) {
      progress.Line(absl::StrFormat(
          "time limit of %.0f s reached: models %d..%d not started (--resume continues them)",
          options.time_limit_s, m + 1, options.models.size()));
      break;
    }
    started_one = true;
    progress.Line(absl::StrFormat("model %d/%d %s", m + 1, options.models.size(), model.spec()));
    ASSIGN_OR_RETURN(std::vector<ConfigResult> rows, SweepModel(options, model, meter, progress));
    for (ConfigResult& r : rows) {
      progress.Steps(1);
      if (options.completed.count({r.model_spec, r.strategy_spec})) continue;
      RETURN_IF_ERROR(on_result(r));
      progress.Line(absl::StrFormat("%s %s: %s%s", r.model, r.strategy, r.status,
                                    r.message.empty() ? "" : " (" + r.message + ")"));
      all.push_back(std::move(r));
    }
  }
  return all;
}

absl::StatusOr<std::vector<DepthPoint>> RunDepthScan(const SweepOptions& options,
                                                     const std::vector<int>& depths,
                                                     MemoryMeter& meter, std::ostream& out) {
  RETURN_IF_ERROR(ValidateSweep(options));
  const std::vector<BoundStrategy>& order = options.strategies;
  Progress progress(out,
                    static_cast<int64_t>(options.models.size() * depths.size() * order.size()));
  std::vector<DepthPoint> points;
  for (const BoundModel& model : options.models) {
    ASSIGN_OR_RETURN(std::vector<BoundModel> deep, DepthScanModels(model, depths));
    const std::string base = WithoutDepth(model);  // naming the panel
    for (size_t d = 0; d < depths.size(); ++d) {
      const int depth = depths[d];
      const std::string& model_spec = deep[d].spec();
      WorkloadOptions workload_options = WorkloadOptionsFor(options);
      // Bytes are what this scan reports; planners get one timing of each stage.
      workload_options.profile.min_repeats = 1;
      workload_options.profile.min_time_ms = 0;
      absl::StatusOr<Workload> workload = Workload::Build(deep[d], workload_options);
      absl::StatusOr<const ModelProfile*> profiled =
          workload.ok() ? workload->Profile(meter)
                        : absl::StatusOr<const ModelProfile*>(workload.status());
      if (!profiled.ok()) {
        progress.Line(absl::StrCat(model_spec, ": ", profiled.status().message()));
        progress.Steps(order.size());
        continue;
      }
      ModelProfile profile = **profiled;
      for (const BoundStrategy& strategy : order) {
        const std::string& strategy_spec = strategy.spec();
        progress.Steps(1);
        absl::StatusOr<PlannedRun> run = workload->Prepare(strategy, profile, meter);
        SeedRound(options.seed);
        absl::StatusOr<StepResult> step =
            run.ok() ? run->executor.Step(workload->batch(), SweepStepOptions(options))
                     : absl::StatusOr<StepResult>(run.status());
        if (!step.ok()) {
          progress.Line(
              absl::StrCat(model_spec, " ", strategy_spec, ": ", step.status().message()));
          continue;
        }
        // Labelled as given: "uniform" resolves to other segment counts at other depths.
        points.push_back({base, strategy_spec, depth, step->activation_bytes});
      }
      progress.Line(absl::StrCat(model_spec, ": done"));
    }
  }
  return points;
}

bool HasEveryRow(const std::string& model, const std::vector<BoundStrategy>& strategies,
                 const std::set<std::pair<std::string, std::string>>& rows) {
  return std::all_of(strategies.begin(), strategies.end(), [&](const BoundStrategy& strategy) {
    return rows.count({model, strategy.spec()}) > 0;
  });
}

absl::StatusOr<std::set<std::pair<std::string, std::string>>> CompletedPairs(
    const std::vector<ConfigResult>& rows) {
  std::set<std::pair<std::string, std::string>> pairs;
  for (const ConfigResult& r : rows) {
    const absl::StatusOr<std::string> model = CanonicalModelSpec(r.model_spec);
    const absl::StatusOr<std::string> strategy = BoundStrategySpec(r.strategy_spec);
    for (const absl::Status& s : {model.status(), strategy.status()}) {
      if (!s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("holds a row whose spec is not one: ", s.message()));
      }
    }
    pairs.emplace(*model, *strategy);
  }
  return pairs;
}

absl::StatusOr<std::vector<BoundStrategy>> BindStrategies(const std::vector<std::string>& texts) {
  std::vector<std::pair<std::string, BoundStrategy>> given;
  for (const std::string& text : texts) {
    ASSIGN_OR_RETURN(BoundStrategy bound, BoundStrategy::Bind(text));
    given.emplace_back(text, std::move(bound));
  }
  return SweepOrder(given);
}

absl::StatusOr<std::vector<BoundStrategy>> SweepOrder(
    const std::vector<std::pair<std::string, BoundStrategy>>& given) {
  ASSIGN_OR_RETURN(BoundStrategy store_all, BoundStrategy::Bind("store_all"));
  std::vector<BoundStrategy> out = {store_all};
  std::map<std::string, std::string> seen;  // spec -> as given
  for (const auto& [text, bound] : given) {
    if (bound.spec() == store_all.spec()) continue;  // the reference, first whether given or not
    auto [it, inserted] = seen.emplace(bound.spec(), text);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("--strategies lists ", bound.spec(),
                                                     " twice (as '", it->second, "' and '", text,
                                                     "'); accepted: each once"));
    }
    out.push_back(bound);
  }
  return out;
}

absl::StatusOr<std::vector<BoundStrategy>> WithBudgets(const std::vector<BoundStrategy>& strategies,
                                                       const std::vector<std::string>& budgets) {
  std::vector<BoundStrategy> out = strategies;
  if (budgets.empty()) return out;
  for (const BoundStrategy& strategy : strategies) {
    const std::string& param = strategy.budget_param();
    if (param.empty()) continue;
    ASSIGN_OR_RETURN(const StrategyRegistry::Entry* entry, Strategies().Find(strategy.id()));
    // The strategy at each budget with the parameters that the budget does not choose: those
    // that take `auto` do (uniform's segments, revolve's snapshots), the others (offload) say how
    // it plans, so `optimal,optimal:offload=no` draws two frontiers.
    std::string kept;
    for (const auto& [key, value] : strategy.values().Entries()) {
      const auto def = std::find_if(entry->params.begin(), entry->params.end(),
                                    [&key = key](const ParamDef& d) { return d.key == key; });
      if (key == param || (def != entry->params.end() && def->auto_allowed)) continue;
      absl::StrAppend(&kept, ":", key, "=", value);
    }
    for (const std::string& budget : budgets) {
      absl::StatusOr<BoundStrategy> budgeted =
          BoundStrategy::Bind(absl::StrCat(strategy.id(), ":", param, "=", budget, kept));
      if (!budgeted.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--budgets: ", budgeted.status().message()));
      }
      const bool listed = std::any_of(out.begin(), out.end(), [&](const BoundStrategy& s) {
        return s.spec() == budgeted->spec();
      });
      if (!listed) out.push_back(*std::move(budgeted));
    }
  }
  return out;
}

std::vector<std::string> SpecsOf(const std::vector<BoundStrategy>& strategies) {
  std::vector<std::string> specs;
  for (const BoundStrategy& strategy : strategies) specs.push_back(strategy.spec());
  return specs;
}

std::vector<std::string> SpecsOf(const std::vector<BoundModel>& models) {
  std::vector<std::string> specs;
  for (const BoundModel& model : models) specs.push_back(model.spec());
  return specs;
}

std::string FailureStatus(const absl::Status& status) {
  return status.code() == absl::StatusCode::kResourceExhausted ? "oom" : "error";
}

double MaxGradientDifference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  constexpr double kInfinite = std::numeric_limits<double>::infinity();
  if (a.size() != b.size()) return kInfinite;
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() != b[i].defined()) return kInfinite;
    if (!a[i].defined()) continue;
    if (a[i].sizes() != b[i].sizes()) return kInfinite;  // not broadcast into agreement
    if (a[i].numel() == 0) continue;
    // Where either side is NaN or inf, both must hold the same value (NaN matching NaN);
    // max() of a difference with a NaN in it is NaN, which no <= or == check would catch.
    const at::Tensor finite = a[i].isfinite().logical_and(b[i].isfinite());
    const at::Tensor same = a[i].eq(b[i]).logical_or(a[i].isnan().logical_and(b[i].isnan()));
    if (!finite.logical_or(same).all().item<bool>()) return kInfinite;
    diff = std::max(diff,
                    a[i].sub(b[i]).abs().masked_fill(finite.logical_not(), 0).max().item<double>());
  }
  return diff;
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
    if (r.status != "ok") {
      absl::StrAppend(&out, absl::StrFormat("  %-28s %-6s %s\n", r.strategy, r.status,
                                            Printable(r.message).substr(0, 90)));
      continue;
    }
    absl::StrAppend(
        &out, absl::StrFormat("  %-28s %-6s %12s %8s %10s %8s %10s %9s %10d %11s\n", r.strategy,
                              r.status, Mib(r.activation_bytes), Num(r.activation_vs_store_all, 3),
                              Mib(r.peak_bytes - r.baseline_bytes), Num(r.peak_vs_store_all, 3),
                              Num(r.step_ms_median, 1), Num(r.overhead_vs_store_all, 3),
                              r.recompute_forwards,
                              std::isnan(r.max_grad_diff_vs_store_all)
                                  ? std::string("-")
                                  : absl::StrFormat("%.3g", r.max_grad_diff_vs_store_all)));
  }
  return out;
}

}  // namespace ckpt
