// Training mode: every strategy's loss curve against store_all's, on tiny models.
#include "experiments/training.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "ATen/TensorOperators.h"
#include "c10/core/Device.h"
#include "core/plan/strategy.h"
#include "core/run/memory_meter.h"
#include "core/run/workload.h"
#include "core/train/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/model_cases.h"

namespace ckpt {
namespace {

using ::testing::HasSubstr;

MemoryMeter& Cpu() { return **MemoryMeterFor(c10::Device(c10::DeviceType::CPU)); }

// Every registered model (a small instance of each) under every registered strategy.
SweepOptions EveryModelAndStrategy() {
  SweepOptions o;
  for (const std::string& id : ckpt::Models().Ids())
    o.models.push_back(BoundModel::Bind(testing::FixedSmallSpec(id)).value());
  o.strategies = BindStrategies(DefaultStrategies()).value();
  return o;
}

std::vector<LossCurve> Train(const TrainingOptions& training) {
  const SweepOptions o = EveryModelAndStrategy();
  std::ostringstream progress;
  absl::StatusOr<std::vector<LossCurve>> curves = RunTraining(o, training, Cpu(), progress);
  EXPECT_TRUE(curves.ok()) << curves.status();
  if (!curves.ok()) return {};
  EXPECT_EQ(curves->size(), o.models.size() * o.strategies.size());
  return *std::move(curves);
}

// Each curve's model's store_all curve.
const LossCurve& StoreAllOf(const std::vector<LossCurve>& curves, const LossCurve& c) {
  for (const LossCurve& r : curves) {
    if (r.model == c.model && r.strategy == "store_all") return r;
  }
  ADD_FAILURE() << "no store_all curve for " << c.model;
  return c;
}

std::vector<LossCurve> ExpectCurvesMatch(const TrainingOptions& training) {
  std::vector<LossCurve> curves = Train(training);
  for (const LossCurve& c : curves) {
    EXPECT_EQ(c.status, RowStatus::kOk) << c.model << " " << c.strategy << ": " << c.message;
    EXPECT_EQ(c.losses.size(), static_cast<size_t>(training.steps)) << c.strategy;
    if (!c.reassociates) {
      // Identical: the same arithmetic, the same dropout masks, the same summation order.
      EXPECT_EQ(c.max_diff_vs_store_all, 0.0) << c.model << " " << c.strategy;
      EXPECT_EQ(c.tolerance, 0.0);
    } else {
      EXPECT_GT(c.tolerance, 0.0);
      EXPECT_LE(c.max_diff_vs_store_all, c.tolerance);
    }
  }
  return curves;
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

// Loss scaling runs on CUDA in float16 only, where nothing here can run it; forced on in
// float32 it goes through the same code. Scaling by powers of two is exact in binary floating
// point, so with no overflow every curve is bit-identical to the unscaled run's.
TEST(Training, LossScalingWithoutOverflowChangesNothing) {
  TrainingOptions plain;
  plain.steps = 4;
  plain.accumulate = 2;
  TrainingOptions scaled = plain;
  scaled.loss_scaling = true;
  scaled.scaler.growth_interval = 2;  // the scale grows during the run: 2^16, 2^17, 2^18
  const std::vector<LossCurve> a = ExpectCurvesMatch(plain);
  const std::vector<LossCurve> b = ExpectCurvesMatch(scaled);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].losses, a[i].losses) << b[i].model << " " << b[i].strategy;
    EXPECT_EQ(b[i].skipped_steps, 0);
  }
}

// A scale beyond float32's range (2^128) makes the scaled loss inf: the first steps are
// skipped, the scale halves each time until the gradients fit, and training then proceeds.
// Every strategy skips the same steps as store_all, and the curves still match.
TEST(Training, OverflowSkipsStepsUntilTheScaleFits) {
  TrainingOptions training;
  training.steps = 12;  // a few skipped, how many depends on the model
  training.loss_scaling = true;
  training.scaler.initial_scale = std::ldexp(1.0, 130);
  const std::vector<LossCurve> curves = ExpectCurvesMatch(training);
  for (const LossCurve& c : curves) {
    EXPECT_GE(c.skipped_steps, 1) << c.model << " " << c.strategy;
    EXPECT_LT(c.skipped_steps, training.steps) << c.model;
    EXPECT_EQ(c.skipped_steps, StoreAllOf(curves, c).skipped_steps) << c.model << " " << c.strategy;
  }
}

// When no scale down to min_scale makes the gradients finite, the curve is an error that says
// so, not a run of silently skipped steps.
TEST(Training, GradientsThatNeverFitEndTheCurveWithAnError) {
  TrainingOptions training;
  training.steps = 4;
  training.loss_scaling = true;
  training.scaler.initial_scale = std::ldexp(1.0, 140);
  training.scaler.min_scale = std::ldexp(1.0, 139);
  // On models whose loss is a mean over positions and whose gradients are never all zero (a
  // toy ReLU chain can die and give zero gradients, which fit at any scale).
  SweepOptions o = EveryModelAndStrategy();
  o.models =
      BindModels({testing::FixedSmallSpec("transformer"), testing::FixedSmallSpec("gpt2")}).value();
  std::ostringstream progress;
  absl::StatusOr<std::vector<LossCurve>> curves = RunTraining(o, training, Cpu(), progress);
  ASSERT_TRUE(curves.ok()) << curves.status();
  for (const LossCurve& c : *curves) {
    EXPECT_EQ(c.status, RowStatus::kError) << c.model << " " << c.strategy;
    EXPECT_THAT(c.message, HasSubstr("non-finite at every loss scale down to"));
    EXPECT_EQ(c.skipped_steps, 1) << c.model;  // 2^140 -> 2^139; the second overflow gives up
    EXPECT_EQ(c.losses.size(), 2u) << c.model << " " << c.strategy;
  }
}

TEST(Training, TheLossChangesAsTheModelTrains) {
  SweepOptions o;
  o.models = BindModels({"heavy_mlp:depth=2:hidden=8:batch=4"}).value();
  o.strategies = BindStrategies({"uniform"}).value();
  TrainingOptions training;
  training.steps = 5;
  training.learning_rate = 0.05;
  std::ostringstream progress;
  absl::StatusOr<std::vector<LossCurve>> curves = RunTraining(o, training, Cpu(), progress);
  ASSERT_TRUE(curves.ok()) << curves.status();
  // heavy_mlp's loss is its outputs' sum per row: AdamW drives it down.
  EXPECT_LT((*curves)[0].losses.back(), (*curves)[0].losses.front());
  EXPECT_EQ((*curves)[1].losses, (*curves)[0].losses);
}

TEST(Training, CurveDepartureCountsABlowUpAsInfinite) {
  const double nan = std::nan("");
  const double inf = INFINITY;
  EXPECT_EQ(CurveDeparture({1, 2, 3}, {1, 2.5, 2}), 1.0);
  EXPECT_EQ(CurveDeparture({1, nan}, {1, nan}), 0.0);  // both blew up at the same step
  EXPECT_EQ(CurveDeparture({1, inf}, {1, inf}), 0.0);
  EXPECT_EQ(CurveDeparture({1, nan}, {1, 2}), inf);
  EXPECT_EQ(CurveDeparture({1, 2}, {1, nan}), inf);
  EXPECT_EQ(CurveDeparture({1, inf}, {1, -inf}), inf);
  EXPECT_EQ(CurveDeparture({1, inf}, {1, nan}), inf);
}

TEST(Training, RejectsBadOptions) {
  TrainingOptions training;
  EXPECT_THAT(std::string(ValidateTraining(training).message()), HasSubstr("--train_steps=0"));
  training.steps = 1;
  training.accumulate = 0;
  EXPECT_THAT(std::string(ValidateTraining(training).message()), HasSubstr("--accumulate=0"));
  training.accumulate = 1;
  training.scaler.growth_interval = -3;
  EXPECT_THAT(std::string(ValidateTraining(training).message()), HasSubstr("growth_interval=-3"));
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
  EXPECT_EQ(text.str(),
            "model,strategy,status,step,loss\nm,store_all,ok,1,2.5\nm,store_all,ok,2,2\n");
}

// The trainer's point between backward and the optimizer step (where a data-parallel
// all-reduce goes): it is handed, once a step, exactly the mean of the micro-batches' gradients,
// may change them before the update, and its error ends the step with no update made.
TEST(Trainer, HandsTheMeanGradientToAfterBackwardBeforeTheUpdate) {
  absl::StatusOr<testing::Case> c = testing::BuildCase("heavy_mlp:depth=3:hidden=4:batch=2", 1);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<PlannedRun> run =
      c->workload->Prepare(BoundStrategy::Bind("uniform").value(), c->profile, Cpu());
  ASSERT_TRUE(run.ok()) << run.status();
  const std::shared_ptr<ChainModel>& model = c->workload->model();
  const std::vector<Batch> batches = {model->MakeBatch(11), model->MakeBatch(12)};
  const std::vector<uint64_t> seeds = {5, 6};
  // The mean the trainer should hand over, from the executor alone.
  std::vector<at::Tensor> expected;
  for (size_t k = 0; k < batches.size(); ++k) {
    ASSERT_TRUE(run->executor.Step(batches[k]).ok());
    const std::vector<at::Tensor> params = model->Parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor g = params[i].grad().detach().clone();
      if (k == 0)
        expected.push_back(g);
      else
        expected[i] = (expected[i] + g) / 2;
    }
  }
  std::vector<at::Tensor> before;
  for (const at::Tensor& p : model->Parameters()) before.push_back(p.detach().clone());

  TrainerOptions options;
  options.accumulate = 2;
  options.clip_norm = 1e9;
  std::vector<at::Tensor> seen;
  bool fail = true;
  options.after_backward = [&](std::vector<at::Tensor>& grads) {
    seen.clear();
    for (const at::Tensor& g : grads) seen.push_back(g.clone());
    return fail ? absl::UnavailableError("a peer is gone") : absl::OkStatus();
  };
  absl::StatusOr<Trainer> trainer = Trainer::Create(&run->executor, model->Parameters(), options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<TrainStep> failed = trainer->Step(batches, seeds);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  ASSERT_EQ(seen.size(), expected.size());
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_TRUE(seen[i].allclose(expected[i])) << i;
  std::vector<at::Tensor> params = model->Parameters();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(params[i].equal(before[i])) << i;

  fail = false;
  ASSERT_TRUE(trainer->Step(batches, seeds).ok());
  bool moved = false;
  for (size_t i = 0; i < params.size(); ++i) moved |= !params[i].equal(before[i]);
  EXPECT_TRUE(moved);
  // Step takes exactly `accumulate` micro-batches.
  EXPECT_EQ(trainer->Step({batches[0]}, {1}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ckpt
