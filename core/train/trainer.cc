#include "core/train/trainer.h"

#include <cmath>
#include <utility>

#include "ATen/Context.h"
#include "ATen/core/grad_mode.h"
#include "absl/strings/str_cat.h"
#include "core/run/torch_status.h"
#include "torch/optim/adamw.h"

namespace ckpt {
namespace {

// Scales all gradients down so that their global L2 norm is at most `max_norm` (as
// torch.nn.utils.clip_grad_norm_).
void ClipGradientNorm(const std::vector<at::Tensor>& params, double max_norm) {
  at::NoGradGuard no_grad;
  double squares = 0;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) squares += p.grad().to(at::kDouble).pow(2).sum().item<double>();
  }
  const double norm = std::sqrt(squares);
  if (norm > max_norm) {
    for (const at::Tensor& p : params) {
      if (p.grad().defined()) p.mutable_grad().mul_(max_norm / (norm + 1e-6));
    }
  }
}

}  // namespace

Trainer::Trainer(ChainExecutor* executor, std::vector<at::Tensor> parameters,
                 TrainerOptions options, DynamicLossScaler scaler)
    : executor_(executor),
      parameters_(std::move(parameters)),
      options_(std::move(options)),
      scaler_(scaler),
      optimizer_(std::make_unique<torch::optim::AdamW>(
          parameters_, torch::optim::AdamWOptions(options_.learning_rate))) {}

Trainer::Trainer(Trainer&&) noexcept = default;
Trainer::~Trainer() = default;

absl::StatusOr<Trainer> Trainer::Create(ChainExecutor* executor, std::vector<at::Tensor> parameters,
                                        const TrainerOptions& options) {
  if (executor == nullptr) return absl::InvalidArgumentError("Trainer needs an executor");
  if (options.accumulate < 1) {
    return absl::InvalidArgumentError(absl::StrCat("accumulate=", options.accumulate,
                                                   " is not accepted; accepted: an integer >= 1"));
  }
  absl::StatusOr<DynamicLossScaler> scaler = DynamicLossScaler::Create(options.scaler);
  if (!scaler.ok()) return scaler.status();
  return RunTorch([&] { return Trainer(executor, std::move(parameters), options, *scaler); });
}

absl::StatusOr<TrainStep> Trainer::Step(const std::vector<Batch>& micro_batches,
                                        const std::vector<uint64_t>& seeds) {
  if (static_cast<int>(micro_batches.size()) != options_.accumulate ||
      seeds.size() != micro_batches.size()) {
    return absl::InvalidArgumentError(absl::StrCat("a step takes ", options_.accumulate,
                                                   " micro-batches and as many seeds, not ",
                                                   micro_batches.size(), " and ", seeds.size()));
  }
  absl::Status status;
  absl::StatusOr<TrainStep> step = RunTorch([&] { return RunStep(micro_batches, seeds, status); });
  if (!step.ok()) return step.status();
  if (!status.ok()) return status;
  return step;
}

TrainStep Trainer::RunStep(const std::vector<Batch>& micro_batches,
                           const std::vector<uint64_t>& seeds, absl::Status& status) {
  StepOptions step_options;
  step_options.autocast = options_.autocast;
  step_options.loss_scale = options_.loss_scaling ? scaler_.scale() : 1.0;
  step_options.hooks = options_.hooks;
  TrainStep out;
  double loss_sum = 0;
  std::vector<at::Tensor> sums(parameters_.size());
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    at::manual_seed(seeds[k]);
    absl::StatusOr<StepResult> r = executor_->Step(micro_batches[k], step_options);
    if (!r.ok()) {
      status = r.status();
      return out;
    }
    loss_sum += r->loss;
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < parameters_.size(); ++i) {
      const at::Tensor& g = parameters_[i].grad();
      if (g.defined()) sums[i] = sums[i].defined() ? sums[i].add_(g) : g.clone();
    }
  }
  out.loss = loss_sum / static_cast<double>(micro_batches.size());
  {
    // The mean over micro-batches, with the loss scale undone.
    at::NoGradGuard no_grad;
    const double unscale =
        1.0 / (static_cast<double>(micro_batches.size()) * step_options.loss_scale);
    for (at::Tensor& g : sums) {
      if (g.defined()) g.mul_(unscale);
    }
  }
  if (options_.after_backward) {  // the point between backward and the optimizer step
    status = options_.after_backward(sums);
    if (!status.ok()) return out;
  }
  at::Tensor all_finite;  // stays on the device: one synchronisation a step, not one a tensor
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < parameters_.size(); ++i) {
      if (!sums[i].defined()) continue;
      parameters_[i].mutable_grad() = sums[i];
      if (!options_.loss_scaling) continue;
      at::Tensor finite = sums[i].isfinite().all();
      all_finite = all_finite.defined() ? all_finite.logical_and(finite) : finite;
    }
  }
  if (options_.loss_scaling) {
    absl::StatusOr<bool> take = scaler_.Update(!all_finite.defined() || all_finite.item<bool>());
    if (!take.ok()) {
      out.skipped = true;
      out.diverged = std::string(take.status().message());
      return out;
    }
    if (!*take) {  // overflow: the scaler lowered the scale; this step's update is dropped
      out.skipped = true;
      return out;
    }
  }
  ClipGradientNorm(parameters_, options_.clip_norm);
  optimizer_->step();
  return out;
}

}  // namespace ckpt
