#include "core/strategy.h"

#include "core/status_macros.h"

namespace ckpt {

StrategyRegistry& Strategies() {
  static auto* registry = new StrategyRegistry("strategy");  // leaked: outlives statics
  return *registry;
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

absl::StatusOr<Plan> PlanFor(const std::string& spec_text, const ModelProfile& profile) {
  ASSIGN_OR_RETURN(std::unique_ptr<Strategy> strategy, CreateStrategy(spec_text));
  ASSIGN_OR_RETURN(Plan plan, strategy->MakePlan(profile));
  RETURN_IF_ERROR(ValidatePlan(plan, profile.stages));
  return plan;
}

}  // namespace ckpt
