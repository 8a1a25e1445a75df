#include "experiments/predict.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "core/plan/memory_model.h"
#include "core/plan/plan_text.h"
#include "core/plan/strategy.h"
#include "core/plan/time_model.h"
#include "core/run/profiler.h"
#include "core/run/workload.h"
#include "experiments/progress.h"
#include "experiments/results_csv.h"
#include "experiments/sweep.h"

namespace ckpt {

absl::StatusOr<BoundModel> ShallowModel(const BoundModel& model) {
  const std::vector<StageInfo> full_stages = model.Stages();
  for (int depth = 2; depth <= 4; ++depth) {
    absl::StatusOr<std::vector<BoundModel>> shallow = DepthScanModels(model, {depth});
    if (!shallow.ok()) return model;  // no depth parameter: built whole
    const std::vector<StageInfo> shallow_stages = shallow->front().Stages();
    if (shallow_stages.size() >= full_stages.size()) return model;
    // Deep enough when every stage of the full model has its counterpart.
    if (ExpandProfile(StructureOnlyProfile(shallow->front().spec(), shallow_stages), model.spec(),
                      full_stages)
            .ok()) {
      return shallow->front();
    }
  }
  return model;
}

namespace {

// The full model's profile (`full`, expanded from `shallow` with `counterparts`) with every
// policy `plan` gives: one the profile lacks is measured on its counterpart in the shallow model,
// and the profile expanded again; `full` itself when it has them all.
absl::StatusOr<ModelProfile> ProfileForPlan(Workload& shallow_workload, ModelProfile& shallow,
                                            const ModelProfile& full,
                                            const std::vector<int>& counterparts, const Plan& plan,
                                            MemoryMeter& meter, c10::Device device) {
  bool complete = true;  // `full` has every policy of the plan
  for (int i = 0; i < full.num_stages(); ++i) {
    const StagePolicy& policy = plan.PolicyOf(i);
    if (full.Find(i, policy) != nullptr) continue;
    complete = false;
    if (shallow.Find(counterparts[i], policy) != nullptr) continue;  // measured for another plan
    Plan measure;
    const int n = shallow.num_stages();
    measure.segments = {Segment{0, n, SegmentMode::kStored}};
    measure.stage_policies.assign(n, StagePolicy());
    measure.stage_policies[counterparts[i]] = policy;
    RETURN_IF_ERROR(ExtendProfile(*shallow_workload.model(), shallow_workload.batch(), meter,
                                  device, measure, shallow));
  }
  if (complete) return full;
  return ExpandProfile(shallow, full.model, full.stages);
}

}  // namespace

absl::StatusOr<std::vector<Prediction>> Predict(const SweepOptions& options, MemoryMeter& meter,
                                                std::ostream& progress_out) {
  const std::vector<BoundStrategy>& strategies = options.strategies;
  Progress progress(progress_out, static_cast<int64_t>(options.models.size() * strategies.size()));
  std::vector<Prediction> rows;
  for (const BoundModel& bound : options.models) {
    const std::string& model = bound.spec();
    ASSIGN_OR_RETURN(const BoundModel shallow_model, ShallowModel(bound));
    const std::string& profiled = shallow_model.spec();
    progress.Line(absl::StrCat("profiling ", profiled, model == profiled ? "" : " for ",
                               model == profiled ? "" : model));
    WorkloadOptions workload_options = WorkloadOptionsFor(options);
    workload_options.profile.progress = progress.Profiling(profiled);
    // The model's own failure (its shallow copy does not fit, say) is its rows', one a strategy:
    // the other models are still answered.
    absl::StatusOr<Workload> workload = Workload::Build(shallow_model, workload_options);
    absl::StatusOr<const ModelProfile*> measured =
        workload.ok() ? workload->Profile(meter) : workload.status();
    absl::StatusOr<std::vector<StageInfo>> stages =
        measured.ok() ? absl::StatusOr<std::vector<StageInfo>>(bound.Stages()) : measured.status();
    std::vector<int> counterparts;
    absl::StatusOr<ModelProfile> full =
        stages.ok() ? ExpandProfile(**measured, model, *stages, &counterparts) : stages.status();
    if (!full.ok()) {
      for (const BoundStrategy& strategy : strategies) {
        Prediction p;
        p.model = model;
        p.profiled = profiled;
        p.strategy = strategy.spec();
        p.status = FailureStatus(full.status());
        p.error = std::string(full.status().message());
        rows.push_back(std::move(p));
      }
      progress.Steps(static_cast<int64_t>(strategies.size()));
      progress.Line(absl::StrCat(model, ": ", rows.back().status, ", ", rows.back().error));
      continue;
    }
    ModelProfile shallow = **measured;  // extended by the profiles the plans need
    for (const BoundStrategy& strategy : strategies) {
      Prediction p;
      p.model = model;
      p.profiled = profiled;
      p.strategy = strategy.spec();
      p.parameter_bytes = p.gradient_bytes = full->param_bytes;
      p.optimizer_bytes = 2 * full->param_bytes;
      p.batch_bytes = full->input_bytes;
      absl::StatusOr<Plan> plan = strategy.PlanFor(*full);
      absl::StatusOr<ModelProfile> profile =
          plan.ok() ? ProfileForPlan(*workload, shallow, *full, counterparts, *plan, meter,
                                     options.device)
                    : absl::StatusOr<ModelProfile>(plan.status());
      absl::StatusOr<MemoryPrediction> memory =
          profile.ok() ? PredictMemory(*profile, *plan)
                       : absl::StatusOr<MemoryPrediction>(profile.status());
      absl::StatusOr<double> ms =
          memory.ok() ? PredictStepMs(*profile, *plan) : absl::StatusOr<double>(memory.status());
      if (!ms.ok()) {
        p.status = FailureStatus(ms.status());
        p.error = std::string(ms.status().message());
      } else {
        p.strategy = plan->strategy;
        p.plan = PlanToText(*plan, full->stages);
        p.activation_bytes = memory->activation_bytes;
        p.step_peak_bytes = memory->peak_bytes;
        p.step_ms = *ms;
        p.total_peak_bytes = p.parameter_bytes + p.optimizer_bytes + p.batch_bytes +
                             std::max(p.step_peak_bytes, p.gradient_bytes);
      }
      rows.push_back(std::move(p));
      progress.Steps(1);
      progress.Line(absl::StrCat(model, " ", rows.back().strategy, ": ",
                                 rows.back().status == "ok" ? "predicted" : rows.back().error));
    }
  }
  return rows;
}

std::string PredictionTable(const std::vector<Prediction>& rows) {
  auto mib = [](int64_t bytes) { return absl::StrFormat("%.1f", bytes / 1048576.0); };
  auto gib = [](int64_t bytes) { return absl::StrFormat("%.2f", bytes / 1073741824.0); };
  std::string out;
  std::string model;
  for (const Prediction& p : rows) {
    if (p.model != model) {
      model = p.model;
      // A model that could not be profiled has no sizes to give (every strategy's row says why).
      const bool profiled = p.status == "ok" || p.parameter_bytes > 0;
      absl::StrAppend(
          &out, out.empty() ? "" : "\n", "### ", p.model, "\n\n",
          !profiled ? absl::StrCat("Not profiled: ", p.profiled, " could not be built and measured")
          : p.model == p.profiled
              ? "Built and profiled whole"
              : absl::StrCat("Profiled as ", p.profiled,
                             ", its repeated stages' measurements given to the rest"),
          !profiled
              ? std::string(".\n\n")
              : absl::StrCat(". Parameters ", mib(p.parameter_bytes), " MiB, gradients ",
                             mib(p.gradient_bytes), " MiB, AdamW state ", mib(p.optimizer_bytes),
                             " MiB, batch ", mib(p.batch_bytes), " MiB (float32).\n\n"),
          "| strategy | activations MiB | step peak above baseline MiB | total training peak GiB "
          "| step ms |\n| --- | ---: | ---: | ---: | ---: |\n");
    }
    if (p.status != "ok") {
      absl::StrAppend(&out, "| ", p.strategy, " | ", p.status, ": ", p.error, " | | | |\n");
      continue;
    }
    absl::StrAppend(&out, "| ", p.strategy, " | ", mib(p.activation_bytes), " | ",
                    mib(p.step_peak_bytes), " | ", gib(p.total_peak_bytes), " | ",
                    absl::StrFormat("%.0f", p.step_ms), " |\n");
  }
  return out;
}

std::string SavingsBesidePublished(const std::vector<Prediction>& rows,
                                   const std::vector<PublishedSaving>& published) {
  auto gib = [](int64_t bytes) { return bytes / 1073741824.0; };
  // In whole percent; "N% more" where checkpointing adds (its transients on a peak that the
  // gradients set), and "0%" for what rounds to nothing either way.
  auto saving = [](double without, double with) {
    const double percent = std::round(100 * (1 - with / without));
    if (percent == 0) return std::string("0%");
    return percent > 0 ? absl::StrFormat("%.0f%%", percent)
                       : absl::StrFormat("%.0f%% more", -percent);
  };
  std::string out;
  for (const PublishedSaving& figure : published) {
    const Prediction* store_all = nullptr;
    std::vector<const Prediction*> others;
    for (const Prediction& p : rows) {
      if (p.status != "ok" || p.model.substr(0, p.model.find(':')) != figure.model) continue;
      if (p.strategy == "store_all") {
        store_all = &p;
      } else {
        others.push_back(&p);
      }
    }
    if (store_all == nullptr) continue;
    if (out.empty()) {
      out =
          "| model | documents: without, with checkpointing | predicted here | strategy | total "
          "training peak | saving | activations | saving |\n| --- | --- | --- | --- | ---: | "
          "---: | ---: | ---: |\n";
    }
    const std::string documents =
        absl::StrFormat("%.1f GB, %.1f GB (%s)", figure.without_gb, figure.with_gb,
                        saving(figure.without_gb, figure.with_gb));
    absl::StrAppend(&out, "| ", figure.what, " | ", documents, " | `", store_all->model,
                    "` | store_all | ",
                    absl::StrFormat("%.2f GiB", gib(store_all->total_peak_bytes)), " | | ",
                    absl::StrFormat("%.0f MiB", store_all->activation_bytes / 1048576.0), " | |\n");
    for (const Prediction* p : others) {
      absl::StrAppend(&out, "| | | | ", p->strategy, " | ",
                      absl::StrFormat("%.2f GiB", gib(p->total_peak_bytes)), " | ",
                      saving(store_all->total_peak_bytes, p->total_peak_bytes), " | ",
                      absl::StrFormat("%.0f MiB", p->activation_bytes / 1048576.0), " | ",
                      store_all->activation_bytes > 0
                          ? saving(store_all->activation_bytes, p->activation_bytes)
                          : std::string(),
                      " |\n");
    }
  }
  return out;
}

std::string PredictionReport(const std::vector<Prediction>& rows,
                             const std::vector<PublishedSaving>& published,
                             const std::string& command) {
  std::string out = absl::StrCat(
      "# Predicted at full size\n\n`", command,
      "`\n\nNothing here ran at full size. Each model was built shallow (the spec it was "
      "profiled as is named below), its blocks' measured bytes and times given to every further "
      "block, and every strategy planned and predicted on that profile by the memory and time "
      "models the sweep checks against measured steps. Bytes are float32. The total training "
      "peak is the parameters, AdamW's two moments per parameter and the batch, plus the larger "
      "of the step's peak above them and every gradient; the optimizer step's own temporaries "
      "are not counted.\n\n");
  const std::string beside = SavingsBesidePublished(rows, published);
  if (!beside.empty()) {
    absl::StrAppend(&out,
                    "## Beside the documents' figures\n\nThe documents give no sizes or "
                    "precision; the sizes here are this run's (the spec on each row).\n\n",
                    beside, "\n## Every strategy\n\n");
  }
  absl::StrAppend(&out, PredictionTable(rows));
  return out;
}

std::string PredictionCsv(const std::vector<Prediction>& rows) {
  std::string out =
      "model,profiled_model,strategy,status,parameter_bytes,gradient_bytes,optimizer_bytes,"
      "batch_bytes,predicted_activation_bytes,predicted_step_peak_bytes,"
      "predicted_total_peak_bytes,predicted_step_ms,plan,message\n";
  for (const Prediction& p : rows) {
    absl::StrAppend(&out, CsvField(p.model), ",", CsvField(p.profiled), ",", CsvField(p.strategy),
                    ",", p.status, ",", p.parameter_bytes, ",", p.gradient_bytes, ",",
                    p.optimizer_bytes, ",", p.batch_bytes, ",", p.activation_bytes, ",",
                    p.step_peak_bytes, ",", p.total_peak_bytes, ",",
                    absl::StrFormat("%.3f", p.step_ms), ",", CsvField(p.plan), ",",
                    CsvField(p.error), "\n");
  }
  return out;
}

}  // namespace ckpt
