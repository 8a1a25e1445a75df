// Properties of uniform's plans, for generated chain lengths and segment counts (no tensors).
#include <algorithm>
#include <cmath>

#include "core/plan/plan.h"
#include "core/plan/plan_text.h"
#include "core/plan/schedule.h"
#include "core/plan/strategy.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"
#include "strategies/plan_builders.h"

namespace ckpt {
namespace {

ModelProfile ChainOf(int stages) {
  ModelProfile profile;
  profile.model = "chain";
  profile.stages.resize(stages);
  return profile;
}

std::vector<StageInfo> InfosOf(int stages) { return std::vector<StageInfo>(stages); }

Plan PlanFor(const std::string& spec, int stages) {
  absl::StatusOr<Plan> plan = ckpt::PlanFor(spec, ChainOf(stages));
  RC_ASSERT(plan.ok());
  return *plan;
}

RC_GTEST_PROP(UniformPlan, CutsIntoNearEqualSegmentsAndStoresOnlyTheLast, ()) {
  const int stages = *rc::gen::inRange(1, 300).as("stages");
  const int k = *rc::gen::inRange(1, stages + 1).as("segments");
  const Plan plan = PlanFor("uniform:segments=" + std::to_string(k), stages);

  RC_ASSERT(ValidatePlan(plan, InfosOf(stages)).ok());
  RC_ASSERT(static_cast<int>(plan.segments.size()) == k);
  RC_ASSERT(plan.strategy == "uniform:segments=" + std::to_string(k));
  int smallest = stages;
  int largest = 0;
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    smallest = std::min(smallest, s.size());
    largest = std::max(largest, s.size());
    const bool last = i + 1 == plan.segments.size();
    RC_ASSERT(s.mode == (last ? SegmentMode::kStored : SegmentMode::kCheckpointed));
  }
  RC_ASSERT(largest - smallest <= 1);
  RC_ASSERT(RecomputedStages(plan, stages) == stages - plan.segments.back().size());
}

// offload=yes is the same cut with the checkpoints offloaded (DeepSpeed's cpu_checkpointing);
// the program then copies every checkpoint's input but the first's, the batch.
RC_GTEST_PROP(UniformPlan, OffloadOffloadsEveryCheckpointOfTheSameCut, ()) {
  const int stages = *rc::gen::inRange(1, 300).as("stages");
  const int k = *rc::gen::inRange(1, stages + 1).as("segments");
  const std::string spec = "uniform:segments=" + std::to_string(k);
  const Plan kept = PlanFor(spec, stages);
  const Plan offloaded = PlanFor(spec + ":offload=yes", stages);
  RC_ASSERT(offloaded.strategy == spec + ":offload=yes");
  RC_ASSERT(offloaded.segments.size() == kept.segments.size());
  for (size_t i = 0; i < kept.segments.size(); ++i) {
    const Segment& a = kept.segments[i];
    const Segment& b = offloaded.segments[i];
    RC_ASSERT(a.begin == b.begin && a.end == b.end);
    RC_ASSERT(b.mode == (a.mode == SegmentMode::kCheckpointed ? SegmentMode::kOffloaded : a.mode));
  }
  RC_ASSERT(Compile(offloaded, InfosOf(stages)).num_host == std::max(k - 2, 0));
}

RC_GTEST_PROP(UniformPlan, DefaultIsCeilSqrtOfDepth, ()) {
  const int stages = *rc::gen::inRange(1, 5000).as("stages");
  const Plan plan = PlanFor("uniform", stages);
  const int k = static_cast<int>(plan.segments.size());
  // ceil(sqrt(L)) is the least k with k*k >= L.
  RC_ASSERT(k * k >= stages);
  RC_ASSERT((k - 1) * (k - 1) < stages);
  RC_ASSERT(plan.strategy == "uniform:segments=" + std::to_string(k));
}

TEST(UniformPlan, HandExamples) {
  // L = 10, default k = ceil(sqrt(10)) = 4: sizes 3,3,2,2, the last stored.
  absl::StatusOr<Plan> plan = ckpt::PlanFor("uniform", ChainOf(10));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(SegmentsToText(plan->segments),
            "[0,3) checkpointed, [3,6) checkpointed, [6,8) checkpointed, [8,10) stored");
  EXPECT_EQ(RecomputedStages(*plan, 10), 8);
}

TEST(UniformPlan, MoreSegmentsThanStagesNamesBoth) {
  absl::StatusOr<Plan> plan = ckpt::PlanFor("uniform:segments=9", ChainOf(4));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "uniform: segments=9 is more than the 4 stages of chain; accepted: 1..4 or auto");
}

TEST(StoreAllPlan, OneStoredSegment) {
  absl::StatusOr<Plan> plan = ckpt::PlanFor("store_all", ChainOf(7));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(SegmentsToText(plan->segments), "[0,7) stored");
  EXPECT_EQ(RecomputedStages(*plan, 7), 0);
}

TEST(ValidatePlan, RejectsGapsOverlapsAndShortCover) {
  Plan plan;
  plan.strategy = "test";
  plan.segments = {{0, 2, SegmentMode::kStored}, {3, 5, SegmentMode::kStored}};
  EXPECT_FALSE(ValidatePlan(plan, InfosOf(5)).ok());  // gap at 2
  plan.segments = {{0, 3, SegmentMode::kStored}, {2, 5, SegmentMode::kStored}};
  EXPECT_FALSE(ValidatePlan(plan, InfosOf(5)).ok());  // overlap
  plan.segments = {{0, 3, SegmentMode::kStored}};
  EXPECT_FALSE(ValidatePlan(plan, InfosOf(5)).ok());  // short
  plan.segments = {{0, 0, SegmentMode::kStored}, {0, 5, SegmentMode::kStored}};
  EXPECT_FALSE(ValidatePlan(plan, InfosOf(5)).ok());  // empty segment
  plan.segments = {{0, 2, SegmentMode::kCheckpointed}, {2, 5, SegmentMode::kStored}};
  EXPECT_TRUE(ValidatePlan(plan, InfosOf(5)).ok());
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

// The counts a budget search tries: every one up to 128, then a geometric sequence 3% apart,
// always with ceil(sqrt(L)) and L, so that a search over a 100,000-stage chain replays it a few
// hundred times, not 100,000.
RC_GTEST_PROP(UniformPlan, BudgetSearchTriesEverySmallCountAndFewLargeOnes, ()) {
  const int stages = *rc::gen::inRange(1, 200000).as("stages");
  const std::vector<int> counts = SegmentCounts(stages);
  RC_ASSERT(std::is_sorted(counts.begin(), counts.end()));
  RC_ASSERT(std::adjacent_find(counts.begin(), counts.end()) == counts.end());
  RC_ASSERT(counts.front() == 1 && counts.back() == stages);
  const int root = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(stages)) - 1e-9));
  RC_ASSERT(std::find(counts.begin(), counts.end(), root) != counts.end());
  for (int k = 1; k <= std::min(stages, 128); ++k) RC_ASSERT(counts[k - 1] == k);
  for (size_t i = 1; i < counts.size(); ++i) {
    if (counts[i - 1] >= 128 && counts[i] != root && counts[i] != stages) {
      RC_ASSERT(counts[i] <= counts[i - 1] + counts[i - 1] / 32 + 1);  // no gap over ~3%
    }
  }
  RC_ASSERT(counts.size() <=
            128 + 2 +
                static_cast<size_t>(std::log(std::max(stages, 128) / 128.0) / std::log(1.03) + 1));
}

}  // namespace
}  // namespace ckpt
