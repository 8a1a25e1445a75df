#include "core/executor.h"

#include <algorithm>
#include <utility>

#include "ATen/core/grad_mode.h"
#include "absl/strings/str_cat.h"
#include "core/checkpoint.h"
#include "core/device.h"
#include "core/status_macros.h"
#include "core/torch_compat.h"
#include "core/torch_status.h"

namespace ckpt {
ChainExecutor::ChainExecutor(std::shared_ptr<ChainModel> model, Plan plan, MemoryMeter* meter,
                             c10::Device device)
    : model_(std::move(model)),
      plan_(std::move(plan)),
      stages_(model_->Stages()),
      meter_(meter),
      device_(device),
      stage_calls_(std::make_shared<std::atomic<int64_t>>(0)) {}

absl::StatusOr<ChainExecutor> ChainExecutor::Create(std::shared_ptr<ChainModel> model,
                                                    Plan plan, MemoryMeter* meter,
                                                    c10::Device device) {
  if (model == nullptr || meter == nullptr) {
    return absl::InvalidArgumentError("ChainExecutor needs a model and a memory meter");
  }
  RETURN_IF_ERROR(ValidatePlan(plan, model->Stages()));
  return ChainExecutor(std::move(model), std::move(plan), meter, device);
}

at::Tensor ChainExecutor::RunForward(const Batch& batch) {
  // Stage i as a function, counted. It holds copies of the pointers and the batch, not
  // `this`: the closures of recomputed segments run again during backward.
  auto stage_fn = [&](int i) -> TensorFn {
    return [model = model_, calls = stage_calls_, options = plan_.OptionsOf(i), batch,
            i](const std::vector<at::Tensor>& x) {
      ++*calls;
      return model->RunStage(i, x, options, batch);
    };
  };
  std::vector<at::Tensor> acts = batch.inputs;
  for (const Segment& segment : plan_.segments) {
    std::vector<TensorFn> stages;
    for (int i = segment.begin; i < segment.end; ++i) stages.push_back(stage_fn(i));
    CheckpointOptions options;
    // RNG snapshots cost bytes; take them only where a stage draws random numbers.
    options.preserve_rng_state =
        std::any_of(stages_.begin() + segment.begin, stages_.begin() + segment.end,
                    [](const StageInfo& s) { return s.stochastic; });
    switch (segment.mode) {
      case SegmentMode::kStored:
        for (const TensorFn& stage : stages) acts = stage(acts);
        break;
      case SegmentMode::kCheckpointed:
        acts = Checkpoint(
            [stages](std::vector<at::Tensor> x) {
              for (const TensorFn& stage : stages) x = stage(x);
              return x;
            },
            acts, options);
        break;
      case SegmentMode::kRecomputeAll:
        acts = CheckpointRecomputeAll(std::move(stages), acts, options);
        break;
    }
  }
  return model_->Loss(acts, batch);
}

StepResult ChainExecutor::RunStep(const Batch& batch, const StepOptions& options) {
  ClearGradients(model_->Parameters());
  ClearGradients(batch.inputs);
  std::unique_ptr<StepTimer> timer = MakeStepTimer(device_);
  Synchronize(device_);
  if (options.release_cached) meter_->ReleaseCached();
  StepResult r;
  meter_->ResetPeak();
  r.baseline_bytes = meter_->Stats().live_bytes;
  stage_calls_->store(0);

  timer->Start();
  at::Tensor loss;
  {
    compat::AutocastState autocast;  // off unless asked
    if (options.autocast) {
      (device_.is_cuda() ? autocast.cuda : autocast.cpu) = true;
      (device_.is_cuda() ? autocast.cuda_dtype : autocast.cpu_dtype) = *options.autocast;
    }
    compat::ScopedAutocast scope(autocast);
    loss = RunForward(batch);
  }
  r.activation_bytes = meter_->Stats().live_bytes - r.baseline_bytes;
  if (options.loss_scale != 1.0) {
    loss.mul(options.loss_scale).backward();
  } else {
    loss.backward();
  }
  r.step_ms = timer->StopMs();

  r.loss = loss.item<double>();
  const MemoryStats after = meter_->Stats();
  r.peak_bytes = after.peak_bytes;
  r.peak_reserved_bytes = after.peak_reserved_bytes;
  r.recompute_forwards = stage_calls_->load() - static_cast<int64_t>(stages_.size());
  return r;
}

absl::StatusOr<StepResult> ChainExecutor::Step(const Batch& batch, const StepOptions& options) {
  return RunTorch([&] { return RunStep(batch, options); });
}

absl::StatusOr<double> ChainExecutor::ForwardLoss(const Batch& batch) {
  return RunTorch([&] { return RunForward(batch).item<double>(); });
}

}  // namespace ckpt
