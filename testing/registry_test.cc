// The strategy registry: every strategy in the aggregate list is registered, lookups of
// unknown ids fail with the known ids, duplicates are fatal, bad parameters are errors.
#include <algorithm>

#include "core/plan/strategy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckpt {
namespace {

using ::testing::HasSubstr;

// Generated from strategies/strategies.bzl: the ids //strategies:all links.
const std::vector<std::string> kAggregateIds = {
#include "testing/aggregate_strategy_ids.inc"
};

TEST(StrategyRegistry, EveryAggregatedStrategyIsRegistered) {
  std::vector<std::string> expected = kAggregateIds;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(Strategies().Ids(), expected)
      << "a strategy listed in strategies.bzl did not register (missing alwayslink = 1 or "
         "StrategyRegistration), or one registered without being listed";
}

TEST(StrategyRegistry, EveryStrategyCreatesWithDefaultsOrNamesWhatMustBeGiven) {
  const std::vector<std::string> defaults = DefaultStrategies();
  for (const std::string& id : Strategies().Ids()) {
    absl::StatusOr<BoundStrategy> s = BoundStrategy::Bind(id);
    if (std::find(defaults.begin(), defaults.end(), id) != defaults.end()) {
      EXPECT_TRUE(s.ok()) << id << ": " << s.status();
      continue;
    }
    ASSERT_FALSE(s.ok()) << id;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("must be given")) << id;
  }
  EXPECT_THAT(defaults, ::testing::Not(::testing::Contains("plan")));  // plan:file= is required
}

// A budget's traits name declared parameters: the budget a size, what a budget chooses one that
// takes "auto" by default. A plugin's typo there would leave its budgeted runs planning with the
// count they were given; at a budget, WithBudget puts it back at "auto".
TEST(StrategyRegistry, BudgetTraitsNameDeclaredParameters) {
  for (const StrategyRegistry::Entry* entry : Strategies().Entries()) {
    const StrategyTraits& traits = entry->traits;
    auto declared = [&](const std::string& key) -> const ParamDef* {
      for (const ParamDef& def : entry->params) {
        if (def.key == key) return &def;
      }
      return nullptr;
    };
    if (traits.budget_param.empty()) {
      EXPECT_EQ(traits.budget_chooses, "") << entry->id << " chooses with no budget";
      continue;
    }
    const ParamDef* budget = declared(traits.budget_param);
    ASSERT_NE(budget, nullptr) << entry->id << "'s budget is no parameter of its";
    EXPECT_EQ(budget->type, ParamDef::Type::kBytes) << entry->id;
    if (traits.budget_chooses.empty()) continue;
    const ParamDef* chosen = declared(traits.budget_chooses);
    ASSERT_NE(chosen, nullptr) << entry->id << "'s budget chooses no parameter of its";
    EXPECT_EQ(chosen->default_value, "auto") << entry->id;
    const absl::StatusOr<BoundStrategy> given =
        BoundStrategy::Bind(entry->id + ":" + traits.budget_chooses + "=1");
    ASSERT_TRUE(given.ok()) << given.status();
    const absl::StatusOr<BoundStrategy> budgeted = given->WithBudget(int64_t{8} << 20);
    ASSERT_TRUE(budgeted.ok()) << budgeted.status();
    EXPECT_EQ(budgeted->values().Text(traits.budget_chooses), "auto") << entry->id;
    EXPECT_EQ(budgeted->values().Bytes(traits.budget_param), int64_t{8} << 20) << entry->id;
  }
  EXPECT_FALSE(BoundStrategy::Bind("store_all")->WithBudget(1 << 20).ok());
}

TEST(StrategyRegistry, UnknownIdListsTheKnownOnes) {
  absl::StatusOr<BoundStrategy> s = BoundStrategy::Bind("checkmate");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("unknown strategy 'checkmate'"));
  for (const std::string& id : kAggregateIds) {
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(id));
  }
}

TEST(StrategyRegistry, BadParametersAreInvalidArgument) {
  for (const char* text : {"uniform:segments=0", "uniform:segment=4", "uniform:segments=x",
                           "store_all:segments=2", "uniform:segments"}) {
    absl::StatusOr<BoundStrategy> s = BoundStrategy::Bind(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(StrategyRegistry, ACountAndABudgetTogetherAreRefusedNamingBoth) {
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"uniform:segments=3:budget=1MiB",
            "uniform: segments=3 and budget=1MiB both choose the segment count; accepted: one of "
            "them"},
           {"revolve:snapshots=2:budget=1MiB",
            "revolve: snapshots=2 and budget=1MiB both choose the snapshot count; accepted: one "
            "of them"}}) {
    absl::StatusOr<BoundStrategy> s = BoundStrategy::Bind(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(s.status().message(), message);
  }
}

TEST(StrategyRegistry, DescribeListsParameters) {
  const std::string text = Strategies().Describe();
  EXPECT_THAT(text, HasSubstr("uniform: "));
  EXPECT_THAT(text, HasSubstr("segments is an integer >= 1 or auto (default auto)"));
}

TEST(StrategyRegistryDeathTest, DuplicateIdIsFatalAndNamesIt) {
  EXPECT_DEATH(
      PlannerRegistration("store_all", "a second store_all",
                          [](const ModelProfile&) -> absl::StatusOr<Plan> { return Plan(); }),
      "duplicate strategy id 'store_all'");
}

}  // namespace
}  // namespace ckpt
