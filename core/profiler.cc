#include "core/profiler.h"

#include <algorithm>
#include <limits>
#include <memory>

#include "ATen/core/grad_mode.h"
#include "ATen/ops/randn_like.h"
#include "core/checkpoint.h"
#include "core/device.h"
#include "core/rng.h"
#include "core/torch_status.h"
#include "torch/csrc/autograd/autograd.h"

namespace ckpt {
namespace {

// Bytes of the storage behind a tensor: a view (a reduction's scalar can be one) keeps all
// of it alive.
int64_t StorageBytes(const at::Tensor& t) {
  return t.defined() && t.has_storage() ? static_cast<int64_t>(t.storage().nbytes()) : 0;
}

int64_t Bytes(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const at::Tensor& t : tensors) n += StorageBytes(t);
  return n;
}

// Live bytes freed by running `drop` (which releases some references).
template <typename Fn>
int64_t FreedBy(MemoryMeter& meter, Fn&& drop) {
  const int64_t before = meter.Stats().live_bytes;
  drop();
  return before - meter.Stats().live_bytes;
}

class Profiler {
 public:
  Profiler(ChainModel& model, const Batch& batch, MemoryMeter& meter, c10::Device device,
           const std::vector<StageOptions>& options, ProfileWarmUp warm_up)
      : model_(model), batch_(batch), meter_(meter), device_(device), options_(options),
        warm_up_(warm_up), stages_(model.Stages()), params_(model.Parameters()) {}

  ModelProfile Run(int repeats) {
    ModelProfile profile;
    profile.model = model_.spec();
    profile.input_bytes = Bytes(batch_.inputs);
    profile.stages.resize(stages_.size());
    ClearGradients(params_);
    if (warm_up_ == ProfileWarmUp::kAlways || device_.is_cuda()) WarmUp();
    MeasureChain(profile, repeats);
    // The input of every stage, computed once without a graph.
    std::vector<std::vector<at::Tensor>> inputs = {batch_.inputs};
    {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < stages_.size(); ++i) inputs.push_back(Run(i, inputs.back()));
    }
    for (size_t i = 0; i < stages_.size(); ++i) MeasureStage(i, inputs[i], profile.stages[i]);
    MeasureLoss(inputs.back(), profile.loss);
    return profile;
  }

 private:
  const StageOptions& OptionsOf(size_t i) const {
    static const StageOptions kDefault;
    return options_.empty() ? kDefault : options_[i];
  }
  std::vector<at::Tensor> Run(size_t i, const std::vector<at::Tensor>& x) {
    return model_.RunStage(static_cast<int>(i), x, OptionsOf(i), batch_);
  }

  // One unmeasured forward and backward of the whole chain, leaving no gradients and the
  // random streams as they were. Libraries keep state in tensor memory that they make on first
  // use and hold for the process: on CUDA, cuBLAS's workspace for each (thread, stream), and
  // backward runs on autograd's device thread, not this one. Made inside the measurements, it
  // would count as the first stage's activations or backward transient.
  void WarmUp() {
    const RngState rng = CaptureRng(CudaDevicesOf(batch_.inputs));
    {
      std::vector<at::Tensor> xs, leaves;
      PrepareInputs(0, batch_.inputs, xs, leaves);
      for (size_t i = 0; i < stages_.size(); ++i) xs = Run(i, xs);
      at::Tensor loss = model_.Loss(xs, batch_);
      if (loss.requires_grad()) loss.backward();
    }
    ClearGradients(params_);
    RestoreRng(rng);
    Synchronize(device_);
  }

  // The chain run stored, as store_all runs it: activation bytes (the live-bytes increase of
  // each stage) and the median forward time of each stage.
  void MeasureChain(ModelProfile& profile, int repeats) {
    std::vector<std::vector<double>> times(stages_.size());
    std::unique_ptr<StepTimer> timer = MakeStepTimer(device_);
    for (int r = 0; r < std::max(repeats, 1); ++r) {
      std::vector<at::Tensor> acts = batch_.inputs;
      for (size_t i = 0; i < stages_.size(); ++i) {
        Synchronize(device_);
        const int64_t before = meter_.Stats().live_bytes;
        timer->Start();
        std::vector<at::Tensor> out = Run(i, acts);
        times[i].push_back(timer->StopMs());
        acts = std::move(out);  // drops this code's hold on the stage's inputs
        profile.stages[i].activation_bytes = meter_.Stats().live_bytes - before;
      }
    }
    for (size_t i = 0; i < stages_.size(); ++i) {
      profile.stages[i].info = stages_[i];
      profile.stages[i].forward_ms = Median(times[i]);
    }
  }

  // Inputs as the chain has them: a floating input that needs a gradient becomes a fresh
  // non-leaf tensor (so that dropping it frees it unless the stage keeps it), whose gradient
  // lands in `leaves`.
  void PrepareInputs(size_t i, const std::vector<at::Tensor>& given, std::vector<at::Tensor>& xs,
                     std::vector<at::Tensor>& leaves) {
    for (const at::Tensor& t : given) {
      const bool needs_grad = IsDifferentiable(t) && (i > 0 || t.requires_grad());
      if (needs_grad) {
        leaves.push_back(t.detach().requires_grad_(true));
        xs.push_back(leaves.back().clone());
      } else {
        xs.push_back(t);
      }
    }
  }

  void MeasureStage(size_t i, const std::vector<at::Tensor>& given, StageProfile& p) {
    p.input_bytes = Bytes(given);
    if (stages_[i].stochastic) {
      RngState snapshot;
      const int64_t before = meter_.Stats().live_bytes;
      snapshot = CaptureRng(CudaDevicesOf(given));
      p.rng_state_bytes = meter_.Stats().live_bytes - before;
    }
    {  // Without grad: the transient above input and output.
      at::NoGradGuard no_grad;
      meter_.ResetPeak();
      std::vector<at::Tensor> out = Run(i, given);
      const MemoryStats s = meter_.Stats();
      p.nograd_transient_bytes = s.peak_bytes - s.live_bytes;
    }
    ClearGradients(params_);
    std::vector<at::Tensor> xs, leaves;
    PrepareInputs(i, given, xs, leaves);
    const int64_t start = meter_.Stats().live_bytes;
    meter_.ResetPeak();
    std::vector<at::Tensor> ys = Run(i, xs);
    const MemoryStats after = meter_.Stats();
    p.output_bytes = Bytes(ys);
    p.retained_bytes = after.live_bytes - start - p.output_bytes;
    p.forward_transient_bytes = after.peak_bytes - after.live_bytes;

    // The gradient source: z = sum(y * c), whose backward allocates dL/dy = c afresh, as the
    // next stage's backward would.
    std::vector<at::Tensor> consts;
    at::Tensor z;
    for (const at::Tensor& y : ys) {
      if (!y.requires_grad()) continue;
      consts.push_back(at::randn_like(y));
      at::Tensor term = y.mul(consts.back()).sum();
      z = z.defined() ? z.add(term) : term;
    }
    const int64_t x_bytes = Bytes(xs);
    p.keeps_input = i > 0 && FreedBy(meter_, [&] { xs.clear(); }) < x_bytes;
    const int64_t y_bytes = p.output_bytes;
    p.keeps_output = FreedBy(meter_, [&] { ys.clear(); }) < y_bytes;
    if (!z.defined()) return;

    const int64_t base = meter_.Stats().live_bytes;
    meter_.ResetPeak();
    z.backward();
    // Above the state at the start of the stage's backward, which already holds dL/dy (and
    // the 4-byte seed of z's backward, which the chain does not have).
    p.backward_transient_bytes =
        meter_.Stats().peak_bytes - base - p.output_bytes - static_cast<int64_t>(z.nbytes());
    for (size_t k = 0; k < params_.size(); ++k) {
      if (params_[k].grad().defined()) {
        p.param_grads.emplace_back(static_cast<int>(k), params_[k].grad().nbytes());
      }
    }
    for (const at::Tensor& leaf : leaves) {
      p.input_grad_bytes += leaf.grad().defined() ? leaf.grad().nbytes() : 0;
    }
    ClearGradients(params_);
    z.reset();
    consts.clear();
    p.backward_held_transient_bytes = MeasureHeldBackward(i, given);
  }

  // Backward from the stage's outputs while the caller holds its inputs, its outputs and the
  // incoming gradients throughout (what Checkpoint's nested backward does).
  int64_t MeasureHeldBackward(size_t i, const std::vector<at::Tensor>& given) {
    std::vector<at::Tensor> xs, leaves;
    PrepareInputs(i, given, xs, leaves);
    std::vector<at::Tensor> ys = Run(i, xs);
    std::vector<at::Tensor> roots, grads;
    for (const at::Tensor& y : ys) {
      if (!y.requires_grad()) continue;
      roots.push_back(y);
      grads.push_back(at::randn_like(y));
    }
    if (roots.empty()) return 0;
    const int64_t base = meter_.Stats().live_bytes;
    meter_.ResetPeak();
    torch::autograd::backward(roots, grads);
    const int64_t transient = meter_.Stats().peak_bytes - base;
    ClearGradients(params_);
    return transient;
  }

  void MeasureLoss(const std::vector<at::Tensor>& given, LossProfile& p) {
    std::vector<at::Tensor> xs, leaves;
    PrepareInputs(1, given, xs, leaves);
    const int64_t start = meter_.Stats().live_bytes;
    at::Tensor loss = model_.Loss(xs, batch_);
    const bool aliases_input = !xs.empty() && loss.is_same(xs[0]);
    p.output_bytes = aliases_input ? 0 : StorageBytes(loss);
    p.retained_bytes = meter_.Stats().live_bytes - start - p.output_bytes;
    const int64_t x_bytes = Bytes(xs);
    p.keeps_input = aliases_input || FreedBy(meter_, [&] { xs.clear(); }) < x_bytes;
    xs.clear();
    if (!loss.requires_grad()) return;
    const int64_t base = meter_.Stats().live_bytes;
    meter_.ResetPeak();
    loss.backward();
    p.backward_transient_bytes = meter_.Stats().peak_bytes - base;
    // Without the release of its input (the model releases boundaries itself).
    p.backward_net_bytes = meter_.Stats().live_bytes - base +
                           (p.keeps_input && !aliases_input ? x_bytes : 0);
    for (const at::Tensor& leaf : leaves) {
      p.input_grad_bytes += leaf.grad().defined() ? leaf.grad().nbytes() : 0;
    }
    ClearGradients(params_);
  }

  ChainModel& model_;
  const Batch& batch_;
  MemoryMeter& meter_;
  c10::Device device_;
  const std::vector<StageOptions>& options_;
  ProfileWarmUp warm_up_;
  std::vector<StageInfo> stages_;
  std::vector<at::Tensor> params_;
};

}  // namespace

ModelProfile StructureOnlyProfile(const ChainModel& model) {
  ModelProfile profile;
  profile.model = model.spec();
  for (const StageInfo& info : model.Stages()) {
    StageProfile stage;
    stage.info = info;
    profile.stages.push_back(stage);
  }
  return profile;
}

absl::StatusOr<ModelProfile> ProfileModel(ChainModel& model, const Batch& batch,
                                          MemoryMeter& meter, c10::Device device,
                                          const std::vector<StageOptions>& options,
                                          int repeats, ProfileWarmUp warm_up) {
  if (!options.empty() && options.size() != model.Stages().size()) {
    return absl::InvalidArgumentError("ProfileModel: one StageOptions per stage, or none");
  }
  return RunTorch(
      [&] { return Profiler(model, batch, meter, device, options, warm_up).Run(repeats); });
}

}  // namespace ckpt
