#include "core/profiler.h"

#include <algorithm>
#include <limits>
#include <memory>

#include "ATen/core/grad_mode.h"
#include "ATen/ops/ones_like.h"
#include "ATen/ops/randn_like.h"
#include "absl/strings/str_cat.h"
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
           const ProfileOptions& options)
      : model_(model),
        batch_(batch),
        meter_(meter),
        device_(device),
        options_(options),
        stages_(model.Stages()),
        params_(model.Parameters()),
        timer_(MakeStepTimer(device)) {}

  ModelProfile Run() {
    ModelProfile profile;
    profile.model = model_.spec();
    profile.stages = stages_;
    profile.input_bytes = Bytes(batch_.inputs);
    profile.param_bytes = Bytes(params_);
    profile.timed = options_.timed;
    profile.menu_chunks = options_.chunks;
    profile.measured.resize(stages_.size());
    ClearGradients(params_);
    if (options_.warm_up == ProfileWarmUp::kAlways || device_.is_cuda()) WarmUp();
    ComputeInputs();
    for (size_t i = 0; i < stages_.size(); ++i) {
      for (const StagePolicy& policy : PolicyMenu(stages_[i], options_.chunks)) {
        profile.measured[i].push_back(Measure(i, policy));
      }
    }
    MeasureLoss(inputs_.back(), profile.loss);
    return profile;
  }

  void Extend(const Plan& plan, ModelProfile& profile) {
    ClearGradients(params_);
    for (size_t i = 0; i < stages_.size(); ++i) {
      const StagePolicy& policy = plan.PolicyOf(static_cast<int>(i));
      if (profile.Find(static_cast<int>(i), policy) != nullptr) continue;
      if (inputs_.empty()) ComputeInputs();
      profile.measured[i].push_back(Measure(i, policy));
    }
  }

 private:
  std::vector<at::Tensor> Run(size_t i, const std::vector<at::Tensor>& x,
                              const StagePolicy& policy = {}) {
    return model_.RunStage(static_cast<int>(i), x, StageParts(stages_[i], policy), batch_);
  }

  // The input of every stage (and the last stage's output), computed once without a graph.
  void ComputeInputs() {
    at::NoGradGuard no_grad;
    inputs_ = {batch_.inputs};
    for (size_t i = 0; i < stages_.size(); ++i) inputs_.push_back(Run(i, inputs_.back()));
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

  StageProfile Measure(size_t i, const StagePolicy& policy) {
    StageProfile p;
    p.policy = policy;
    const std::vector<at::Tensor>& given = inputs_[i];
    p.input_bytes = Bytes(given);
    if (stages_[i].stochastic) {
      const int64_t before = meter_.Stats().live_bytes;
      const RngState snapshot = CaptureRng(CudaDevicesOf(given));
      p.rng_state_bytes = meter_.Stats().live_bytes - before;
    }
    {  // Without grad: the transient above input and output.
      at::NoGradGuard no_grad;
      meter_.ResetPeak();
      std::vector<at::Tensor> out = Run(i, given, policy);
      const MemoryStats s = meter_.Stats();
      p.nograd_transient_bytes = s.peak_bytes - s.live_bytes;
    }
    ClearGradients(params_);
    std::vector<at::Tensor> xs, leaves;
    PrepareInputs(i, given, xs, leaves);
    const int64_t start = meter_.Stats().live_bytes;
    meter_.ResetPeak();
    std::vector<at::Tensor> ys = Run(i, xs, policy);
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
    if (z.defined()) {
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
      p.backward_held_transient_bytes = MeasureHeldBackward(i, given, policy);
    }
    p.costs = CostsOf(p);
    if (options_.timed) Time(i, given, policy, p.costs);
    return p;
  }

  // The planner's view of a trace (times apart).
  static StageCosts CostsOf(const StageProfile& p) {
    StageCosts c;
    c.input_bytes = p.input_bytes;
    c.output_bytes = p.output_bytes;
    c.kept_bytes = p.retained_bytes + p.output_bytes;
    c.forward_transient_bytes = p.forward_transient_bytes;
    c.nograd_transient_bytes = p.nograd_transient_bytes;
    c.backward_transient_bytes = p.backward_transient_bytes;
    for (const auto& [param, bytes] : p.param_grads) c.param_grad_bytes += bytes;
    return c;
  }

  // Backward from the stage's outputs while the caller holds its inputs, its outputs and the
  // incoming gradients throughout (what Checkpoint's nested backward does).
  int64_t MeasureHeldBackward(size_t i, const std::vector<at::Tensor>& given,
                              const StagePolicy& policy) {
    std::vector<at::Tensor> xs, leaves;
    PrepareInputs(i, given, xs, leaves);
    std::vector<at::Tensor> ys = Run(i, xs, policy);
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

  // The stage's forward with and without a graph, and its backward, each timed alone: runs of
  // the three repeated at least min_repeats times and until forward and backward add up to
  // min_time_ms; medians.
  void Time(size_t i, const std::vector<at::Tensor>& given, const StagePolicy& policy,
            StageCosts& c) {
    std::vector<double> forward, backward, nograd;
    double total = 0;
    while (static_cast<int>(forward.size()) < options_.min_repeats ||
           total < options_.min_time_ms) {
      std::vector<at::Tensor> xs, leaves;
      PrepareInputs(i, given, xs, leaves);
      Synchronize(device_);
      timer_->Start();
      std::vector<at::Tensor> ys = Run(i, xs, policy);
      forward.push_back(timer_->StopMs());
      std::vector<at::Tensor> roots, grads;
      for (const at::Tensor& y : ys) {
        if (!y.requires_grad()) continue;
        roots.push_back(y);
        grads.push_back(at::ones_like(y));
      }
      xs.clear();
      ys.clear();
      timer_->Start();
      if (!roots.empty()) torch::autograd::backward(roots, grads);
      backward.push_back(timer_->StopMs());
      roots.clear();
      grads.clear();
      ClearGradients(params_);
      {
        at::NoGradGuard no_grad;
        timer_->Start();
        std::vector<at::Tensor> out = Run(i, given, policy);
        nograd.push_back(timer_->StopMs());
      }
      total += forward.back() + backward.back();
      if (forward.size() > 10000) break;  // a stage that takes no time at all
    }
    c.forward_ms = Median(forward);
    c.backward_ms = Median(backward);
    c.nograd_forward_ms = Median(nograd);
  }

  void MeasureLoss(const std::vector<at::Tensor>& given, LossProfile& p) {
    std::vector<at::Tensor> xs, leaves;
    PrepareInputs(1, given, xs, leaves);
    const int64_t start = meter_.Stats().live_bytes;
    timer_->Start();
    at::Tensor loss = model_.Loss(xs, batch_);
    p.forward_ms = timer_->StopMs();
    const bool aliases_input = !xs.empty() && loss.is_same(xs[0]);
    p.output_bytes = aliases_input ? 0 : StorageBytes(loss);
    p.retained_bytes = meter_.Stats().live_bytes - start - p.output_bytes;
    const int64_t x_bytes = Bytes(xs);
    p.keeps_input = aliases_input || FreedBy(meter_, [&] { xs.clear(); }) < x_bytes;
    xs.clear();
    if (!loss.requires_grad()) return;
    const int64_t base = meter_.Stats().live_bytes;
    meter_.ResetPeak();
    timer_->Start();
    loss.backward();
    p.backward_ms = timer_->StopMs();
    p.backward_transient_bytes = meter_.Stats().peak_bytes - base;
    // Without the release of its input (the model releases boundaries itself).
    p.backward_net_bytes =
        meter_.Stats().live_bytes - base + (p.keeps_input && !aliases_input ? x_bytes : 0);
    for (const at::Tensor& leaf : leaves) {
      p.input_grad_bytes += leaf.grad().defined() ? leaf.grad().nbytes() : 0;
    }
    ClearGradients(params_);
  }

  ChainModel& model_;
  const Batch& batch_;
  MemoryMeter& meter_;
  c10::Device device_;
  const ProfileOptions& options_;
  std::vector<StageInfo> stages_;
  std::vector<at::Tensor> params_;
  std::unique_ptr<StepTimer> timer_;
  std::vector<std::vector<at::Tensor>> inputs_;  // per stage, then the last stage's output
};

}  // namespace

ModelProfile StructureOnlyProfile(const ChainModel& model) {
  return StructureOnlyProfile(model.spec(), model.Stages());
}

absl::StatusOr<ModelProfile> ProfileModel(ChainModel& model, const Batch& batch, MemoryMeter& meter,
                                          c10::Device device, const ProfileOptions& options) {
  return RunTorch([&] { return Profiler(model, batch, meter, device, options).Run(); });
}

absl::Status ExtendProfile(ChainModel& model, const Batch& batch, MemoryMeter& meter,
                           c10::Device device, const Plan& plan, ModelProfile& profile,
                           const ProfileOptions& options) {
  if (profile.model != model.spec() ||
      profile.num_stages() != static_cast<int>(model.Stages().size())) {
    return absl::InvalidArgumentError(absl::StrCat("ExtendProfile: the profile of ", profile.model,
                                                   " is not one of ", model.spec()));
  }
  if (absl::Status s = ValidatePlan(plan, profile.stages); !s.ok()) return s;
  return RunTorch([&] { Profiler(model, batch, meter, device, options).Extend(plan, profile); });
}

}  // namespace ckpt
