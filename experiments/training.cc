#include "experiments/training.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ATen/Context.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/chain_model.h"
#include "core/executor.h"
#include "core/files.h"
#include "core/profiler.h"
#include "core/status_macros.h"
#include "core/strategy.h"
#include "core/torch_status.h"
#include "core/workload.h"
#include "experiments/gnuplot.h"
#include "experiments/loss_scaler.h"
#include "experiments/report.h"
#include "experiments/results_csv.h"
#include "torch/optim/adamw.h"

namespace ckpt {
namespace {

// Scales all gradients down so that their global L2 norm is at most `max_norm` (as
// torch.nn.utils.clip_grad_norm_).
void ClipGradientNorm(const std::vector<at::Tensor>& params, double max_norm) {
  at::NoGradGuard no_grad;
  double squares = 0;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) squares += p.grad().to(at::kDouble).pow(2).sum().item<double>();
  }
  const double norm = std::sqrt(squares);
  if (norm > max_norm) {
    for (const at::Tensor& p : params) {
      if (p.grad().defined()) p.mutable_grad().mul_(max_norm / (norm + 1e-6));
    }
  }
}

// One strategy's curve on a fresh model, planned from `profile` (of the same model spec).
// Throws LibTorch's exceptions (caught by the caller).
LossCurve Train(const std::string& model_spec, const std::string& strategy_spec,
                ModelProfile& profile, const SweepOptions& sweep, const TrainingOptions& options,
                MemoryMeter& meter, bool* chunked) {
  LossCurve curve;
  curve.model = model_spec;
  curve.strategy = strategy_spec;
  WorkloadOptions workload_options;
  workload_options.device = sweep.device;
  workload_options.seed = sweep.seed;
  absl::StatusOr<Workload> workload = Workload::Build(model_spec, workload_options);
  absl::StatusOr<PlannedRun> run = workload.ok() ? workload->Plan(strategy_spec, profile, meter)
                                                 : absl::StatusOr<PlannedRun>(workload.status());
  if (!run.ok()) {
    curve.status = FailureStatus(run.status());
    curve.message = std::string(run.status().message());
    return curve;
  }
  const std::shared_ptr<ChainModel>& model = workload->model();
  ChainExecutor* exec = &run->executor;
  curve.model = model->spec();
  curve.strategy = run->plan.strategy;
  *chunked = curve.chunked = run->plan.ChunksSequence();

  std::vector<at::Tensor> params = model->Parameters();
  torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(options.learning_rate));
  const bool fp16 = options.amp && sweep.device.is_cuda();
  const bool scaling = options.loss_scaling.value_or(fp16);
  absl::StatusOr<DynamicLossScaler> scaler = DynamicLossScaler::Create(options.scaler);
  if (!scaler.ok()) {  // RunTraining validated the options; kept for callers that did not
    curve.status = "error";
    curve.message = std::string(scaler.status().message());
    return curve;
  }
  StepOptions step_options;
  if (options.amp) step_options.autocast = fp16 ? at::kHalf : at::kBFloat16;

  // The sweep's cap applies to each configuration's own steps (SweepOptions::memory_cap).
  const ScopedMemoryCap cap(meter, sweep.memory_cap);
  for (int step = 0; step < options.steps; ++step) {
    double loss_sum = 0;
    step_options.loss_scale = scaling ? scaler->scale() : 1.0;
    // The micro-batches' gradients are summed here, in the same order for every strategy,
    // rather than by autograd into .grad: a parameter used by several stages (the tied
    // embedding) would otherwise be accumulated in a strategy-dependent order, and float
    // addition is not associative.
    std::vector<at::Tensor> sums(params.size());
    for (int micro = 0; micro < options.accumulate; ++micro) {
      const uint64_t index = static_cast<uint64_t>(step) * options.accumulate + micro;
      const Batch batch = model->MakeBatch(sweep.seed + 1 + index);
      at::manual_seed(sweep.seed + 7919 * (index + 1));
      absl::StatusOr<StepResult> r = exec->Step(batch, step_options);
      if (!r.ok()) {
        curve.status = FailureStatus(r.status());
        curve.message = std::string(r.status().message());
        return curve;
      }
      loss_sum += r->loss;
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        const at::Tensor& g = params[i].grad();
        if (g.defined()) sums[i] = sums[i].defined() ? sums[i].add_(g) : g.clone();
      }
    }
    curve.losses.push_back(loss_sum / options.accumulate);
    // The mean over micro-batches, with the loss scale undone, becomes the gradient.
    const double unscale = 1.0 / (options.accumulate * step_options.loss_scale);
    at::Tensor all_finite;  // stays on the device: one synchronisation per step, not per tensor
    {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        if (!sums[i].defined()) continue;
        params[i].mutable_grad() = sums[i].mul_(unscale);
        if (!scaling) continue;
        at::Tensor finite = sums[i].isfinite().all();
        all_finite = all_finite.defined() ? all_finite.logical_and(finite) : finite;
      }
    }
    if (scaling) {
      absl::StatusOr<bool> take = scaler->Update(!all_finite.defined() || all_finite.item<bool>());
      if (!take.ok()) {
        curve.status = "error";
        curve.message = std::string(take.status().message());
        return curve;
      }
      if (!*take) {  // overflow: the scaler lowered the scale; this step's update is dropped
        ++curve.skipped_steps;
        continue;
      }
    }
    ClipGradientNorm(params, options.clip_norm);
    optimizer.step();
  }
  return curve;
}

}  // namespace

absl::Status ValidateTraining(const TrainingOptions& options) {
  if (options.steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--train_steps=", options.steps,
                                                   " is not accepted; accepted: an integer >= 1"));
  }
  if (options.accumulate < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--accumulate=", options.accumulate,
                                                   " is not accepted; accepted: an integer >= 1"));
  }
  return DynamicLossScaler::Create(options.scaler).status();
}

double CurveDeparture(const std::vector<double>& a, const std::vector<double>& b) {
  double departure = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::isfinite(a[i]) && std::isfinite(b[i])) {
      departure = std::max(departure, std::abs(a[i] - b[i]));
    } else if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) {
      return std::numeric_limits<double>::infinity();
    }
  }
  return departure;
}

absl::StatusOr<std::vector<LossCurve>> RunTraining(const SweepOptions& sweep,
                                                   const TrainingOptions& options,
                                                   MemoryMeter& meter, std::ostream& progress) {
  RETURN_IF_ERROR(ValidateSweep(sweep));
  RETURN_IF_ERROR(ValidateTraining(options));
  const std::vector<std::string> order = StrategyOrder(sweep.strategies);
  std::vector<LossCurve> curves;
  for (const std::string& model_spec : sweep.models) {
    // One profile per model, for the strategies to plan from (bytes only: training reads
    // no times).
    WorkloadOptions workload_options;
    workload_options.device = sweep.device;
    workload_options.seed = sweep.seed;
    workload_options.profile.timed = false;
    ModelProfile profile;
    {
      ASSIGN_OR_RETURN(Workload probe, Workload::Build(model_spec, workload_options));
      ASSIGN_OR_RETURN(const ModelProfile* measured, probe.Profile(meter));
      profile = *measured;
    }

    const size_t first = curves.size();
    for (const std::string& strategy_spec : order) {
      bool chunked = false;
      absl::StatusOr<LossCurve> curve = RunTorch([&] {
        return Train(model_spec, strategy_spec, profile, sweep, options, meter, &chunked);
      });
      if (!curve.ok()) {
        LossCurve failed;
        failed.model = model_spec;
        failed.strategy = strategy_spec;
        failed.status = FailureStatus(curve.status());
        failed.message = std::string(curve.status().message());
        curve = failed;
      }
      // Against store_all's curve (the first of this model).
      const LossCurve& reference = curves.size() > first ? curves[first] : *curve;
      if (curve->status == "ok" && reference.status != "ok") {
        curve->max_diff_vs_store_all = std::numeric_limits<double>::quiet_NaN();
        curve->message = absl::StrCat("not compared: store_all's curve is ", reference.status, " (",
                                      reference.message, ")");
      } else if (curve->status == "ok" && curve->losses.size() == reference.losses.size()) {
        const double diff = CurveDeparture(curve->losses, reference.losses);
        double scale = 0;
        for (const double loss : reference.losses) {
          if (std::isfinite(loss)) scale = std::max(scale, std::abs(loss));
        }
        curve->max_diff_vs_store_all = diff;
        const bool exact = !chunked && !sweep.device.is_cuda();  // see RunTraining's comment
        curve->tolerance = exact ? 0.0 : (options.amp ? 2e-2 : 1e-3) * std::max(scale, 1.0);
        if (!(diff <= curve->tolerance)) {
          curve->status = "error";
          curve->departs = true;
          curve->message = absl::StrFormat(
              "loss curve departs from store_all's by %g (tolerance %g)", diff, curve->tolerance);
        }
      }
      progress << absl::StrFormat("training %s %s: %s, final loss %s\n", curve->model,
                                  curve->strategy, curve->status,
                                  curve->losses.empty() ? "-" : absl::StrCat(curve->losses.back()));
      curves.push_back(*std::move(curve));
    }
  }
  return curves;
}

std::string TrainingReport(const TrainingOptions& options, const std::vector<LossCurve>& curves) {
  std::string md = absl::StrFormat(
      "## Training: %d AdamW steps (lr %g), %d micro-batch(es) each, clipping at %g%s\n\n",
      options.steps, options.learning_rate, options.accumulate, options.clip_norm,
      options.amp ? ", mixed precision" : "");
  absl::StrAppend(&md,
                  "| model | strategy | status | final loss | max abs departure from store_all | "
                  "tolerance | skipped steps |\n| --- | --- | --- | ---: | ---: | ---: | ---: |\n");
  for (const LossCurve& c : curves) {
    absl::StrAppend(&md, "| ", c.model, " | ", c.strategy, " | ", c.status,
                    c.message.empty() ? "" : ": " + c.message, " | ",
                    c.losses.empty() ? "" : absl::StrFormat("%.6g", c.losses.back()), " | ",
                    std::isnan(c.max_diff_vs_store_all)
                        ? std::string()
                        : absl::StrFormat("%g", c.max_diff_vs_store_all),
                    " | ", absl::StrFormat("%g", c.tolerance), " | ", c.skipped_steps, " |\n");
  }
  absl::StrAppend(&md, "\n![loss curves](loss.png)\n");
  return md;
}

absl::Status WriteLossCurves(const std::string& dir, const std::vector<LossCurve>& curves) {
  std::string csv = "model,strategy,status,step,loss\n";
  std::string data;
  std::vector<std::string> models;  // those with a curve to draw
  for (const LossCurve& c : curves) {
    if (!c.losses.empty() && std::find(models.begin(), models.end(), c.model) == models.end()) {
      models.push_back(c.model);
    }
    for (size_t i = 0; i < c.losses.size(); ++i) {
      absl::StrAppend(&csv, CsvField(c.model), ",", CsvField(c.strategy), ",", c.status, ",", i + 1,
                      ",", absl::StrFormat("%.9g", c.losses[i]), "\n");
    }
  }
  const size_t columns = models.size() > 1 ? 2 : 1;
  const size_t rows = (models.size() + columns - 1) / columns;
  std::string gp = absl::StrCat(
      PlotPreamble("loss.png", 640 * static_cast<int>(columns), 420 * static_cast<int>(rows)),
      "set multiplot layout ", rows, ",", columns,
      " title 'Training loss per optimizer step: every strategy on top of store\\_all'\n",
      "set grid\nset key outside bottom center horizontal\nset xlabel 'optimizer step'\n",
      "set ylabel 'loss'\n");
  int block = 0;
  for (const std::string& model : models) {
    std::vector<std::string> plots;
    int k = 0;
    for (const LossCurve& c : curves) {
      if (c.model != model || c.losses.empty()) continue;
      absl::StrAppend(&data, "# ", GpDataLabel(c.model), " ", GpDataLabel(c.strategy), "\n");
      for (size_t i = 0; i < c.losses.size(); ++i) {
        absl::StrAppend(&data, i + 1, " ", absl::StrFormat("%.9g", c.losses[i]), "\n");
      }
      absl::StrAppend(&data, "\n\n");
      // Later strategies drawn thinner and dashed so the curves they cover stay visible.
      plots.push_back(absl::StrCat("'loss.dat' index ", block++, " using 1:2 with lines lw ",
                                   k == 0 ? 4 : 2, " dt ", k == 0 ? 1 : k + 1, " title ",
                                   GpLiteral(c.strategy), " noenhanced"));
      ++k;
    }
    absl::StrAppend(&gp, "set title ", GpTitle(model), " noenhanced\nplot ",
                    absl::StrJoin(plots, ", "), "\n");
  }
  absl::StrAppend(&gp, "unset multiplot\n");
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/losses.csv", csv));
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/loss.dat", data));
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/loss.gp", gp));
  if (models.empty()) {
    return absl::FailedPreconditionError(
        "no curve has a loss to draw (every one failed; see report.md): loss.png not drawn");
  }
  return RenderPlot(dir, "loss.gp", "loss.png");
}

}  // namespace ckpt
