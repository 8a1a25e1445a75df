// Training mode: every strategy's loss curve against store_all's, on tiny models.
#include "experiments/training.h"

#include <fstream>
#include <sstream>

#include "c10/core/Device.h"
#include "core/memory_meter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckpt {
namespace {

using ::testing::HasSubstr;

MemoryMeter& Cpu() { return **MemoryMeterFor(c10::Device(c10::DeviceType::CPU)); }

SweepOptions Models() {
  SweepOptions o;
  o.models = {"transformer:depth=2:hidden=8:heads=2:seq=6:batch=2",
              "gpt2:depth=2:hidden=8:heads=2:seq=6:batch=2:vocab=20:context=8"};
  o.strategies = {"uniform", "recompute_all", "selective_attention", "chunked_sequence:chunks=3"};
  return o;
}

void ExpectCurvesMatch(const TrainingOptions& training) {
  std::ostringstream progress;
  absl::StatusOr<std::vector<LossCurve>> curves =
      RunTraining(Models(), training, Cpu(), progress);
  ASSERT_TRUE(curves.ok()) << curves.status();
  ASSERT_EQ(curves->size(), 10u);  // 2 models x (store_all + 4)
  for (const LossCurve& c : *curves) {
    EXPECT_EQ(c.status, "ok") << c.model << " " << c.strategy << ": " << c.message;
    EXPECT_EQ(c.losses.size(), static_cast<size_t>(training.steps)) << c.strategy;
    const bool chunked = c.strategy.rfind("chunked_sequence", 0) == 0;
    if (!chunked) {
      // Identical: the same arithmetic, the same dropout masks, the same summation order.
      EXPECT_EQ(c.max_diff_vs_store_all, 0.0) << c.model << " " << c.strategy;
      EXPECT_EQ(c.tolerance, 0.0);
    } else {
      EXPECT_GT(c.tolerance, 0.0);
      EXPECT_LE(c.max_diff_vs_store_all, c.tolerance);
    }
  }
}

TEST(Training, CurvesEqualStoreAllsWithAccumulationAndClipping) {
  TrainingOptions training;
  training.steps = 6;
  training.accumulate = 2;
  ExpectCurvesMatch(training);
}

TEST(Training, CurvesEqualStoreAllsUnderBfloat16Autocast) {
  // Checkpoints replay the autocast state of the forward when they recompute in backward.
  TrainingOptions training;
  training.steps = 4;
  training.amp = true;
  ExpectCurvesMatch(training);
}

TEST(Training, TheLossChangesAsTheModelTrains) {
  SweepOptions o;
  o.models = {"heavy_mlp:depth=2:hidden=8:batch=4"};
  o.strategies = {"uniform"};
  TrainingOptions training;
  training.steps = 5;
  training.learning_rate = 0.05;
  std::ostringstream progress;
  absl::StatusOr<std::vector<LossCurve>> curves = RunTraining(o, training, Cpu(), progress);
  ASSERT_TRUE(curves.ok()) << curves.status();
  // heavy_mlp's loss is the sum of its outputs: AdamW drives it down.
  EXPECT_LT((*curves)[0].losses.back(), (*curves)[0].losses.front());
  EXPECT_EQ((*curves)[1].losses, (*curves)[0].losses);
}

TEST(Training, RejectsBadOptions) {
  TrainingOptions training;
  EXPECT_THAT(std::string(ValidateTraining(training).message()), HasSubstr("--train_steps=0"));
  training.steps = 1;
  training.accumulate = 0;
  EXPECT_THAT(std::string(ValidateTraining(training).message()), HasSubstr("--accumulate=0"));
}

TEST(Training, ReportAndCurvesFiles) {
  TrainingOptions training;
  training.steps = 2;
  LossCurve curve;
  curve.model = "m";
  curve.strategy = "store_all";
  curve.losses = {2.5, 2.0};
  EXPECT_THAT(TrainingReport(training, {curve}), HasSubstr("| m | store_all | ok | 2 |"));
  const std::string dir = ::testing::TempDir();
  absl::Status written = WriteLossCurves(dir, {curve});
  // Without gnuplot the data is still written and the status says why there is no picture.
  EXPECT_TRUE(written.ok() || written.code() == absl::StatusCode::kUnavailable) << written;
  std::ifstream csv(dir + "/losses.csv");
  std::stringstream text;
  text << csv.rdbuf();
  EXPECT_EQ(text.str(), "model,strategy,status,step,loss\nm,store_all,ok,1,2.5\nm,store_all,ok,2,2\n");
}

}  // namespace
}  // namespace ckpt
