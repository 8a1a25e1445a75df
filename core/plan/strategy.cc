#include "core/plan/strategy.h"

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace ckpt {

StrategyRegistry& Strategies() {
  static auto* registry = new StrategyRegistry("strategy");  // leaked: outlives statics
  return *registry;
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

absl::StatusOr<std::unique_ptr<Strategy>> CreateStrategy(const std::string& spec_text) {
  ASSIGN_OR_RETURN(Spec spec, ParseSpec(spec_text));
  return Strategies().Create(spec);
}

absl::StatusOr<std::string> CanonicalStrategySpec(const std::string& spec_text) {
  ASSIGN_OR_RETURN(Spec spec, ParseSpec(spec_text));
  ASSIGN_OR_RETURN(ParamValues values, Strategies().Bind(spec));
  RETURN_IF_ERROR(Strategies().Create(spec).status());
  return values.Canonical();
}

absl::StatusOr<std::string> BoundStrategySpec(const std::string& spec_text) {
  ASSIGN_OR_RETURN(Spec spec, ParseSpec(spec_text));
  ASSIGN_OR_RETURN(ParamValues values, Strategies().Bind(spec));
  return values.Canonical();
}

absl::StatusOr<Plan> PlanFor(const std::string& spec_text, const ModelProfile& profile) {
  ASSIGN_OR_RETURN(std::unique_ptr<Strategy> strategy, CreateStrategy(spec_text));
  ASSIGN_OR_RETURN(Plan plan, strategy->MakePlan(profile));
  if (absl::Status s = ValidatePlan(plan, profile.stages); !s.ok()) {
    // A strategy's own plan that is not valid is a bug in the strategy, not bad input.
    return absl::InternalError(absl::StrCat("strategy bug: ", s.message()));
  }
  return plan;
}

}  // namespace ckpt
