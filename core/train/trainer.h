// The trainer: optimizer steps of a model under a plan (a ChainExecutor), with gradient
// accumulation over micro-batches, a point between backward and the optimizer step where the
// gradients can be transformed (a data-parallel all-reduce goes there), dynamic loss scaling,
// clipping by the global norm, and AdamW.
//
//   TrainerOptions options;
//   options.accumulate = 4;
//   options.after_backward = [&](std::vector<at::Tensor>& grads) { return AllReduce(grads); };
//   ASSIGN_OR_RETURN(Trainer trainer, Trainer::Create(&executor, model.Parameters(), options));
//   ASSIGN_OR_RETURN(TrainStep step, trainer.Step(micro_batches, dropout_seeds));
//
// A step runs each micro-batch's forward and backward through the executor, sums the
// micro-batches' gradients in their order (the same for every plan: autograd's own
// accumulation would sum a parameter used by two stages, a tied embedding, in an order that
// depends on the plan, and float addition is not associative), takes their mean with the loss
// scale undone, hands them to `after_backward`, then checks them for overflow (loss scaling),
// clips and steps the optimizer. Plans that recompute the same arithmetic therefore train to
// the same weights, bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c10/core/ScalarType.h"
#include "core/run/chain_model.h"
#include "core/run/executor.h"
#include "core/train/loss_scaler.h"

namespace torch::optim {
class AdamW;
}  // namespace torch::optim

namespace ckpt {

struct TrainerOptions {
  int accumulate = 1;  // micro-batches per optimizer step
  double learning_rate = 1e-3;
  double clip_norm = 1.0;  // the gradients' global L2 norm is clipped to this
  // The forward (and its recomputations) under autocast to this dtype (StepOptions::autocast).
  std::optional<c10::ScalarType> autocast;
  // Dynamic loss scaling (core/train/loss_scaler.h): the loss scaled before backward, the gradients
  // unscaled, a step with non-finite gradients skipped and the scale lowered.
  bool loss_scaling = false;
  LossScalerOptions scaler;
  // Run around each micro-batch's step (StepOptions::hooks). Data parallel passes the reducer
  // of the executor's parameters: each micro-batch's gradients are averaged across the ranks
  // before they are summed, so every micro-batch communicates, as DDP without no_sync does.
  // It must outlive the trainer.
  StepHooks* hooks = nullptr;
  // Called once a step with every parameter's gradient (undefined where a parameter got none),
  // the mean over the micro-batches with the loss scale undone, before the overflow check,
  // clipping and the optimizer; it may change them in place. Its error ends the step.
  std::function<absl::Status(std::vector<at::Tensor>& gradients)> after_backward;
};

struct TrainStep {
  double loss = 0;       // the mean over the micro-batches (unscaled)
  bool skipped = false;  // loss scaling found non-finite gradients: no update was made
  // Non-empty when the gradients are non-finite at every scale down to the loss scaler's least
  // (the model has diverged): why. No update was made, and no later step would make one.
  std::string diverged;
};

class Trainer {
 public:
  // `executor` must outlive the trainer; `parameters` are the model's, in its order.
  // InvalidArgument for accumulate < 1 or bad scaler options.
  static absl::StatusOr<Trainer> Create(ChainExecutor* executor, std::vector<at::Tensor> parameters,
                                        const TrainerOptions& options);
  Trainer(Trainer&&) noexcept;
  ~Trainer();

  // One optimizer step over `micro_batches` (options.accumulate of them), the CPU's and the
  // device's default generators seeded with `seeds[k]` before micro-batch k (dropout).
  // Executor errors (out of memory) and after_backward's come back as they are.
  absl::StatusOr<TrainStep> Step(const std::vector<Batch>& micro_batches,
                                 const std::vector<uint64_t>& seeds);

 private:
  Trainer(ChainExecutor* executor, std::vector<at::Tensor> parameters, TrainerOptions options,
          DynamicLossScaler scaler);
  TrainStep RunStep(const std::vector<Batch>& micro_batches, const std::vector<uint64_t>& seeds,
                    absl::Status& status);  // throws LibTorch's exceptions

  ChainExecutor* executor_;
  std::vector<at::Tensor> parameters_;
  TrainerOptions options_;
  DynamicLossScaler scaler_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
};

}  // namespace ckpt
