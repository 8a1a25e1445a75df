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

// The model and the plan's stage parts, shared by every closure the forward pass hands to a
// checkpoint: those run again during backward, on whichever thread autograd uses, after
// RunForward has returned.
struct ChainExecutor::Runner {
  std::shared_ptr<ChainModel> model;
  std::vector<StageInfo> stages;
  std::vector<StageParts> parts;        // one per stage, with the plan's policy
  std::atomic<int64_t> stage_calls{0};  // stage forwards since the step began

  std::vector<at::Tensor> RunStage(int i, const std::vector<at::Tensor>& x, const Batch& batch) {
    ++stage_calls;
    return model->RunStage(i, x, parts[i], batch);
  }

  bool Stochastic(const Segment& s) const {
    return std::any_of(stages.begin() + s.begin, stages.begin() + s.end,
                       [](const StageInfo& info) { return info.stochastic; });
  }

  // Runs `segments` in order from `acts`. With grad enabled this is the plan: stored segments
  // record their graph, checkpointed ones run under Checkpoint, whose function is their inner
  // plan run by this same method (so that backward reruns it under that plan, with its own
  // checkpoints, to any depth). With grad disabled (a checkpoint's first pass) every segment
  // simply runs.
  static std::vector<at::Tensor> RunSegments(const std::shared_ptr<Runner>& self,
                                             const std::vector<Segment>& segments,
                                             std::vector<at::Tensor> acts, const Batch& batch) {
    for (const Segment& segment : segments) {
      CheckpointOptions options;
      // RNG snapshots cost bytes; take them only where a stage draws random numbers.
      options.preserve_rng_state = self->Stochastic(segment);
      switch (segment.mode) {
        case SegmentMode::kStored:
          for (int i = segment.begin; i < segment.end; ++i) acts = self->RunStage(i, acts, batch);
          break;
        case SegmentMode::kCheckpointed: {
          std::vector<Segment> inner = segment.inner;
          if (inner.empty()) inner.push_back({segment.begin, segment.end, SegmentMode::kStored});
          acts = Checkpoint(
              [self, inner = std::move(inner), batch](const std::vector<at::Tensor>& x) {
                return RunSegments(self, inner, x, batch);
              },
              acts, options);
          break;
        }
        case SegmentMode::kRecomputeAll: {
          std::vector<TensorFn> stages;
          for (int i = segment.begin; i < segment.end; ++i) {
            stages.push_back([self, i, batch](const std::vector<at::Tensor>& x) {
              return self->RunStage(i, x, batch);
            });
          }
          acts = CheckpointRecomputeAll(std::move(stages), acts, options);
          break;
        }
      }
    }
    return acts;
  }
};

ChainExecutor::ChainExecutor(std::shared_ptr<ChainModel> model, Plan plan, MemoryMeter* meter,
                             c10::Device device)
    : model_(std::move(model)),
      plan_(std::move(plan)),
      stages_(model_->Stages()),
      meter_(meter),
      device_(device),
      runner_(std::make_shared<Runner>()) {
  runner_->model = model_;
  runner_->stages = stages_;
  for (size_t i = 0; i < stages_.size(); ++i) {
    runner_->parts.emplace_back(stages_[i], plan_.PolicyOf(static_cast<int>(i)));
  }
}

absl::StatusOr<ChainExecutor> ChainExecutor::Create(std::shared_ptr<ChainModel> model, Plan plan,
                                                    MemoryMeter* meter, c10::Device device) {
  if (model == nullptr || meter == nullptr) {
    return absl::InvalidArgumentError("ChainExecutor needs a model and a memory meter");
  }
  RETURN_IF_ERROR(ValidatePlan(plan, model->Stages()));
  return ChainExecutor(std::move(model), std::move(plan), meter, device);
}

at::Tensor ChainExecutor::RunForward(const Batch& batch) {
  const std::vector<at::Tensor> outputs =
      Runner::RunSegments(runner_, plan_.segments, batch.inputs, batch);
  return model_->Loss(outputs, batch);
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
  runner_->stage_calls.store(0);

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
  r.recompute_forwards = runner_->stage_calls.load() - static_cast<int64_t>(stages_.size());
  return r;
}

absl::StatusOr<StepResult> ChainExecutor::Step(const Batch& batch, const StepOptions& options) {
  return RunTorch([&] { return RunStep(batch, options); });
}

absl::StatusOr<double> ChainExecutor::ForwardLoss(const Batch& batch) {
  return RunTorch([&] { return RunForward(batch).item<double>(); });
}

}  // namespace ckpt
