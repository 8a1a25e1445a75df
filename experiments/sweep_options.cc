#include "experiments/sweep_options.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/plan/spec.h"

namespace ckpt {

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
  workload.profile.timed = options.profile_times;
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
                                                       const std::vector<int64_t>& budgets) {
  std::vector<BoundStrategy> out = strategies;
  for (const BoundStrategy& strategy : strategies) {
    if (strategy.budget_param().empty()) continue;
    for (const int64_t budget : budgets) {
      absl::StatusOr<BoundStrategy> budgeted = strategy.WithBudget(budget);
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

void MarkFailed(ConfigResult& row, const absl::Status& why) {
  row.status = FailureStatus(why);
  row.message = std::string(why.message());
}

}  // namespace ckpt
