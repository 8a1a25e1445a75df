#include "experiments/training.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ATen/Context.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/base/files.h"
#include "core/base/status_macros.h"
#include "core/dist/data_parallel.h"
#include "core/plan/strategy.h"
#include "core/run/chain_model.h"
#include "core/run/executor.h"
#include "core/run/profiler.h"
#include "core/run/torch_status.h"
#include "core/run/workload.h"
#include "core/train/loss_scaler.h"
#include "core/train/trainer.h"
#include "experiments/configurations.h"
#include "experiments/output/gnuplot.h"
#include "experiments/output/report.h"
#include "experiments/records/results_csv.h"

namespace ckpt {
namespace {

// One strategy's curve on a fresh model, its `plan` prepared with `profile` (of the same model
// spec), trained by core/train/trainer.h. Data parallel: the ranks' gradients are averaged by a
// reducer, each step's loss is the mean of the ranks', and `aborted` is set when the ranks cannot
// go on together.
LossCurve Train(const BoundModel& bound, const BoundStrategy& strategy, const Plan& plan,
                ModelProfile& profile, const SweepOptions& sweep, const TrainingOptions& options,
                MemoryMeter& meter, bool* reassociates, absl::Status* aborted) {
  LossCurve curve;
  curve.model = bound.spec();
  curve.strategy = strategy.spec();
  auto fail = [&](const absl::Status& s) {
    curve.status = FailureStatus(s);
    curve.message = std::string(s.message());
    return curve;
  };
  WorkloadOptions workload_options = WorkloadOptionsFor(sweep);
  workload_options.profile.timed = false;
  absl::StatusOr<Workload> workload = Workload::Build(bound, workload_options);
  absl::StatusOr<PlannedRun> run = workload.ok() ? workload->Prepare(plan, profile, meter)
                                                 : absl::StatusOr<PlannedRun>(workload.status());
  *aborted = AgreeOnOutcome(sweep.group, run.status());
  if (!aborted->ok()) return fail(*aborted);
  if (!run.ok()) return fail(run.status());
  const std::shared_ptr<ChainModel>& model = workload->model();
  curve.model = model->spec();
  curve.strategy = run->plan.strategy;
  *reassociates = curve.reassociates = run->plan.Reassociates();

  const bool fp16 = options.amp && sweep.device.is_cuda();
  TrainerOptions trainer_options;
  trainer_options.accumulate = options.accumulate;
  trainer_options.learning_rate = options.learning_rate;
  trainer_options.clip_norm = options.clip_norm;
  if (options.amp) trainer_options.autocast = AmpDtype(sweep.device);
  trainer_options.loss_scaling = options.loss_scaling.value_or(fp16);
  trainer_options.scaler = options.scaler;
  std::unique_ptr<GradientReducer> reducer;
  if (sweep.group != nullptr) {
    absl::StatusOr<std::unique_ptr<GradientReducer>> made =
        GradientReducer::Create(*sweep.group, model->Parameters(), model->State());
    if (!made.ok()) {
      *aborted = RankError(*sweep.group, "could not make a reducer", made.status());
      return fail(*aborted);
    }
    reducer = *std::move(made);
    trainer_options.hooks = reducer.get();
  }
  absl::StatusOr<Trainer> trainer =
      Trainer::Create(&run->executor, model->Parameters(), trainer_options);
  if (!trainer.ok()) return fail(trainer.status());

  // The sweep's cap applies to each configuration's own steps (SweepOptions::memory_cap).
  const ScopedMemoryCap cap(meter, sweep.memory_cap);
  for (int step = 0; step < options.steps; ++step) {
    // Micro-batch `index` of the whole run: its batch and its dropout seed, the same for every
    // strategy.
    std::vector<Batch> batches;
    std::vector<uint64_t> seeds;
    for (int micro = 0; micro < options.accumulate; ++micro) {
      const uint64_t index = static_cast<uint64_t>(step) * options.accumulate + micro;
      absl::StatusOr<Batch> batch = workload->MakeBatch(sweep.seed + 1 + index);
      if (!batch.ok()) return fail(batch.status());
      batches.push_back(*std::move(batch));
      seeds.push_back(sweep.seed + 7919 * (index + 1));
    }
    absl::StatusOr<TrainStep> done = trainer->Step(batches, seeds);
    // Ranks that stop must stop together: a rank that went on would wait for the others.
    *aborted = AgreeOnOutcome(sweep.group, done.status());
    if (!aborted->ok()) return fail(*aborted);
    if (!done.ok()) return fail(done.status());
    double loss = done->loss;  // the global batch's: the mean of the ranks'
    if (sweep.group != nullptr) {
      absl::StatusOr<std::vector<double>> mean = sweep.group->Mean({loss});
      if (!mean.ok()) {
        *aborted = mean.status();
        return fail(mean.status());
      }
      loss = (*mean)[0];
    }
    curve.losses.push_back(loss);
    if (!done->diverged.empty()) return fail(absl::FailedPreconditionError(done->diverged));
    curve.skipped_steps += done->skipped;
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
  // Bytes only: training reads no times, so every rank plans alike.
  LoopOptions loop(WorkloadOptionsFor(sweep));
  loop.workload.profile.timed = false;
  loop.prepare = false;  // each curve prepares its plan on a fresh model
  Progress lines(progress, static_cast<int64_t>(sweep.models.size() * sweep.strategies.size()));
  std::vector<LossCurve> curves;
  RETURN_IF_ERROR(ForEachModel(
      sweep.models, sweep.strategies, loop, meter, lines, [&](PreparedModel& m) -> absl::Status {
        RETURN_IF_ERROR(m.status);
        const size_t first = curves.size();
        for (const Configuration& c : m.configurations) {
          bool reassociates = false;
          absl::Status aborted;
          absl::StatusOr<LossCurve> curve =
              !c.status.ok() ? absl::StatusOr<LossCurve>(c.status) : RunTorch([&] {
                return Train(*m.model, *c.strategy, c.plan, m.profile, sweep, options, meter,
                             &reassociates, &aborted);
              });
          RETURN_IF_ERROR(aborted);
          if (!curve.ok()) {
            LossCurve failed;
            failed.model = m.model->spec();
            failed.strategy = c.strategy->spec();
            failed.status = FailureStatus(curve.status());
            failed.message = std::string(curve.status().message());
            curve = failed;
          }
          // Against store_all's curve (the first of this model).
          const LossCurve& reference = curves.size() > first ? curves[first] : *curve;
          if (curve->status == RowStatus::kOk && reference.status != RowStatus::kOk) {
            curve->max_diff_vs_store_all = std::numeric_limits<double>::quiet_NaN();
            curve->message =
                absl::StrCat("not compared: store_all's curve is ", RowStatusName(reference.status),
                             " (", reference.message, ")");
          } else if (curve->status == RowStatus::kOk &&
                     curve->losses.size() == reference.losses.size()) {
            const double diff = CurveDeparture(curve->losses, reference.losses);
            double scale = 0;
            for (const double loss : reference.losses) {
              if (std::isfinite(loss)) scale = std::max(scale, std::abs(loss));
            }
            curve->max_diff_vs_store_all = diff;
            const bool exact =
                !reassociates && !sweep.device.is_cuda();  // see RunTraining's comment
            curve->tolerance = exact ? 0.0 : (options.amp ? 2e-2 : 1e-3) * std::max(scale, 1.0);
            if (!(diff <= curve->tolerance)) {
              curve->status = RowStatus::kError;
              curve->departs = true;
              curve->message =
                  absl::StrFormat("loss curve departs from store_all's by %g (tolerance %g)", diff,
                                  curve->tolerance);
            }
          }
          lines.Steps(1);
          lines.Line(
              absl::StrFormat("training %s %s: %s, final loss %s", curve->model, curve->strategy,
                              RowStatusName(curve->status),
                              curve->losses.empty() ? "-" : absl::StrCat(curve->losses.back())));
          curves.push_back(*std::move(curve));
        }
        return absl::OkStatus();
      }));
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
    absl::StrAppend(&md, "| ", c.model, " | ", c.strategy, " | ", RowStatusName(c.status),
                    c.message.empty() ? "" : ": " + c.message, " | ",
                    c.losses.empty() ? "" : absl::StrFormat("%.6g", c.losses.back()), " | ",
                    std::isnan(c.max_diff_vs_store_all)
                        ? std::string()
                        : absl::StrFormat("%g", c.max_diff_vs_store_all),
                    " | ", absl::StrFormat("%g", c.tolerance), " | ", c.skipped_steps, " |\n");
  }
  // The picture is drawn where some curve has a loss (WriteLossCurves).
  const bool drawn = std::any_of(curves.begin(), curves.end(),
                                 [](const LossCurve& c) { return !c.losses.empty(); });
  absl::StrAppend(&md, drawn ? "\n![loss curves](loss.png)\n"
                             : "\nNo curve has a loss to draw (every one failed), so there is "
                               "no picture.\n");
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
      absl::StrAppend(&csv, CsvField(c.model), ",", CsvField(c.strategy), ",",
                      RowStatusName(c.status), ",", i + 1, ",",
                      absl::StrFormat("%.9g", c.losses[i]), "\n");
    }
  }
  std::string gp = absl::StrCat(
      PanelsPreamble("loss", models.size(), 2, 640, 420,
                     "'Training loss per optimizer step: every strategy on top of store\\_all'"),
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
    absl::StrAppend(&gp, Panel(model, plots));
  }
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/losses.csv", csv));
  if (models.empty()) {  // not a failure of the run: its rows and report say why
    return absl::UnavailableError(
        "no curve has a loss to draw (every one failed; see report.md): loss.png not drawn");
  }
  return DrawPanels(dir, "loss", data, gp);
}

}  // namespace ckpt
