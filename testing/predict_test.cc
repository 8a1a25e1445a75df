// --predict's answers against the full model's: every registered model with a depth parameter,
// profiled at depth 2 and expanded to depth 5 (ExpandProfile), predicts every default
// strategy's plan exactly as the profile of the depth-5 model built whole does (activation and
// peak bytes to the byte, the parameters' bytes), and the depth-5 model's measured step after
// forward holds exactly the predicted activation bytes. A model without one is built whole.
#include "experiments/predict.h"

#include <torch/torch.h>

#include <sstream>
#include <string>
#include <vector>

#include "core/plan/plan_text.h"
#include "core/plan/strategy.h"
#include "core/run/memory_meter.h"
#include "core/run/workload.h"
#include "experiments/sweep.h"
#include "gtest/gtest.h"
#include "testing/model_cases.h"

namespace ckpt {
namespace {

MemoryMeter& Cpu() { return **MemoryMeterFor(c10::Device(c10::DeviceType::CPU)); }

TEST(Predict, ShallowProfilesPredictTheFullModelExactly) {
  int expanded = 0;
  for (const std::string& id : Models().Ids()) {
    SCOPED_TRACE(id);
    const BoundModel small = BoundModel::Bind(testing::FixedSmallSpec(id)).value();
    absl::StatusOr<std::vector<BoundModel>> deep = DepthScanModels(small, {5});
    if (!deep.ok()) {  // no depth parameter: built whole
      EXPECT_EQ(ShallowModel(small)->spec(), small.spec());
      continue;
    }
    ++expanded;
    SweepOptions options;
    options.models = {deep->front()};
    options.strategies = BindStrategies(DefaultStrategies()).value();
    std::ostringstream progress;
    absl::StatusOr<std::vector<Prediction>> rows = Predict(options, Cpu(), progress);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->size(), options.strategies.size());
    EXPECT_EQ(rows->front().profiled, ShallowModel(deep->front())->spec());
    EXPECT_NE(rows->front().profiled, rows->front().model);

    absl::StatusOr<Workload> whole = Workload::Build(deep->front(), WorkloadOptions{});
    ASSERT_TRUE(whole.ok()) << whole.status();
    absl::StatusOr<const ModelProfile*> measured = whole->Profile(Cpu());
    ASSERT_TRUE(measured.ok()) << measured.status();
    ModelProfile profile = **measured;
    int64_t parameter_bytes = 0;
    for (const at::Tensor& p : whole->model()->Parameters()) parameter_bytes += p.nbytes();
    for (const Prediction& row : *rows) {
      SCOPED_TRACE(row.strategy + ": " + row.plan);
      ASSERT_EQ(row.status, "ok") << row.error;
      EXPECT_EQ(row.parameter_bytes, parameter_bytes);
      EXPECT_EQ(row.batch_bytes, profile.input_bytes);
      // The same plan on the whole model (planners may choose otherwise from other timings).
      absl::StatusOr<Plan> plan = ParsePlan(row.plan, profile.stages, row.strategy);
      ASSERT_TRUE(plan.ok()) << plan.status();
      absl::StatusOr<PlannedRun> run = whole->Prepare(*plan, profile, Cpu());
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_EQ(row.activation_bytes, run->predicted.activation_bytes);
      EXPECT_EQ(row.step_peak_bytes, run->predicted.peak_bytes);
      absl::StatusOr<StepResult> step = run->executor.Step(whole->batch());
      ASSERT_TRUE(step.ok()) << step.status();
      EXPECT_EQ(row.activation_bytes, step->activation_bytes);
      EXPECT_EQ(row.total_peak_bytes, row.parameter_bytes + row.optimizer_bytes + row.batch_bytes +
                                          std::max(row.step_peak_bytes, row.gradient_bytes));
    }
  }
  EXPECT_GT(expanded, 0);
}

TEST(Predict, AShallowerCopyThatIsNotOneIsRefused) {
  // A ViT profile cannot stand for a GPT-2: its stages have no counterparts there.
  absl::StatusOr<Workload> vit = Workload::Build(testing::FixedSmallSpec("vit"), WorkloadOptions{});
  ASSERT_TRUE(vit.ok()) << vit.status();
  absl::StatusOr<const ModelProfile*> profile = vit->Profile(Cpu());
  ASSERT_TRUE(profile.ok()) << profile.status();
  const std::string gpt2 = testing::FixedSmallSpec("gpt2");
  absl::StatusOr<ModelProfile> expanded = ExpandProfile(**profile, gpt2, *ModelStages(gpt2));
  ASSERT_FALSE(expanded.ok());
  EXPECT_EQ(expanded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(expanded.status().message()).find("accepted: a shallower instance"),
            std::string::npos)
      << expanded.status();
}

// The documents' figures beside the predictions: savings of the total and of the activations
// against store_all's, the model matched by its id, strategies that failed left out.
TEST(Predict, SavingsBesidePublishedFigures) {
  auto row = [](const std::string& strategy, int64_t total, int64_t activations) {
    Prediction p;
    p.model = p.profiled = "vit:size=b16:batch=4";
    p.strategy = strategy;
    p.total_peak_bytes = total;
    p.activation_bytes = activations;
    return p;
  };
  constexpr int64_t kGiB = int64_t{1} << 30;
  std::vector<Prediction> rows = {row("store_all", 10 * kGiB, 4 * kGiB),
                                  row("uniform:segments=4", 4 * kGiB, kGiB),
                                  row("optimal:budget=auto", 0, 0)};
  rows.back().status = "error";
  rows.back().error = "no plan fits";
  const std::string table =
      SavingsBesidePublished(rows, {{"vit", "ViT-B/16", 12.5, 5.8}, {"llama", "LLaMA-7B", 56, 24}});
  EXPECT_NE(table.find("| ViT-B/16 | 12.5 GB, 5.8 GB (54%) | `vit:size=b16:batch=4` | store_all | "
                       "10.00 GiB | | 4096 MiB | |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| | | | uniform:segments=4 | 4.00 GiB | 60% | 1024 MiB | 75% |"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("optimal"), std::string::npos) << table;
  EXPECT_EQ(table.find("LLaMA"), std::string::npos) << table;  // no prediction for it
  EXPECT_EQ(SavingsBesidePublished(rows, {}), "");
  const std::string report = PredictionReport(rows, {{"vit", "ViT-B/16", 12.5, 5.8}}, "sweep x");
  EXPECT_NE(report.find("`sweep x`"), std::string::npos);
  EXPECT_NE(report.find("## Beside the documents' figures"), std::string::npos);
}

}  // namespace
}  // namespace ckpt
