#include "experiments/predict.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/base/bytes.h"
#include "core/base/status_macros.h"
#include "core/plan/memory_model.h"
#include "core/plan/plan_text.h"
#include "core/plan/states.h"
#include "core/plan/strategy.h"
#include "core/plan/time_model.h"
#include "core/run/profiler.h"
#include "core/run/workload.h"
#include "experiments/configurations.h"
#include "experiments/kept_profiles.h"
#include "experiments/progress.h"
#include "experiments/records/results.h"
#include "experiments/records/results_csv.h"
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
    // Measured as the rest of the profile was (its autocast, timing and link), quietly.
    ProfileOptions profile_options = shallow_workload.options().profile;
    profile_options.progress = nullptr;
    RETURN_IF_ERROR(ExtendProfile(*shallow_workload.model(), shallow_workload.batch(), meter,
                                  device, measure, shallow, profile_options));
  }
  if (complete) return full;
  return ExpandProfile(shallow, full.model, full.stages);
}

}  // namespace

namespace {

// What a card of `device_memory` bytes holds of a step's requested bytes, with the allocator's
// `margin`.
int64_t UsableBytes(int64_t device_memory, double margin) {
  return static_cast<int64_t>(device_memory / margin);
}

}  // namespace

std::optional<bool> Prediction::Fits() const {
  if (device_memory <= 0 || status != RowStatus::kOk) return std::nullopt;
  return total_peak_bytes <= UsableBytes(device_memory, allocator_margin);
}

double AllocatorMargin(absl::string_view model_spec) {
  // The largest reserved-over-requested peak of the family's plans on the H100, rounded up
  // (docs/sweep.md names the run and its figures).
  const absl::string_view family = model_spec.substr(0, model_spec.find(':'));
  if (family == "gpt2") return 1.25;
  if (family == "llama") return 1.30;
  return 1.75;  // ResNet-152's, the largest measured: any other family, unmeasured
}

absl::StatusOr<std::vector<Prediction>> Predict(const SweepOptions& options,
                                                const PredictSetting& setting, MemoryMeter& meter,
                                                std::ostream& progress_out) {
  const StatesSetting& states = setting.states;
  const std::optional<int64_t>& device_memory = setting.device_memory;
  RETURN_IF_ERROR(ValidateStatesSetting(states));
  // The profile with the device model's times where one is asked for.
  auto priced = [&](ModelProfile profile) -> absl::StatusOr<ModelProfile> {
    if (setting.device_model != nullptr) {
      RETURN_IF_ERROR(PriceProfile(*setting.device_model, profile));
    }
    return profile;
  };
  LoopOptions loop(WorkloadOptionsFor(options));
  // The shallow copy is built and profiled; the strategies plan for one rank of the full model.
  loop.prepare = false;
  loop.stand_in = ShallowModel;
  loop.kept = options.kept;
  loop.extrapolate = setting.extrapolate;
  // The model in hand's full profile, expanded once, and each of its stages' counterpart in the
  // shallow copy: what planned_on made, read by the model's rows.
  ModelProfile full;
  std::vector<int> counterparts;
  loop.planned_on = [&](const BoundModel& model,
                        const ModelProfile& measured) -> absl::StatusOr<ModelProfile> {
    counterparts.clear();
    absl::StatusOr<ModelProfile> expanded =
        ExpandProfile(measured, model.spec(), model.Stages(), &counterparts);
    if (!expanded.ok()) return expanded.status();
    ASSIGN_OR_RETURN(full, priced(*std::move(expanded)));
    return RankProfile(full, states);
  };
  Progress progress(progress_out,
                    static_cast<int64_t>(options.models.size() * options.strategies.size()));
  std::vector<Prediction> rows;
  RETURN_IF_ERROR(ForEachModel(
      options.models, options.strategies, loop, meter, progress, [&](PreparedModel& m) {
        const std::string& model = m.model->spec();
        // The model's own failure (its shallow copy does not fit, say) is its rows', one a
        // strategy: the other models are still answered.
        ModelProfile shallow;  // extended by the profiles the plans need
        if (m.status.ok()) shallow = **m.workload->Profile(meter);
        absl::StatusOr<RankStates> state =
            m.status.ok() ? StatesPerRank(full, states) : absl::StatusOr<RankStates>(m.status);
        std::set<std::string> float32_ops;
        if (m.status.ok()) {
          for (const std::vector<StageProfile>& menu : full.measured) {
            float32_ops.insert(menu.front().float32_ops.begin(), menu.front().float32_ops.end());
          }
        }
        const double margin = AllocatorMargin(model);
        // The row of the strategy `spec` under `plan` (or why it has none).
        auto predict = [&](const std::string& spec, const absl::StatusOr<Plan>& plan) {
          Prediction& p = rows.emplace_back();
          p.model = model;
          p.profiled = m.built.empty() ? model : m.built;
          p.extrapolated = full.extrapolated;
          if (setting.device_model != nullptr) p.device_model = setting.device_model->name;
          p.states = StateLayoutName(states.layout);
          p.world_size = states.world_size;
          p.autocast = options.autocast ? c10::toString(*options.autocast) : "";
          p.collectives_timed = states.collective_bytes_per_ms > 0;
          p.float32_ops.assign(float32_ops.begin(), float32_ops.end());
          p.strategy = spec;
          if (device_memory.has_value()) {
            p.device_memory = *device_memory;
            p.allocator_margin = margin;
          }
          absl::Status why = state.status();
          if (state.ok()) {
            p.parameter_bytes = state->parameters;
            p.buffer_bytes = BufferBytes(full.stages);
            p.gradient_bytes = state->gradients;
            p.optimizer_bytes = state->optimizer;
            p.largest_gather_bytes = state->largest_gather;
            p.batch_bytes = full.input_bytes + full.target_bytes;
            absl::StatusOr<ModelProfile> with_policies =
                plan.ok() ? ProfileForPlan(*m.workload, shallow, full, counterparts, *plan, meter,
                                           options.device)
                          : absl::StatusOr<ModelProfile>(plan.status());
            if (with_policies.ok()) with_policies = priced(*std::move(with_policies));
            absl::StatusOr<ModelProfile> profile =
                with_policies.ok() ? RankProfile(*with_policies, states) : with_policies.status();
            absl::StatusOr<MemoryPrediction> memory =
                profile.ok() ? PredictMemory(*profile, *plan)
                             : absl::StatusOr<MemoryPrediction>(profile.status());
            absl::StatusOr<double> ms = memory.ok() ? PredictStepMs(*profile, *plan)
                                                    : absl::StatusOr<double>(memory.status());
            why = ms.status();
            if (ms.ok()) {
              p.strategy = plan->strategy;
              p.plan = PlanToText(*plan, full.stages);
              p.activation_bytes = memory->activation_bytes;
              p.step_peak_bytes = memory->peak_bytes;
              p.step_ms = *ms;
              p.total_peak_bytes = p.parameter_bytes + p.buffer_bytes + p.optimizer_bytes +
                                   p.batch_bytes + std::max(p.step_peak_bytes, p.gradient_bytes);
            }
          }
          if (!why.ok()) {
            p.status = FailureStatus(why);
            p.error = std::string(why.message());
          }
          progress.Steps(1);
          progress.Line(absl::StrCat(model, " ", p.strategy, ": ",
                                     p.status == RowStatus::kOk ? "predicted" : p.error));
        };
        for (size_t k = 0; k < options.strategies.size(); ++k) {
          // (A model that failed has no configurations: its failure is every row's.)
          const absl::Status planned =
              m.status.ok() ? m.configurations[k].status : absl::Status(m.status);
          predict(options.strategies[k].spec(), planned.ok()
                                                    ? absl::StatusOr<Plan>(m.configurations[k].plan)
                                                    : absl::StatusOr<Plan>(planned));
        }
        if (device_memory.has_value()) {
          // What the card leaves the step, for each strategy that plans to a budget (once each:
          // "optimal" and "optimal:budget=8MiB" plan to it alike).
          absl::StatusOr<int64_t> left =
              state.ok() ? UsableBytes(*device_memory, margin) - state->parameters -
                               BufferBytes(full.stages) - state->optimizer -
                               (full.input_bytes + full.target_bytes)
                         : absl::StatusOr<int64_t>(state.status());
          std::set<std::string> fitted_specs;
          for (const BoundStrategy& strategy : options.strategies) {
            if (strategy.budget_param().empty()) continue;
            absl::StatusOr<BoundStrategy> fitted =
                !left.ok()   ? absl::StatusOr<BoundStrategy>(left.status())
                : *left <= 0 ? absl::StatusOr<BoundStrategy>(absl::ResourceExhaustedError(
                                   "the parameters, buffers, AdamW's moments and the batch alone "
                                   "are past "
                                   "--device_memory over the allocator's margin"))
                             : strategy.WithBudget(*left);
            // A re-plan that cannot run is still labelled by the budget it was for (0 where the
            // card leaves nothing), not as the strategy's row above.
            const absl::StatusOr<BoundStrategy> labelled =
                fitted.ok() || !left.ok() ? fitted
                                          : strategy.WithBudget(std::max<int64_t>(*left, 0));
            const std::string spec = labelled.ok() ? labelled->spec() : strategy.spec();
            if (!fitted_specs.insert(spec).second) continue;
            progress.AddToTotal(1);
            predict(spec, fitted.ok() ? fitted->PlanFor(m.profile)
                                      : absl::StatusOr<Plan>(fitted.status()));
          }
        }
        // The shallow copy's profile, with the policies every plan above needed.
        if (options.kept != nullptr && m.status.ok()) {
          options.kept->Keep(m.workload->bound_model(), shallow, progress);
        }
        return absl::OkStatus();
      }));
  return rows;
}

namespace {

// What the rows of one model share: the setting, the state per rank, what autocast left in
// float32.
std::string ModelHeading(const Prediction& p) {
  // A model that could not be profiled has no sizes to give (every strategy's row says why).
  const bool profiled = p.status == RowStatus::kOk || p.parameter_bytes > 0;
  std::string out = absl::StrCat("### ", p.model, "\n\n");
  if (!profiled) {
    return absl::StrCat(out, "Not profiled: ", p.profiled, " could not be built and measured.\n\n");
  }
  absl::StrAppend(
      &out,
      p.model == p.profiled ? "Built and profiled whole"
                            : absl::StrCat("Profiled as ", p.profiled,
                                           ", its repeated stages' measurements given to the rest"),
      p.autocast.empty() ? "" : absl::StrCat(", under ", p.autocast, " autocast"), ". ");
  if (!p.extrapolated.empty()) {
    absl::StrAppend(&out, "Its bytes were extrapolated exactly from profiles at ", p.extrapolated,
                    " (every count checked on the last of them)",
                    p.device_model.empty() ? "; its step times are that size's, scaled by each "
                                             "stage's matrix-product FLOPs, an estimate. "
                                           : ". ");
  }
  if (!p.device_model.empty()) {
    const absl::StatusOr<const DeviceModel*> device = FindDeviceModel(p.device_model);
    absl::StrAppend(&out, "Step times are priced on the ", p.device_model, " model (",
                    device.ok() ? (*device)->described : p.device_model,
                    ") from the work each stage's operators did, counted exactly: ",
                    device.ok() ? (*device)->calibrated : "", ". ");
  }
  const std::string rank =
      p.world_size > 1 ? absl::StrCat("One rank of ", p.world_size, ", ", p.states, " state: ")
                       : std::string("One process: ");
  absl::StrAppend(&out, rank, "parameters ", FormatMib(p.parameter_bytes, 1), " MiB, buffers ",
                  FormatMib(p.buffer_bytes, 1), " MiB, gradients ", FormatMib(p.gradient_bytes, 1),
                  " MiB, AdamW state ", FormatMib(p.optimizer_bytes, 1),
                  " MiB (in the parameters' dtypes), batch ", FormatMib(p.batch_bytes, 1), " MiB");
  if (p.states == "zero3" && p.world_size > 1) {
    absl::StrAppend(&out, "; a stage gathers up to ", FormatMib(p.largest_gather_bytes, 1),
                    " MiB of parameters beyond the rank's shard while it runs");
  }
  absl::StrAppend(&out, ".");
  if (!p.autocast.empty()) {
    absl::StrAppend(&out, " Operators autocast left in float32: ",
                    p.float32_ops.empty() ? "none" : absl::StrJoin(p.float32_ops, ", "), ".");
  }
  if (p.world_size > 1) {
    absl::StrAppend(&out, p.collectives_timed
                              ? " Step times include the collectives at the given rate."
                              : " Step times leave the collectives out (no "
                                "--collective_bandwidth).");
  }
  return absl::StrCat(out, "\n\n");
}

// Where the gradients outweigh store_all's activations, what that leaves checkpointing, in
// those words; else empty. Every strategy's step peak is at least the gradients, all of which
// exist at the end of backward, so checkpointing can lower the total by at most store_all's
// peak's excess over them.
std::string GradientsSetTheTotal(const std::vector<const Prediction*>& rows) {
  const Prediction* store_all = nullptr;
  for (const Prediction* p : rows) {
    if (p->status == RowStatus::kOk && p->strategy == "store_all") store_all = p;
  }
  if (store_all == nullptr || store_all->gradient_bytes < store_all->activation_bytes) return "";
  return absl::StrCat(
      "\nThe gradients (", FormatMib(store_all->gradient_bytes, 1),
      " MiB, every one alive at the end of backward) outweigh store_all's activations (",
      FormatMib(store_all->activation_bytes, 1),
      " MiB), which are gone by then: every strategy's step peak is at least the gradients, so "
      "checkpointing can lower the total by at most store_all's peak's excess over them (",
      FormatMib(std::max<int64_t>(0, store_all->step_peak_bytes - store_all->gradient_bytes), 1),
      " MiB).\n");
}

// The rows of each model, in order (a model's rows are consecutive).
std::vector<std::vector<const Prediction*>> ByModel(const std::vector<Prediction>& rows) {
  std::vector<std::vector<const Prediction*>> models;
  for (const Prediction& p : rows) {
    if (models.empty() || models.back().front()->model != p.model) models.emplace_back();
    models.back().push_back(&p);
  }
  return models;
}

// With --device_memory, a line per model: the fastest plan that fits the card, at what step
// ratio against store_all's, or the least any needs; else empty.
std::string FitSummary(const std::vector<Prediction>& rows) {
  std::string out;
  for (const std::vector<const Prediction*>& model : ByModel(rows)) {
    const Prediction& first = *model.front();
    if (first.device_memory <= 0) continue;
    const Prediction *store_all = nullptr, *fastest = nullptr, *least = nullptr;
    for (const Prediction* p : model) {
      if (p->status != RowStatus::kOk) continue;
      if (p->strategy == "store_all") store_all = p;
      if (least == nullptr || p->total_peak_bytes < least->total_peak_bytes) least = p;
      if (p->Fits().value_or(false) && (fastest == nullptr || p->step_ms < fastest->step_ms)) {
        fastest = p;
      }
    }
    const std::string card = absl::StrFormat(
        "%s (%s with the allocator's margin, x%.2f)", FormatSize(first.device_memory),
        FormatSize(UsableBytes(first.device_memory, first.allocator_margin)),
        first.allocator_margin);
    absl::StrAppend(&out, "- ", first.model, ": ");
    if (fastest != nullptr) {
      absl::StrAppend(&out, "**fits** in ", card, " with ", fastest->strategy, ", ",
                      FormatSize(fastest->total_peak_bytes),
                      store_all != nullptr && store_all->step_ms > 0
                          ? absl::StrFormat(", at %.2fx store_all's step (%s)",
                                            fastest->step_ms / store_all->step_ms,
                                            fastest->device_model.empty()
                                                ? "this machine's times"
                                                : fastest->device_model + "'s modelled times")
                          : std::string(),
                      ".\n");
    } else if (least != nullptr) {
      absl::StrAppend(&out, "**does not fit** in ", card, ": the least any strategy needs is ",
                      FormatSize(least->total_peak_bytes), " (", least->strategy, ").\n");
    } else {
      absl::StrAppend(&out, "not answered for ", card, ": no strategy could be predicted.\n");
    }
  }
  return out.empty() ? out : absl::StrCat(out, "\n");
}

// The predictions' tables, a model each.
std::string Tables(const std::vector<Prediction>& rows) {
  std::string out;
  for (const std::vector<const Prediction*>& model : ByModel(rows)) {
    const bool card = model.front()->device_memory > 0;
    absl::StrAppend(&out, out.empty() ? "" : "\n", ModelHeading(*model.front()),
                    "| strategy | activations MiB | step peak above baseline MiB | total training "
                    "peak GiB | step ms |",
                    card ? " fits |\n| --- | ---: | ---: | ---: | ---: | --- |\n"
                         : "\n| --- | ---: | ---: | ---: | ---: |\n");
    for (const Prediction* p : model) {
      if (p->status != RowStatus::kOk) {
        absl::StrAppend(&out, "| ", p->strategy, " | ", RowStatusName(p->status), ": ", p->error,
                        " | | | |", card ? " |\n" : "\n");
        continue;
      }
      absl::StrAppend(&out, "| ", p->strategy, " | ", FormatMib(p->activation_bytes, 1), " | ",
                      FormatMib(p->step_peak_bytes, 1), " | ", FormatGib(p->total_peak_bytes, 2),
                      " | ", absl::StrFormat("%.0f", p->step_ms), " |",
                      card ? (p->Fits().value_or(false) ? " yes |\n" : " no |\n") : "\n");
    }
    absl::StrAppend(&out, GradientsSetTheTotal(model));
  }
  return out;
}

}  // namespace

std::string PredictionTable(const std::vector<Prediction>& rows) {
  return absl::StrCat(FitSummary(rows), Tables(rows));
}

std::string SavingsBesidePublished(const std::vector<Prediction>& rows,
                                   const std::vector<PublishedSaving>& published) {
  // Decimal units, as the documents write GB.
  auto gb = [](int64_t bytes) { return absl::StrFormat("%.2f GB", bytes / 1e9); };
  auto mb = [](int64_t bytes) { return absl::StrFormat("%.0f MB", bytes / 1e6); };
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
      if (p.status != RowStatus::kOk || p.model.substr(0, p.model.find(':')) != figure.model)
        continue;
      if (p.strategy == "store_all") {
        store_all = &p;
      } else {
        others.push_back(&p);
      }
    }
    if (store_all == nullptr) continue;
    if (out.empty()) {
      out =
          "| model | documents: without, with checkpointing | predicted here, per rank | "
          "strategy | total training peak | saving | activations | saving |\n| --- | --- | --- "
          "| --- | ---: | ---: | ---: | ---: |\n";
    }
    const std::string documents =
        absl::StrFormat("%.1f GB, %.1f GB (%s)", figure.without_gb, figure.with_gb,
                        saving(figure.without_gb, figure.with_gb));
    std::string setting =
        store_all->autocast.empty() ? "float32" : store_all->autocast + " autocast";
    if (store_all->world_size > 1) {
      absl::StrAppend(&setting, ", ", store_all->states, " over ", store_all->world_size, " ranks");
    }
    absl::StrAppend(&out, "| ", figure.what, " | ", documents, " | `", store_all->model, "` (",
                    setting, ") | store_all | ", gb(store_all->total_peak_bytes), " | | ",
                    mb(store_all->activation_bytes), " | |\n");
    for (const Prediction* p : others) {
      absl::StrAppend(&out, "| | | | ", p->strategy, " | ", gb(p->total_peak_bytes), " | ",
                      saving(store_all->total_peak_bytes, p->total_peak_bytes), " | ",
                      mb(p->activation_bytes), " | ",
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
      "# Predicted at full size\n\n`", command, "`\n\n", FitSummary(rows),
      "Nothing here ran at full size. Each model was built shallow (the spec it was "
      "profiled as is named below), its blocks' measured bytes and times given to every further "
      "block, and every strategy planned and predicted on that profile by the memory and time "
      "models the sweep checks against measured steps, as one data-parallel rank runs it with "
      "the state laid out as each model's line says (docs/training-state.md gives the formulas). "
      "The "
      "total training peak is the rank's parameters, the model's buffers, AdamW's two moments "
      "and the batch, plus "
      "the larger of the step's peak above them and the rank's gradients; the optimizer "
      "step's own temporaries are not counted. Tables are in MiB and GiB (2^20, 2^30 bytes), "
      "the comparison with the documents in their MB and GB (10^6, 10^9).\n\n");
  const std::string beside = SavingsBesidePublished(rows, published);
  if (!beside.empty()) {
    absl::StrAppend(&out,
                    "## Beside the documents' figures\n\nThe documents give no sizes or "
                    "precision; the sizes here are this run's (the spec on each row).\n\n",
                    beside, "\n## Every strategy\n\n");
  }
  absl::StrAppend(&out, Tables(rows));
  return out;
}

namespace {

// predict.csv's columns, each a name and its cell for a row. Empty where unknown, as in
// results.csv: the state's sizes where the model could not be profiled, the predictions where
// the row is not ok.
struct PredictionColumn {
  const char* name;
  std::function<std::string(const Prediction&)> cell;
};

bool Profiled(const Prediction& p) { return p.status == RowStatus::kOk || p.parameter_bytes > 0; }

// A byte count, empty unless `known(p)`.
PredictionColumn BytesColumn(const char* name, int64_t Prediction::*field,
                             bool (*known)(const Prediction&)) {
  return {name,
          [=](const Prediction& p) { return known(p) ? absl::StrCat(p.*field) : std::string(); }};
}

bool PredictedOk(const Prediction& p) { return p.status == RowStatus::kOk; }

const std::vector<PredictionColumn>& PredictionColumns() {
  using P = Prediction;
  static const auto* columns = new std::vector<PredictionColumn>{
      {"model", [](const P& p) { return p.model; }},
      {"profiled_model", [](const P& p) { return p.profiled; }},
      {"strategy", [](const P& p) { return p.strategy; }},
      {"status", [](const P& p) { return std::string(RowStatusName(p.status)); }},
      {"states", [](const P& p) { return p.states; }},
      {"world_size", [](const P& p) { return absl::StrCat(p.world_size); }},
      {"autocast", [](const P& p) { return p.autocast.empty() ? "none" : p.autocast; }},
      {"collectives_timed",
       [](const P& p) { return std::string(p.collectives_timed ? "true" : "false"); }},
      BytesColumn("parameter_bytes", &P::parameter_bytes, &Profiled),
      BytesColumn("buffer_bytes", &P::buffer_bytes, &Profiled),
      BytesColumn("gradient_bytes", &P::gradient_bytes, &Profiled),
      BytesColumn("optimizer_bytes", &P::optimizer_bytes, &Profiled),
      BytesColumn("batch_bytes", &P::batch_bytes, &Profiled),
      BytesColumn("largest_gather_bytes", &P::largest_gather_bytes, &Profiled),
      BytesColumn("predicted_activation_bytes", &P::activation_bytes, &PredictedOk),
      BytesColumn("predicted_step_peak_bytes", &P::step_peak_bytes, &PredictedOk),
      BytesColumn("predicted_total_peak_bytes", &P::total_peak_bytes, &PredictedOk),
      {"predicted_step_ms",
       [](const P& p) {
         return PredictedOk(p) ? absl::StrFormat("%.3f", p.step_ms) : std::string();
       }},
      {"fits",
       [](const P& p) {
         const std::optional<bool> fits = p.Fits();
         return std::string(!fits.has_value() ? "" : *fits ? "true" : "false");
       }},
      {"plan", [](const P& p) { return p.plan; }},
      {"message", [](const P& p) { return p.error; }},
      {"extrapolated_from", [](const P& p) { return p.extrapolated; }},
      {"device_model", [](const P& p) { return p.device_model.empty() ? "none" : p.device_model; }},
  };
  return *columns;
}

}  // namespace

std::string PredictionCsv(const std::vector<Prediction>& rows) {
  std::vector<std::string> cells;
  for (const PredictionColumn& column : PredictionColumns()) cells.push_back(column.name);
  std::string out = CsvLine(cells);
  for (const Prediction& p : rows) {
    cells.clear();
    for (const PredictionColumn& column : PredictionColumns()) cells.push_back(column.cell(p));
    absl::StrAppend(&out, CsvLine(cells));
  }
  return out;
}

}  // namespace ckpt
