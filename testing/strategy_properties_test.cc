// Every registered strategy on generated profiles (no tensors): chains of up to 1,000 stages
// with random parts, costs and sizes under every policy of their menus. A new strategy joins
// with no test edit.
//
//   - Its plan is valid for the chain (PlanFor validates), or its parameters are refused with
//     InvalidArgument (more segments than stages, a budget below every plan's peak).
//   - It is deterministic: the same profile gives the same plan.
//   - The memory and time models can predict it (every policy it uses is in the profile).
//   - A strategy that plans to a budget (StrategyTraits::budget_param) keeps its promise: the
//     predicted peak fits the budget less the slack (core/plan/memory_model.h), a budget that fits
//     stays fit when it grows, and a larger budget never makes the predicted step slower; one it
//     refuses names the least peak and the least budget, which plans a plan of that peak.
//   - Where the profile knows copy rates, `optimal` with offload is never slower than without it
//     at the same budget, and fits every budget that fits without it.
//   - `optimal` reaches every peak a registered strategy's default plan reaches, no slower than
//     that plan: its least peak, which its error names, is the least of them all.
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/plan/memory_model.h"
#include "core/plan/plan_text.h"
#include "core/plan/profile.h"
#include "core/plan/spec.h"
#include "core/plan/strategy.h"
#include "core/plan/time_model.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"
#include "testing/generated_profile.h"

namespace ckpt {
namespace {

using ::ckpt::testing::GeneratedProfile;

std::string SegmentsAndPolicies(const Plan& plan, const ModelProfile& profile) {
  return PlanToText(plan, profile.stages);
}

// The shared budget search against the rule it stands for: of every candidate (the registered
// strategies' default plans, on a generated profile) the fastest whose full replay fits, the
// first of equals; the early-stopping replay agrees with the full one on either side of a limit.
RC_GTEST_PROP(StrategyProperties, FastestWithinBudgetIsTheFastestThatFits, ()) {
  const ModelProfile profile = *GeneratedProfile(200);
  std::vector<Plan> candidates;
  for (const std::string& id : DefaultStrategies()) {
    absl::StatusOr<Plan> plan = PlanFor(id, profile);
    if (plan.ok()) candidates.push_back(*plan);
  }
  std::vector<MemoryPrediction> full;
  std::vector<double> ms;
  for (const Plan& plan : candidates) {
    full.push_back(*PredictMemory(profile, plan));
    ms.push_back(*PredictStepMs(profile, plan));
    const int64_t limit = *rc::gen::inRange<int64_t>(0, 2 * full.back().peak_bytes + 2);
    absl::StatusOr<std::optional<MemoryPrediction>> within =
        PredictMemoryWithin(profile, plan, limit);
    RC_ASSERT(within.ok());
    RC_ASSERT(within->has_value() == (full.back().peak_bytes <= limit));
    if (within->has_value()) RC_ASSERT((*within)->peak_bytes == full.back().peak_bytes);
  }
  int64_t highest = 0;
  for (const MemoryPrediction& p : full) highest = std::max(highest, p.peak_bytes);
  const int64_t budget = *rc::gen::inRange<int64_t>(0, highest + kBudgetSlackBytes + 2);
  int expected = -1;  // brute force
  int64_t least = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < candidates.size(); ++i) {
    least = std::min(least, full[i].peak_bytes + kBudgetSlackBytes);
    if (full[i].peak_bytes + kBudgetSlackBytes > budget) continue;
    if (expected < 0 || ms[i] < ms[expected]) expected = static_cast<int>(i);
  }
  int64_t reported_least = 0;
  absl::StatusOr<std::optional<BudgetChoice>> chosen =
      FastestWithinBudget(profile, candidates, budget, &reported_least);
  RC_ASSERT(chosen.ok());
  RC_ASSERT(chosen->has_value() == (expected >= 0));
  if (expected >= 0) {
    RC_ASSERT((*chosen)->plan.segments == candidates[expected].segments);
    RC_ASSERT((*chosen)->plan.stage_policies == candidates[expected].stage_policies);
    RC_ASSERT((*chosen)->ms == ms[expected]);
    RC_ASSERT((*chosen)->predicted.peak_bytes == full[expected].peak_bytes);
  } else {
    RC_ASSERT(reported_least == least);
  }
}

RC_GTEST_PROP(StrategyProperties, EveryStrategyPlansValidlyAndDeterministically, ()) {
  const ModelProfile profile = *GeneratedProfile(1000).as("profile");
  RC_TAG(profile.num_stages() <= 30 ? "<=30 stages" : "30..1000 stages");
  for (const std::string& id : Strategies().Ids()) {
    absl::StatusOr<Plan> plan = PlanFor(id, profile);
    if (!plan.ok()) {
      RC_LOG() << id << ": " << plan.status() << "\n";
      RC_ASSERT(plan.status().code() == absl::StatusCode::kInvalidArgument);
      continue;
    }
    absl::StatusOr<Plan> again = PlanFor(id, profile);
    RC_ASSERT(again.ok());
    RC_ASSERT(again->segments == plan->segments);
    // The registry's label is itself a spec of the same strategy, its parameters declared and
    // valid, in declaration order (BoundStrategySpec keeps that order, so it only adds defaults).
    RC_ASSERT(again->strategy == plan->strategy);
    absl::StatusOr<Spec> label = ParseSpec(plan->strategy);
    RC_ASSERT(label.ok());
    RC_ASSERT(label->name == id);
    absl::StatusOr<ParamValues> bound = Strategies().Bind(*label);
    RC_ASSERT(bound.ok());
    std::vector<std::string> order;  // the label's keys as declared
    for (const auto& [key, value] : bound->Entries()) {
      for (const auto& [shown, unused] : label->params) {
        if (shown == key) order.push_back(key);
      }
    }
    std::vector<std::string> keys;
    for (const auto& [key, unused] : label->params) keys.push_back(key);
    RC_ASSERT(keys == order);
    RC_ASSERT(SegmentsAndPolicies(*again, profile) == SegmentsAndPolicies(*plan, profile));
    RC_ASSERT(PredictMemory(profile, *plan).ok());
    RC_ASSERT(PredictStepMs(profile, *plan).ok());
  }
}

// On up to 300 stages: the budget searches try many plans, each predicted over the whole chain.
// The number that ends before the first `end` after `after` in `message` (", 1234 bytes").
std::optional<int64_t> NumberBefore(const std::string& message, const std::string& end,
                                    const std::string& after) {
  const size_t from = message.find(after);
  if (from == std::string::npos) return std::nullopt;
  const size_t stop = message.find(end, from + after.size());
  if (stop == std::string::npos) return std::nullopt;
  size_t start = stop;
  while (start > 0 && absl::ascii_isdigit(message[start - 1])) --start;
  int64_t n = 0;
  if (start == stop || !absl::SimpleAtoi(message.substr(start, stop - start), &n)) {
    return std::nullopt;
  }
  return n;
}

RC_GTEST_PROP(StrategyProperties, BudgetStrategiesKeepTheirPromise, ()) {
  const ModelProfile profile = *GeneratedProfile(300).as("profile");
  const Plan store_all = *PlanFor("store_all", profile);
  const int64_t peak = PredictMemory(profile, store_all)->peak_bytes;
  // Two budgets, the second larger, from 30% of store_all's peak to a bit over it.
  const int low = *rc::gen::inRange(30, 121).as("lower budget, percent of store_all's peak");
  const int high = *rc::gen::inRange(low, 131).as("higher budget, percent");
  for (const auto* entry : Strategies().Entries()) {
    if (entry->traits.budget_param.empty()) continue;
    const BoundStrategy strategy = *BoundStrategy::Bind(entry->id);
    std::vector<absl::StatusOr<Plan>> plans;
    std::vector<int64_t> budgets;
    for (const int percent : {low, high}) {
      budgets.push_back(peak * percent / 100);
      const absl::StatusOr<BoundStrategy> budgeted = strategy.WithBudget(budgets.back());
      RC_ASSERT(budgeted.ok());
      plans.push_back(budgeted->PlanFor(profile));
    }
    for (size_t k = 0; k < plans.size(); ++k) {
      if (!plans[k].ok()) {
        RC_ASSERT(plans[k].status().code() == absl::StatusCode::kInvalidArgument);
        // It names the least peak and the least budget, that peak and the slack, which plans
        // a plan of that peak.
        const std::string message(plans[k].status().message());
        const std::optional<int64_t> least = NumberBefore(message, " bytes (", "reaches on ");
        const std::optional<int64_t> accepted = NumberBefore(message, " bytes", "at least ");
        RC_ASSERT(least.has_value() && accepted.has_value());
        RC_ASSERT(*accepted == *least + kBudgetSlackBytes);
        RC_ASSERT(*accepted > budgets[k]);
        const absl::StatusOr<Plan> at_least = strategy.WithBudget(*accepted)->PlanFor(profile);
        RC_ASSERT(at_least.ok());
        RC_ASSERT(PredictMemory(profile, *at_least)->peak_bytes == *least);
        continue;
      }
      RC_ASSERT(PredictMemory(profile, *plans[k])->peak_bytes + kBudgetSlackBytes <= budgets[k]);
    }
    if (plans[0].ok()) {
      RC_ASSERT(plans[1].ok());  // what fits a budget fits a larger one
      RC_ASSERT(*PredictStepMs(profile, *plans[1]) <= *PredictStepMs(profile, *plans[0]) + 1e-9);
    }
    RC_TAG(entry->id + (plans[0].ok() ? " fits the lower budget" : " does not fit it"));
  }
}

RC_GTEST_PROP(StrategyProperties, OffloadNeverSlowsOptimalNorRaisesItsLeastPeak, ()) {
  ModelProfile profile = *GeneratedProfile(20).as("profile");
  if (profile.to_host_bytes_per_ms == 0) {
    profile.to_host_bytes_per_ms = profile.from_host_bytes_per_ms = 1 << 20;
  }
  const int64_t peak = PredictMemory(profile, *PlanFor("store_all", profile))->peak_bytes;
  const int percent = *rc::gen::inRange(25, 121).as("budget, percent of store_all's peak");
  const int64_t budget = peak * percent / 100;
  absl::StatusOr<Plan> with = PlanFor(absl::StrCat("optimal:budget=", budget), profile);
  absl::StatusOr<Plan> without =
      PlanFor(absl::StrCat("optimal:budget=", budget, ":offload=no"), profile);
  if (!without.ok()) {
    RC_ASSERT(without.status().code() == absl::StatusCode::kInvalidArgument);
    RC_TAG(with.ok() ? "fits only with offload" : "fits neither");
    return;
  }
  RC_ASSERT(with.ok());
  RC_ASSERT(PredictMemory(profile, *with)->peak_bytes + kBudgetSlackBytes <= budget);
  RC_ASSERT(*PredictStepMs(profile, *with) <= *PredictStepMs(profile, *without) * (1 + 1e-9));
  RC_TAG(PredictMemory(profile, *with)->offloaded_bytes > 0 ? "offloads" : "does not offload");
}

// One default strategy per case, on up to 40 stages.
RC_GTEST_PROP(StrategyProperties, OptimalFitsWhatEveryStrategyFitsNoSlower, ()) {
  const ModelProfile profile = *GeneratedProfile(40).as("profile");
  const std::string id = *rc::gen::elementOf(DefaultStrategies()).as("strategy");
  absl::StatusOr<Plan> plan = PlanFor(id, profile);
  RC_PRE(plan.ok());  // refused on this profile: EveryStrategyPlansValidly checks how
  const int64_t budget = PredictMemory(profile, *plan)->peak_bytes + kBudgetSlackBytes;
  absl::StatusOr<Plan> optimal = PlanFor(absl::StrCat("optimal:budget=", budget), profile);
  RC_ASSERT(optimal.ok());
  RC_ASSERT(*PredictStepMs(profile, *optimal) <= *PredictStepMs(profile, *plan) * (1 + 1e-9));
  RC_TAG(id);
}

}  // namespace
}  // namespace ckpt
