// uniform's gradients equal store_all's bitwise, for generated heavy_mlp configurations and
// segment counts, on CPU float32: the recomputation performs the same operations on the same
// values, so every parameter's and the input's gradient must be identical to the last bit.
#include "ATen/ops/equal.h"
#include "c10/core/DeviceType.h"
#include "core/plan/strategy.h"
#include "core/run/chain_model.h"
#include "core/run/executor.h"
#include "core/run/memory_meter.h"
#include "core/run/profiler.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

struct Gradients {
  std::vector<at::Tensor> tensors;  // parameters' gradients, then the inputs'
  double loss = 0;
  int64_t recompute_forwards = 0;
};

Gradients StepAndCollect(const std::shared_ptr<ChainModel>& model, const Batch& batch,
                         const std::string& strategy_spec) {
  absl::StatusOr<Plan> plan = PlanFor(strategy_spec, StructureOnlyProfile(*model));
  RC_ASSERT(plan.ok());
  absl::StatusOr<ChainExecutor> exec =
      ChainExecutor::Create(model, *plan, *MemoryMeterFor(at::kCPU), at::kCPU);
  RC_ASSERT(exec.ok());
  absl::StatusOr<StepResult> r = exec->Step(batch);
  RC_ASSERT(r.ok());
  Gradients g;
  for (const at::Tensor& p : model->Parameters()) g.tensors.push_back(p.grad().clone());
  for (const at::Tensor& x : batch.inputs) g.tensors.push_back(x.grad().clone());
  g.loss = r->loss;
  g.recompute_forwards = r->recompute_forwards;
  return g;
}

RC_GTEST_PROP(UniformGradients, EqualStoreAllBitwise, ()) {
  const int depth = *rc::gen::inRange(1, 9).as("depth");
  const int hidden = *rc::gen::inRange(1, 33).as("hidden");
  const int batch = *rc::gen::inRange(1, 7).as("batch");
  const int segments = *rc::gen::inRange(1, depth + 1).as("segments");
  const uint64_t seed = *rc::gen::inRange<uint64_t>(0, 1000).as("seed");

  ModelContext context;
  context.init_seed = seed;
  absl::StatusOr<std::shared_ptr<ChainModel>> model =
      CreateModel("heavy_mlp:depth=" + std::to_string(depth) + ":hidden=" + std::to_string(hidden) +
                      ":batch=" + std::to_string(batch),
                  context);
  RC_ASSERT(model.ok());
  (*model)->SetTraining(true);
  const Batch b = (*model)->MakeBatch(seed + 1);

  const Gradients baseline = StepAndCollect(*model, b, "store_all");
  const Gradients uniform =
      StepAndCollect(*model, b, "uniform:segments=" + std::to_string(segments));

  RC_ASSERT(uniform.loss == baseline.loss);
  RC_ASSERT(uniform.tensors.size() == baseline.tensors.size());
  for (size_t i = 0; i < baseline.tensors.size(); ++i) {
    RC_ASSERT(at::equal(uniform.tensors[i], baseline.tensors[i]));
  }
  // Every stage of the checkpointed segments (all but the last) runs once more.
  const int last_segment = depth / segments;  // sizes differ by one; the last is the smaller
  RC_ASSERT(uniform.recompute_forwards == depth - last_segment);
}

}  // namespace
}  // namespace ckpt
