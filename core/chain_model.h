// The model interface the executor runs: an ordered chain of stages.
//
// Stage i takes the tensors stage i-1 returned (stage 0 takes the batch's inputs) and
// returns the tensors stage i+1 takes; the loss takes the last stage's outputs and the
// batch's targets. A model declares its stages (kind, position-wise, stochastic) to the
// planner and runs any of them on demand, so a strategy can store, recompute or chunk them.
// Models register like strategies (see models/heavy_mlp.cc):
//
//   const ModelRegistration<HeavyMlpModel> registration;
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "core/plan.h"
#include "core/registry.h"

namespace ckpt {

struct Batch {
  std::vector<at::Tensor> inputs;   // stage 0's inputs; floating ones require grad
  std::vector<at::Tensor> targets;  // what the loss compares against (may be empty)
};

class ChainModel {
 public:
  virtual ~ChainModel() = default;

  // The canonical model spec, every parameter filled in ("heavy_mlp:depth=20:...").
  virtual std::string spec() const = 0;
  virtual std::vector<StageInfo> Stages() const = 0;
  // Runs stage `index` with autograd as the caller's grad mode says. `options` are the plan's
  // for this stage (ValidatePlan has checked that the stage supports them); `batch` gives
  // stages that need them the targets (an LM head that computes its own loss).
  virtual std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& inputs,
                                           const StageOptions& options, const Batch& batch) = 0;
  // A scalar, from the last stage's outputs (which may already be the loss).
  virtual at::Tensor Loss(const std::vector<at::Tensor>& outputs, const Batch& batch) = 0;
  // A synthetic batch on the model's device; the same seed gives the same batch.
  virtual Batch MakeBatch(uint64_t seed) = 0;
  virtual std::vector<at::Tensor> Parameters() = 0;
  virtual void SetTraining(bool training) = 0;
};

// Sets the gradient of every tensor that has one to none (PyTorch's zero_grad(set_to_none)),
// so each step allocates its gradients afresh and steps are alike.
void ClearGradients(const std::vector<at::Tensor>& tensors);

// What every model factory gets besides its parameters.
struct ModelContext {
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  uint64_t init_seed = 0;  // parameters are initialised from this seed
};

using ModelRegistry = Registry<std::shared_ptr<ChainModel>, const ModelContext&>;

// The process-wide model registry.
ModelRegistry& Models();

// Parses the spec and builds the model (LibTorch errors become a Status).
absl::StatusOr<std::shared_ptr<ChainModel>> CreateModel(const std::string& spec_text,
                                                        const ModelContext& context);

template <typename T>
struct ModelRegistration {
  ModelRegistration() { Models().Register({T::kId, T::kSummary, T::Params(), &T::Create}); }
};

}  // namespace ckpt
