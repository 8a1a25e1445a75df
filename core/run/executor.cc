#include "core/run/executor.h"

#include <memory>
#include <optional>
#include <utility>

#include "ATen/core/grad_mode.h"
#include "core/base/status_macros.h"
#include "core/run/checkpoint.h"
#include "core/run/device.h"
#include "core/run/graph_inputs.h"
#include "core/run/rng.h"
#include "core/run/torch_compat.h"
#include "core/run/torch_status.h"
#include "torch/csrc/autograd/autograd.h"

namespace ckpt {

// What one step's ops pass to each other.
struct ChainExecutor::State {
  explicit State(const Program& program)
      : values(program.num_values),
        losses(program.num_runs),
        inputs(program.num_runs),
        snapshots(program.num_rng),
        host(program.num_host),
        copying_out(program.num_values),
        arriving(program.num_values) {}
  std::vector<std::vector<at::Tensor>> values;  // by value id, while the executor holds them
  std::vector<at::Tensor> losses;               // per run that ends in the loss
  // Per run that starts past the batch, where its backward leaves its input's gradient.
  std::vector<c10::intrusive_ptr<InputGradients>> inputs;
  std::vector<at::Tensor> grad;  // the gradient at the boundary backward has reached
  std::vector<std::optional<RngState>> snapshots;
  std::vector<RngState> aside;                // the states kReplayRng set aside, innermost last
  at::Tensor loss;                            // the step's loss, unscaled
  std::vector<std::vector<at::Tensor>> host;  // by host buffer, from kOffload to kFetch
  // By value: the copy out of an offloaded value, which the compute waits for before the value
  // goes; a fetched value's copy back, which it waits for before the value is read.
  std::vector<std::unique_ptr<CopyFence>> copying_out;
  std::vector<std::optional<Transfer>> arriving;
  int64_t offloaded_bytes = 0;

  // Value `v`, ready to read: a fetched value once its copy back is done.
  std::vector<at::Tensor>& Read(int v) {
    if (arriving[v].has_value()) {
      arriving[v]->done->Wait();
      values[v] = std::move(arriving[v]->tensors);
      arriving[v].reset();
    }
    return values[v];
  }
  // Drops value `v` once no copy reads it.
  void Release(int v) {
    if (copying_out[v] != nullptr) copying_out[v]->Wait();
    copying_out[v].reset();
    arriving[v].reset();  // its fence waits: a copy may not write into freed memory
    values[v].clear();
  }
};

ChainExecutor::ChainExecutor(std::shared_ptr<ChainModel> model, Plan plan, MemoryMeter* meter,
                             HostPool* host_pool, c10::Device device)
    : model_(std::move(model)),
      plan_(std::move(plan)),
      meter_(meter),
      host_pool_(host_pool),
      device_(device) {
  const std::vector<StageInfo> stages = model_->Stages();
  program_ = Compile(plan_, stages);
  for (size_t i = 0; i < stages.size(); ++i) {
    parts_.emplace_back(stages[i], plan_.PolicyOf(static_cast<int>(i)));
  }
}

absl::StatusOr<ChainExecutor> ChainExecutor::Create(std::shared_ptr<ChainModel> model, Plan plan,
                                                    MemoryMeter* meter, c10::Device device) {
  if (model == nullptr || meter == nullptr) {
    return absl::InvalidArgumentError("ChainExecutor needs a model and a memory meter");
  }
  ASSIGN_OR_RETURN(HostPool * host_pool, HostPoolFor(device));
  return ChainExecutor(std::move(model), std::move(plan), meter, host_pool, device);
}

std::vector<at::Tensor> ChainExecutor::RunStage(int i, const std::vector<at::Tensor>& x,
                                                const Batch& batch) {
  ++stage_calls_;
  return model_->RunStage(i, x, parts_[i], batch);
}

void ChainExecutor::Forward(const Op& op, const Batch& batch, const StepOptions& options,
                            State& state) {
  compat::ScopedAutocast scope(compat::AutocastOn(device_.type(), options.autocast));
  std::optional<RerunScope> rerun;
  if (op.rerun) rerun.emplace();
  std::vector<at::Tensor> x = state.Read(op.input);
  if (op.run < 0) {
    at::NoGradGuard no_grad;
    for (int j = op.begin; j < op.end; ++j) x = RunStage(j, x, batch);
    state.values[op.output] = std::move(x);
    return;
  }
  at::AutoGradMode enable_grad(true);
  // A run from the batch starts at its tensors (their gradients land in .grad, as in a plain
  // step); any other at views whose gradients backward leaves for the executor.
  if (op.input != 0) {
    state.inputs[op.run] = c10::make_intrusive<InputGradients>();
    x = GraphInputs(x, state.inputs[op.run]);
  }
  for (int j = op.begin; j < op.end; ++j) x = RunStage(j, x, batch);
  if (op.loss) {
    state.losses[op.run] = model_->Loss(x, batch);
    state.loss = state.losses[op.run];
  } else {
    state.values[op.output] = std::move(x);
  }
}

void ChainExecutor::Backward(const Op& op, const StepOptions& options, State& state) {
  if (op.loss) {
    at::Tensor loss = std::move(state.losses[op.run]);
    if (options.loss_scale != 1.0) {
      loss.mul(options.loss_scale).backward();
    } else {
      loss.backward();
    }
  } else {
    // From the run's outputs, with the gradients that reached them (none: not used further).
    std::vector<at::Tensor> roots, grads;
    const std::vector<at::Tensor>& outputs = state.values[op.output];
    for (size_t i = 0; i < outputs.size() && i < state.grad.size(); ++i) {
      if (state.grad[i].defined() && outputs[i].requires_grad()) {
        roots.push_back(outputs[i]);
        grads.push_back(state.grad[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, grads);
  }
  // The gradient at the run's start replaces the one it was given, which goes now.
  if (op.input == 0) {
    state.grad.clear();  // the batch's: in its tensors' .grad
  } else {
    state.grad = std::move(state.inputs[op.run]->grads);
    state.inputs[op.run].reset();
  }
}

StepResult ChainExecutor::RunStep(const Batch& batch, const StepOptions& options) {
  ClearGradients(model_->Parameters());
  ClearGradients(batch.inputs);
  std::unique_ptr<StepTimer> timer = MakeStepTimer(device_);
  Synchronize(device_);
  // Before the peak is reset: a reducer may re-lay its buckets here, once.
  if (options.hooks != nullptr) options.hooks->BeforeStep();
  if (options.release_cached) meter_->ReleaseCached();
  StepResult r;
  meter_->ResetPeak();
  host_pool_->ResetPeak();
  const int64_t host_baseline = host_pool_->Stats().live_bytes;
  r.baseline_bytes = meter_->Stats().live_bytes;
  stage_calls_ = 0;
  const std::vector<c10::Device> rng_devices =
      device_.is_cuda() ? std::vector<c10::Device>{device_} : std::vector<c10::Device>{};

  timer->Start();
  State state(program_);
  state.values[0] = batch.inputs;
  const size_t forward_end = program_.ForwardEnd();
  for (size_t i = 0; i < program_.ops.size(); ++i) {
    if (i == forward_end) r.activation_bytes = meter_->Stats().live_bytes - r.baseline_bytes;
    const Op& op = program_.ops[i];
    switch (op.code) {
      case OpCode::kForward:
        Forward(op, batch, options, state);
        break;
      case OpCode::kBackward:
        Backward(op, options, state);
        break;
      case OpCode::kRelease:
        state.Release(op.input);
        break;
      case OpCode::kSaveRng:
        state.snapshots[op.rng] = CaptureRng(rng_devices);
        break;
      case OpCode::kReplayRng:
        state.aside.push_back(CaptureRng(rng_devices));
        RestoreRng(*state.snapshots[op.rng]);
        break;
      case OpCode::kEndReplay:
        RestoreRng(state.aside.back());
        state.aside.pop_back();
        break;
      case OpCode::kDropRng:
        state.snapshots[op.rng].reset();
        break;
      case OpCode::kOffload: {
        at::NoGradGuard no_grad;
        const std::vector<at::Tensor>& value = state.Read(op.input);
        Transfer out = host_pool_->ToHost(value);
        state.offloaded_bytes += out.bytes;
        state.host[op.host] = std::move(out.tensors);
        state.copying_out[op.input] = std::move(out.done);
        break;
      }
      case OpCode::kFetch: {
        at::NoGradGuard no_grad;
        state.arriving[op.output] = host_pool_->ToDevice(state.host[op.host], device_);
        state.host[op.host].clear();  // the copy holds the buffer until it is done
        break;
      }
    }
  }
  // Every copy is done before the step's time stops (each value is read or released by now).
  for (int v = 0; v < program_.num_values; ++v) {
    if (state.copying_out[v] != nullptr) state.copying_out[v]->Wait();
    if (state.arriving[v].has_value()) state.arriving[v]->done->Wait();
  }
  if (options.hooks != nullptr) options.hooks->AfterStep();
  r.step_ms = timer->StopMs();

  r.loss = state.loss.item<double>();
  const MemoryStats after = meter_->Stats();
  r.peak_bytes = after.peak_bytes;
  r.peak_reserved_bytes = after.peak_reserved_bytes;
  r.recompute_forwards = stage_calls_ - program_.num_stages;
  r.host_peak_bytes = host_pool_->Stats().peak_bytes - host_baseline;
  r.offloaded_bytes = state.offloaded_bytes;
  return r;
}

absl::StatusOr<StepResult> ChainExecutor::Step(const Batch& batch, const StepOptions& options) {
  return RunTorch([&] { return RunStep(batch, options); });
}

}  // namespace ckpt
