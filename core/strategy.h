// The strategy plugin interface and its registry.
//
// A strategy turns a model profile into a plan; it never runs a tensor. To add one, create
// strategies/<id>/ with a class like this and add its id to strategies/strategies.bzl:
//
//   class MyStrategy : public Strategy {
//    public:
//     static constexpr char kId[] = "my_strategy";
//     static constexpr char kSummary[] = "what it keeps and what it recomputes";
//     static std::vector<ParamDef> Params() { return {IntParam("k", "2", "...").Min(1)}; }
//     static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params);
//     absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override;
//   };
//   // in my_strategy.cc, in an anonymous namespace:
//   const StrategyRegistration<MyStrategy> registration;
//
// Needs no LibTorch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan.h"
#include "core/registry.h"
#include "core/spec.h"

namespace ckpt {

class Strategy {
 public:
  virtual ~Strategy() = default;
  // The plan for this model. Errors: InvalidArgument when the strategy's parameters do not
  // fit the model (e.g. more segments than stages), naming the value and the accepted range.
  virtual absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const = 0;
};

using StrategyRegistry = Registry<std::unique_ptr<Strategy>>;

// The process-wide strategy registry.
StrategyRegistry& Strategies();

// Parses and binds a spec such as "uniform:segments=4" and creates the strategy.
absl::StatusOr<std::unique_ptr<Strategy>> CreateStrategy(const std::string& spec_text);

// CreateStrategy, then its plan for `profile`: the first error of the two.
absl::StatusOr<Plan> PlanFor(const std::string& spec_text, const ModelProfile& profile);

template <typename T>
struct StrategyRegistration {
  StrategyRegistration() {
    Strategies().Register({T::kId, T::kSummary, T::Params(), &T::Create});
  }
};

}  // namespace ckpt
