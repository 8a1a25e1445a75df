#include "core/executor.h"

#include <algorithm>
#include <utility>

#include "ATen/core/grad_mode.h"
#include "absl/strings/str_cat.h"
#include "core/checkpoint.h"
#include "core/device.h"
#include "core/status_macros.h"
#include "core/torch_status.h"

namespace ckpt {
namespace {

// Sets the gradient of every tensor that has one to none (PyTorch's zero_grad(set_to_none)),
// so each step allocates its gradients afresh and steps are alike.
void ClearGradients(const std::vector<at::Tensor>& tensors) {
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.grad().defined()) t.mutable_grad().reset();
  }
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

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
  RETURN_IF_ERROR(ValidatePlan(plan, static_cast<int>(model->Stages().size())));
  return ChainExecutor(std::move(model), std::move(plan), meter, device);
}

at::Tensor ChainExecutor::RunForward(const Batch& batch) {
  std::vector<at::Tensor> acts = batch.inputs;
  for (const Segment& segment : plan_.segments) {
    // The segment's stages, counted. Copies of the pointers, not `this`: the closure of a
    // checkpointed segment runs again in backward.
    auto run = [model = model_, calls = stage_calls_, segment](std::vector<at::Tensor> x) {
      for (int i = segment.begin; i < segment.end; ++i) {
        ++*calls;
        x = model->RunStage(i, x);
      }
      return x;
    };
    switch (segment.mode) {
      case SegmentMode::kStored:
        acts = run(std::move(acts));
        break;
      case SegmentMode::kCheckpointed: {
        CheckpointOptions options;
        options.preserve_rng_state = std::any_of(
            stages_.begin() + segment.begin, stages_.begin() + segment.end,
            [](const StageInfo& s) { return s.stochastic; });
        acts = Checkpoint(run, acts, options);
        break;
      }
    }
  }
  return model_->Loss(acts, batch);
}

StepResult ChainExecutor::RunStep(const Batch& batch) {
  ClearGradients(model_->Parameters());
  ClearGradients(batch.inputs);
  std::unique_ptr<StepTimer> timer = MakeStepTimer(device_);
  Synchronize(device_);
  StepResult r;
  meter_->ResetPeak();
  r.baseline_bytes = meter_->Stats().live_bytes;
  stage_calls_->store(0);

  timer->Start();
  at::Tensor loss = RunForward(batch);
  r.activation_bytes = meter_->Stats().live_bytes - r.baseline_bytes;
  loss.backward();
  r.step_ms = timer->StopMs();

  r.loss = loss.item<double>();
  r.peak_bytes = meter_->Stats().peak_bytes;
  r.recompute_forwards = stage_calls_->load() - static_cast<int64_t>(stages_.size());
  return r;
}

absl::StatusOr<StepResult> ChainExecutor::Step(const Batch& batch) {
  return RunTorch([&] { return RunStep(batch); });
}

absl::StatusOr<double> ChainExecutor::ForwardLoss(const Batch& batch) {
  return RunTorch([&] { return RunForward(batch).item<double>(); });
}

absl::StatusOr<ModelProfile> ProfileModel(ChainModel& model, const Batch& batch,
                                          MemoryMeter& meter, c10::Device device, int repeats) {
  return RunTorch([&] {
    const std::vector<StageInfo> stages = model.Stages();
    ModelProfile profile;
    profile.model = model.spec();
    for (const at::Tensor& t : batch.inputs) profile.input_bytes += t.nbytes();
    profile.stages.resize(stages.size());
    std::vector<std::vector<double>> times(stages.size());
    std::unique_ptr<StepTimer> timer = MakeStepTimer(device);
    for (int r = 0; r < std::max(repeats, 1); ++r) {
      std::vector<at::Tensor> acts = batch.inputs;
      for (size_t i = 0; i < stages.size(); ++i) {
        StageProfile& p = profile.stages[i];
        Synchronize(device);
        meter.ResetPeak();
        const int64_t before = meter.Stats().live_bytes;
        timer->Start();
        std::vector<at::Tensor> out = model.RunStage(static_cast<int>(i), acts);
        times[i].push_back(timer->StopMs());
        acts = std::move(out);  // drops this code's hold on the stage's inputs
        const MemoryStats after = meter.Stats();
        p.info = stages[i];
        p.activation_bytes = after.live_bytes - before;
        p.transient_bytes = after.peak_bytes - after.live_bytes;
        p.output_bytes = 0;
        for (const at::Tensor& t : acts) p.output_bytes += t.defined() ? t.nbytes() : 0;
      }
    }
    for (size_t i = 0; i < stages.size(); ++i) profile.stages[i].forward_ms = Median(times[i]);
    return profile;
  });
}

}  // namespace ckpt
