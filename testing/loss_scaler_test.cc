// The dynamic loss scaler's rules, step by step on generated sequences of good and overflowing
// steps (no tensors: training_test checks it inside real training).
#include "core/train/loss_scaler.h"

#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const LossScalerOptions& options) {
  return std::string(DynamicLossScaler::Create(options).status().message());
}

TEST(LossScaler, RejectsBadOptionsNamingThem) {
  LossScalerOptions o;
  o.initial_scale = 0;
  EXPECT_THAT(ErrorOf(o), HasSubstr("initial_scale=0"));
  o.initial_scale = INFINITY;
  EXPECT_THAT(ErrorOf(o), HasSubstr("initial_scale=inf"));
  o = {};
  o.min_scale = 2 * o.initial_scale;
  EXPECT_THAT(ErrorOf(o), HasSubstr("min_scale=131072"));
  o = {};
  o.growth_factor = 1;
  EXPECT_THAT(ErrorOf(o), HasSubstr("growth_factor=1"));
  o = {};
  o.backoff_factor = 1;
  EXPECT_THAT(ErrorOf(o), HasSubstr("backoff_factor=1"));
  o = {};
  o.growth_interval = 0;
  EXPECT_THAT(ErrorOf(o),
              HasSubstr("growth_interval=0 is not accepted; accepted: an integer >= 1"));
  EXPECT_TRUE(DynamicLossScaler::Create({}).ok());
}

TEST(LossScaler, StartsAtGradScalersDefaults) {
  absl::StatusOr<DynamicLossScaler> s = DynamicLossScaler::Create({});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->scale(), 65536.0);
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(*s->Update(true));
  EXPECT_EQ(s->scale(), 65536.0);
  ASSERT_TRUE(*s->Update(true));
  EXPECT_EQ(s->scale(), 131072.0);
  EXPECT_FALSE(*s->Update(false));
  EXPECT_EQ(s->scale(), 65536.0);
}

TEST(LossScaler, GivesUpBelowMinScaleNamingTheScaleReached) {
  LossScalerOptions o;
  o.initial_scale = 8;
  o.min_scale = 2;
  absl::StatusOr<DynamicLossScaler> s = DynamicLossScaler::Create(o);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(*s->Update(false));  // 4
  EXPECT_FALSE(*s->Update(false));  // 2 == min_scale: still allowed
  absl::StatusOr<bool> third = s->Update(false);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("down to 2 (min_scale 2)"));
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("diverged"));
}

// Every step obeys the rules: an overflow skips the step, multiplies the scale by the backoff
// factor and restarts the count of good steps; a good step is taken, and the scale grows by
// the growth factor exactly when it completes a run of growth_interval good steps.
RC_GTEST_PROP(LossScaler, FollowsTheRulesOnAnySequenceOfSteps, ()) {
  LossScalerOptions o;
  o.initial_scale = std::ldexp(1.0, *rc::gen::inRange(-4, 40).as("log2 initial scale"));
  o.min_scale = o.initial_scale / std::ldexp(1.0, *rc::gen::inRange(0, 12).as("halvings"));
  o.growth_interval = *rc::gen::inRange(1, 8).as("growth interval");
  const auto steps =
      *rc::gen::container<std::vector<bool>>(rc::gen::arbitrary<bool>()).as("finite per step");
  absl::StatusOr<DynamicLossScaler> s = DynamicLossScaler::Create(o);
  RC_ASSERT(s.ok());
  int run = 0;  // good steps since the last growth or overflow, counted here
  for (const bool finite : steps) {
    const double before = s->scale();
    absl::StatusOr<bool> take = s->Update(finite);
    if (!finite) {
      if (before / 2 < o.min_scale) {
        RC_ASSERT(!take.ok());
        return;
      }
      RC_ASSERT(take.ok() && !*take);
      RC_ASSERT(s->scale() == before / 2);
      run = 0;
    } else {
      RC_ASSERT(take.ok() && *take);
      run = (run + 1) % o.growth_interval;
      RC_ASSERT(s->scale() == (run == 0 ? 2 * before : before));
    }
    RC_ASSERT(s->good_steps() == run);
    RC_ASSERT(s->scale() >= o.min_scale);
  }
}

}  // namespace
}  // namespace ckpt
