// The strategy plugin interface and its registry.
//
// A strategy turns a model profile (core/plan/profile.h: the stages, their parts, and what each
// stage costs under each policy it offers) into a plan (core/plan/plan.h); it never runs a tensor.
// A plugin is one file, strategies/<id>.cc, its class in an anonymous namespace beside the
// registration that names it (docs/extending.md):
//
//   class MyStrategy : public Strategy {
//    public:
//     static std::vector<ParamDef> Params() { return {IntParam("k", "2", "...").Min(1)}; }
//     static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params);
//     absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override;
//   };
//   const StrategyRegistration<MyStrategy> registration("my_strategy", "what it keeps");
//
// or, without parameters, a function: `const PlannerRegistration registration(id, summary, F);`.
// A strategy that plans to a memory budget says so in its registration's StrategyTraits: the
// sweep's --budgets sets that parameter (BoundStrategy::WithBudget), and the property tests hold
// every plan's predicted peak within it and the predicted step never slower at a larger budget.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan/plan.h"
#include "core/plan/profile.h"
#include "core/plan/registry.h"
#include "core/plan/spec.h"

namespace ckpt {

class Strategy {
 public:
  virtual ~Strategy() = default;
  // The plan for this model. Errors: InvalidArgument when the strategy's parameters do not
  // fit the model (e.g. more segments than stages), naming the value and the accepted range.
  // The plan's label is the registry's to write (BoundStrategy::PlanFor): the strategy says in
  // Plan::shown which of its parameters the label shows, and with what values.
  virtual absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const = 0;

  // What can be checked of the strategy against a model's stages before anything runs (a
  // written plan's fit): InvalidArgument naming what does not fit. Most strategies fit any chain
  // (OK) and find out the rest from the profile.
  virtual absl::Status CheckStages(const std::vector<StageInfo>& stages) const {
    return absl::OkStatus();
  }
};

// What a strategy declares about itself besides its parameters.
struct StrategyTraits {
  std::string budget_param;  // the kBytes parameter holding its memory budget, or empty
  // The parameter a budget chooses in its place (uniform's segments), or empty: at a budget it
  // goes back to its default (BoundStrategy::WithBudget).
  std::string budget_chooses;
};

using StrategyRegistry = Registry<std::unique_ptr<Strategy>, StrategyTraits>;

// The process-wide strategy registry.
StrategyRegistry& Strategies();

// The registered strategies that can be made from their defaults, in id order: every one but
// those with a parameter that must be given (plan's file). What the presets, the benchmarks and
// the generated test suites run.
std::vector<std::string> DefaultStrategies();

// A strategy spec bound once, where a request is read: its canonical writing, its parameters'
// values and the strategy made from them, shared and immutable (cheap to copy). It is what the
// sweep, its workloads and its rows carry from the command line to the executor; nothing after
// the request parses the spec again.
//
//   ASSIGN_OR_RETURN(BoundStrategy uniform, BoundStrategy::Bind("uniform:segments=4"));
//   ASSIGN_OR_RETURN(Plan plan, uniform.PlanFor(profile));
class BoundStrategy {
 public:
  // Parses, binds and creates: NotFound naming an unknown id, InvalidArgument naming a bad
  // parameter, or the strategy's own error (a plan file that cannot be read).
  static absl::StatusOr<BoundStrategy> Bind(const std::string& spec_text);

  // The spec's one writing (every parameter in declaration order, defaults filled in, "auto"
  // left unresolved: "uniform" is "uniform:segments=auto:budget=none:offload=no"). Two texts
  // name the same strategy exactly when their specs are equal.
  const std::string& spec() const { return spec_; }
  const std::string& id() const { return values_.name(); }
  const ParamValues& values() const { return values_; }
  const Strategy& strategy() const { return *strategy_; }
  // The kBytes parameter that holds its memory budget (StrategyTraits), or empty.
  const std::string& budget_param() const { return budget_param_; }
  // This strategy planning to `bytes` above the baseline: its budget parameter set to them, the
  // parameter a budget chooses (StrategyTraits::budget_chooses) back at its default, the others
  // as they are (optimal's offload says how it plans). InvalidArgument where it plans to no
  // budget, or `bytes` is outside what its budget parameter accepts.
  absl::StatusOr<BoundStrategy> WithBudget(int64_t bytes) const;

  // The strategy's plan for `profile`, labelled (Plan::strategy: the id and Plan::shown's
  // parameters in declaration order) and validated against the profile's stages (an invalid one,
  // or one that shows an undeclared parameter, is Internal: a strategy bug).
  absl::StatusOr<Plan> PlanFor(const ModelProfile& profile) const;

 private:
  BoundStrategy(ParamValues values, std::shared_ptr<const Strategy> strategy,
                std::string budget_param);

  ParamValues values_;
  std::string spec_;
  std::shared_ptr<const Strategy> strategy_;
  std::string budget_param_;
};

// The canonical spec of `spec_text` with its parameters bound and checked, creating nothing: how
// rows already measured are keyed, so that reading them needs no strategy's inputs (a plan file
// that is gone since).
absl::StatusOr<std::string> BoundStrategySpec(const std::string& spec_text);

// Bind, then PlanFor: for a spec written once in code or a test, not for one carried through a
// run (bind it where it is read).
absl::StatusOr<Plan> PlanFor(const std::string& spec_text, const ModelProfile& profile);

// A strategy without parameters, its plan a function of the profile alone.
struct PlannerRegistration {
  using PlanFunction = absl::StatusOr<Plan> (*)(const ModelProfile& profile);
  PlannerRegistration(const char* id, const char* summary, PlanFunction plan);
};

// A strategy class T: its Params() and Create(), registered under `id`.
template <typename T>
struct StrategyRegistration {
  StrategyRegistration(const char* id, const char* summary, StrategyTraits traits = {}) {
    Strategies().Register({id, summary, T::Params(), &T::Create, std::move(traits)});
  }
};

}  // namespace ckpt
