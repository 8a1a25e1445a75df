// The chain executor: runs one training step (forward, loss, backward) of a ChainModel under
// any valid Plan, nested checkpoints and part policies included, and measures it.
//
//   ASSIGN_OR_RETURN(ChainExecutor exec, ChainExecutor::Create(model, plan, meter, device));
//   ASSIGN_OR_RETURN(StepResult r, exec.Step(batch));   // gradients are now in .grad
//
// The plan is compiled once into its program (core/plan/schedule.h), which each step runs op by op:
// recorded runs are autograd graphs, and backward is one call per run, from the gradient the
// executor holds to the gradient at the run's start. Memory is counted by the meter of the
// model's device (memory_meter.h), an offloading plan's host copies by the host pool
// (host_pool.h), so on CPU every figure is exact. All LibTorch exceptions
// become Status here (torch_status.h): out of memory is ResourceExhausted.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "c10/core/ScalarType.h"
#include "core/plan/plan.h"
#include "core/plan/schedule.h"
#include "core/run/chain_model.h"
#include "core/run/host_pool.h"
#include "core/run/memory_meter.h"

namespace ckpt {

// What a caller runs around one step's forward and backward, inside the step's time and its
// exception boundary: the runtime's one opening for what sits above it (data parallelism's
// GradientReducer, core/dist/data_parallel.h, averages the gradients through it). Both may
// throw LibTorch's exceptions, which the step turns into its error.
class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // Before the step's peak is reset and its clock starts: what it allocates here (a reducer
  // laying out its buckets) is part of the baseline.
  virtual void BeforeStep() = 0;
  // After backward and every host copy, before the clock stops.
  virtual void AfterStep() = 0;
};

struct StepResult {
  double loss = 0;
  int64_t baseline_bytes = 0;    // live before forward: parameters, batch, kept gradients
  int64_t activation_bytes = 0;  // live after forward and loss, minus baseline
  int64_t peak_bytes = 0;        // highest live bytes during the step (absolute)
  // Highest bytes the allocator held from the system during the step: its reserved bytes,
  // cached free blocks included, also those that earlier steps left cached unless
  // StepOptions::release_cached.
  int64_t peak_reserved_bytes = 0;
  // Stage forwards run during backward: every stage call beyond the forward pass's one per
  // stage. store_all: 0; uniform: the stages of its checkpointed segments.
  int64_t recompute_forwards = 0;
  // Offloading plans (core/run/host_pool.h): the most bytes the host pool held during the step,
  // and the bytes copied to it (as many come back).
  int64_t host_peak_bytes = 0;
  int64_t offloaded_bytes = 0;
  double step_ms = 0;  // forward + loss + backward
};

struct StepOptions {
  // Backpropagate loss x loss_scale (dynamic loss scaling for float16); the reported loss is
  // unscaled.
  double loss_scale = 1.0;
  // Run the forward (and every recomputation of it) under autocast to this dtype on the
  // executor's device: bfloat16 on CPU, float16 on CUDA. Backward runs outside autocast.
  std::optional<c10::ScalarType> autocast;
  // Hand the allocator's cached free blocks back before the step (MemoryMeter::ReleaseCached),
  // so that peak_reserved_bytes is what this step alone makes the allocator hold, not what
  // earlier steps (other plans, other models) left cached. On CUDA the step then allocates
  // from the driver, which its time includes: meant for untimed steps.
  bool release_cached = false;
  // Run around the step (StepHooks); data parallel passes the reducer of this plan's
  // parameters, so the gradients the step leaves are the mean of every rank's. Its
  // communication is part of step_ms; its buckets are part of the baseline.
  StepHooks* hooks = nullptr;
};

class ChainExecutor {
 public:
  // Compiles `plan`, which must be valid for the model's stages (ValidatePlan). `meter` must
  // outlive the executor.
  static absl::StatusOr<ChainExecutor> Create(std::shared_ptr<ChainModel> model, Plan plan,
                                              MemoryMeter* meter, c10::Device device);

  // Sets every parameter's and input's gradient to none, then runs forward under the plan, the
  // loss and backward, leaving the gradients in .grad (the batch's floating inputs' too). The
  // model's training mode is the caller's choice.
  absl::StatusOr<StepResult> Step(const Batch& batch, const StepOptions& options = {});

  const Plan& plan() const { return plan_; }
  const Program& program() const { return program_; }

 private:
  struct State;  // one step's values, gradients and RNG snapshots

  ChainExecutor(std::shared_ptr<ChainModel> model, Plan plan, MemoryMeter* meter,
                HostPool* host_pool, c10::Device device);
  StepResult RunStep(const Batch& batch, const StepOptions& options);  // throws
  void Forward(const Op& op, const Batch& batch, const StepOptions& options, State& state);
  void Backward(const Op& op, const StepOptions& options, State& state);
  std::vector<at::Tensor> RunStage(int i, const std::vector<at::Tensor>& x, const Batch& batch);

  std::shared_ptr<ChainModel> model_;
  Plan plan_;
  Program program_;
  std::vector<StageParts> parts_;  // per stage, with the plan's policy
  MemoryMeter* meter_;
  HostPool* host_pool_;
  c10::Device device_;
  int64_t stage_calls_ = 0;  // stage forwards since the step began
};

}  // namespace ckpt
