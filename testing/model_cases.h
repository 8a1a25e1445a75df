// Shared by the conformance and memory tests: small generated configurations of every model
// in the zoo, and helpers to run one training step of a model under a strategy.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "core/chain_model.h"
#include "core/executor.h"
#include "core/memory_model.h"
#include "core/plan.h"
#include "rapidcheck.h"

namespace ckpt::testing {

// The device the LibTorch tests that support it run on: CPU unless the test main was started
// with CKPT_TEST_DEVICE=cuda (tools/gpu/run.sh does, for the conformance suite).
c10::Device TestDevice();
void SetTestDevice(c10::Device device);

// The model ids the zoo must cover; a model registered without a generator here fails the
// conformance test (so a new model cannot skip it).
const std::vector<std::string>& ModelsWithGenerators();

// A small spec of `model` (depth, widths, heads, sequence, batch, dropout generated), fast
// enough for hundreds of steps on CPU. With `dropout` false, models that have dropout get 0.
rc::Gen<std::string> SmallModelSpec(const std::string& model, bool dropout = true);

// A spec of registered strategy `id` with generated parameters, from its declared ParamDefs:
// integers near their minimum (or auto), any choice.
rc::Gen<std::string> StrategySpec(const std::string& id);

struct Run {
  Plan plan;
  StepResult step;
  std::vector<at::Tensor> grads;  // every parameter's, then every batch input's (may be undefined)
};

// Plans `strategy_spec` for `model` and runs one step on TestDevice() with the dropout RNG
// seeded by `seed`.
// The plan's status (InvalidArgument when the parameters do not fit the model) comes back.
absl::StatusOr<Run> StepUnder(const std::shared_ptr<ChainModel>& model, const Batch& batch,
                              const std::string& strategy_spec, uint64_t seed);

// The largest |a| over the gradients.
double MaxAbs(const std::vector<at::Tensor>& a);

// The analytical model's prediction for `plan`, profiled with its stage options.
MemoryPrediction Predict(ChainModel& model, const Batch& batch, const Plan& plan);

}  // namespace ckpt::testing
