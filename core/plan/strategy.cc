#include "core/plan/strategy.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace ckpt {

StrategyRegistry& Strategies() {
  static auto* registry = new StrategyRegistry("strategy");  // leaked: outlives statics
  return *registry;
}

namespace {
class FunctionStrategy : public Strategy {
 public:
  explicit FunctionStrategy(PlannerRegistration::PlanFunction plan) : plan_(plan) {}
  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override {
    return plan_(profile);
  }

 private:
  PlannerRegistration::PlanFunction plan_;
};
}  // namespace

PlannerRegistration::PlannerRegistration(const char* id, const char* summary, PlanFunction plan) {
  Strategies().Register({id,
                         summary,
                         {},
                         [plan](const ParamValues&) -> absl::StatusOr<std::unique_ptr<Strategy>> {
                           return std::make_unique<FunctionStrategy>(plan);
                         },
                         StrategyTraits{}});
}

std::vector<std::string> DefaultStrategies() {
  std::vector<std::string> ids;
  for (const StrategyRegistry::Entry* entry : Strategies().Entries()) {
    bool required = false;
    for (const ParamDef& p : entry->params) required |= p.default_value.empty();
    if (!required) ids.push_back(entry->id);
  }
  return ids;
}

BoundStrategy::BoundStrategy(ParamValues values, std::shared_ptr<const Strategy> strategy,
                             std::string budget_param)
    : values_(std::move(values)),
      spec_(values_.Canonical()),
      strategy_(std::move(strategy)),
      budget_param_(std::move(budget_param)) {}

absl::StatusOr<BoundStrategy> BoundStrategy::Bind(const std::string& spec_text) {
  ASSIGN_OR_RETURN(Spec spec, ParseSpec(spec_text));
  ASSIGN_OR_RETURN(const StrategyRegistry::Entry* entry, Strategies().Find(spec.name));
  ASSIGN_OR_RETURN(ParamValues values, BindParams(spec, entry->params));
  ASSIGN_OR_RETURN(std::unique_ptr<Strategy> strategy, entry->factory(values));
  return BoundStrategy(std::move(values), std::move(strategy), entry->traits.budget_param);
}

absl::StatusOr<BoundStrategy> BoundStrategy::WithBudget(int64_t bytes) const {
  if (budget_param_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(id(), " plans to no memory budget"));
  }
  ASSIGN_OR_RETURN(const StrategyRegistry::Entry* entry, Strategies().Find(id()));
  ParamValues values = values_;
  for (const ParamDef& def : entry->params) {
    if (def.key == budget_param_) {
      ASSIGN_OR_RETURN(values, values.With(def, bytes));
    } else if (def.key == entry->traits.budget_chooses) {
      ASSIGN_OR_RETURN(values, values.With(def, std::nullopt));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Strategy> strategy, entry->factory(values));
  return BoundStrategy(std::move(values), std::move(strategy), budget_param_);
}

absl::StatusOr<Plan> BoundStrategy::PlanFor(const ModelProfile& profile) const {
  ASSIGN_OR_RETURN(Plan plan, strategy_->MakePlan(profile));
  // The label: the id and the shown parameters, in declaration order.
  plan.strategy = id();
  for (const auto& [key, unused] : values_.Entries()) {
    for (const auto& [shown_key, value] : plan.shown) {
      if (shown_key == key) absl::StrAppend(&plan.strategy, ":", key, "=", value);
    }
  }
  for (const auto& [key, unused] : plan.shown) {
    const auto& declared = values_.Entries();
    if (std::none_of(declared.begin(), declared.end(),
                     [&key = key](const auto& entry) { return entry.first == key; })) {
      return absl::InternalError(absl::StrCat("strategy bug: ", id(), "'s plan shows '", key,
                                              "', which it does not declare"));
    }
  }
  if (absl::Status s = ValidatePlan(plan, profile.stages); !s.ok()) {
    // A strategy's own plan that is not valid is a bug in the strategy, not bad input.
    return absl::InternalError(absl::StrCat("strategy bug: ", s.message()));
  }
  return plan;
}

absl::StatusOr<std::string> BoundStrategySpec(const std::string& spec_text) {
  ASSIGN_OR_RETURN(Spec spec, ParseSpec(spec_text));
  ASSIGN_OR_RETURN(ParamValues values, Strategies().Bind(spec));
  return values.Canonical();
}

absl::StatusOr<Plan> PlanFor(const std::string& spec_text, const ModelProfile& profile) {
  ASSIGN_OR_RETURN(BoundStrategy strategy, BoundStrategy::Bind(spec_text));
  return strategy.PlanFor(profile);
}

}  // namespace ckpt
