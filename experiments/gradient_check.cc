#include "experiments/gradient_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "ATen/Context.h"
#include "ATen/core/grad_mode.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "c10/core/DefaultDtype.h"
#include "core/base/status_macros.h"
#include "core/run/chain_model.h"
#include "core/run/torch_status.h"

namespace ckpt {
namespace {

constexpr double kGradTolerance = 1e-5;

std::vector<at::Tensor> CollectGradients(ChainModel& model, const Batch& batch) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : model.Parameters()) grads.push_back(p.grad());
  for (const at::Tensor& x : batch.inputs) grads.push_back(x.grad());
  return grads;
}

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
    at::manual_seed(options_.seed);
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
}  // namespace

absl::Status CheckGradients(const SweepOptions& options, const Cohort& cohort, Workload& workload,
                            MemoryMeter& meter, const Plan& store_all,
                            const std::vector<CheckedConfig>& configs) {
  ChainModel& model = *workload.model();
  GradientSteps steps(options, cohort, model, workload.batch(), options.autocast);
  // store_all's executor, or a new one where its configuration failed under the cap.
  std::optional<ChainExecutor> rebuilt;
  ChainExecutor* reference_executor = configs[0].executor;
  absl::Status no_reference = absl::OkStatus();
  if (reference_executor == nullptr && store_all.segments.empty()) {
    no_reference = absl::FailedPreconditionError("store_all was not planned");
  } else if (reference_executor == nullptr) {
    absl::StatusOr<ChainExecutor> made =
        ChainExecutor::Create(workload.model(), store_all, &meter, options.device);
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
  for (const CheckedConfig& c : configs) {
    ConfigResult& r = *c.row;
    r.max_grad_diff_vs_store_all = ConfigResult::kUnknown;
    r.grad_check.clear();
    if (c.executor == nullptr) continue;  // its row says why
    if (!have_reference) {
      r.status = RowStatus::kError;
      r.message = absl::StrCat("its gradients could not be compared: store_all's reference step: ",
                               no_reference.message());
      continue;
    }
    absl::Status stepped;
    std::vector<at::Tensor> grads;
    RETURN_IF_ERROR(steps.Step(*c.executor, stepped, grads));
    if (!stepped.ok()) {
      MarkFailed(r, stepped);
      continue;
    }
    absl::StatusOr<double> diff =
        RunTorch([&] { return MaxGradientDifference(grads, reference_grads); });
    const double local = diff.ok() ? *diff : ConfigResult::kUnknown;
    // The largest rank's; unknown (NaN) on any rank is unknown.
    ASSIGN_OR_RETURN(const std::vector<double> most,
                     cohort.Max({std::isnan(local) ? 1.0 : 0.0, std::isnan(local) ? 0.0 : local}));
    r.max_grad_diff_vs_store_all = most[0] > 0 ? ConfigResult::kUnknown : most[1];
    if (most[0] > 0) {
      r.status = RowStatus::kError;
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
        r.status = RowStatus::kError;
        r.message = absl::StrFormat(
            "gradients differ from store_all's by %g in %s (max |grad| %g, tolerance %g relative)",
            r.max_grad_diff_vs_store_all, r.grad_check, reference_scale, kGradTolerance);
      }
      continue;
    }
    // The exact check: on the float64 twins, made once per model where needed.
    if (twin == nullptr && no_twin.ok()) {
      absl::StatusOr<std::unique_ptr<Float64Twin>> made =
          Float64Twin::Make(options, workload.bound_model(), store_all, meter);
      if (made.ok()) {
        twin = *std::move(made);
      } else {
        no_twin = made.status();
      }
    }
    absl::StatusOr<double> twin_diff =
        twin != nullptr ? twin->RelativeDifference(plan) : absl::StatusOr<double>(no_twin);
    const double twin_local = twin_diff.ok() ? *twin_diff : ConfigResult::kUnknown;
    ASSIGN_OR_RETURN(const std::vector<double> twin_most,
                     cohort.Max({std::isnan(twin_local) ? 1.0 : 0.0,
                                 std::isnan(twin_local) ? 0.0 : twin_local}));
    r.grad_check = "float64 twin";
    if (twin_most[0] > 0) {
      r.status = RowStatus::kError;
      r.message = absl::StrCat(
          "its gradients could not be compared exactly: the plan sums in another order than "
          "store_all's, so they are compared on float64 twins, which failed: ",
          twin_diff.ok() ? "on another rank" : twin_diff.status().message());
    } else if (!(twin_most[1] <= Float64Twin::kTolerance)) {
      r.status = RowStatus::kError;
      r.message = absl::StrFormat(
          "gradients differ from store_all's on the float64 twins by %g of the largest "
          "(tolerance %g): the plan changes what is computed, not only its rounding",
          twin_most[1], Float64Twin::kTolerance);
    }
  }
  return absl::OkStatus();
}

double LargestMagnitude(const std::vector<at::Tensor>& grads) {
  double m = 0;
  for (const at::Tensor& g : grads) {
    if (g.defined() && g.numel() > 0) m = std::max(m, g.abs().max().item<double>());
  }
  return m;
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

}  // namespace ckpt
