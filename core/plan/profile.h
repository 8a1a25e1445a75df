// What a strategy sees of a model: its stages, and what each stage costs under each policy it
// offers, measured once (core/run/profiler.h). Needs no LibTorch, so strategies and their tests
// are pure functions over these types.
//
// Two views of one measurement per (stage, policy):
//   StageCosts   what a planner reads: Rotor's chain quantities (Beaumont et al., "Optimal
//                checkpointing for heterogeneous chains") and the stage's times;
//   StageProfile the memory model's detailed trace (core/plan/memory_model.h), from which it
//                predicts any plan's activation and peak bytes exactly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan/plan.h"
#include "core/plan/stage.h"

namespace ckpt {

// The work of one pass of a stage (or the loss), counted operator by operator as it ran: what a
// device model prices (core/plan/device_model.h). Counts, so they extrapolate as bytes do.
struct OpWork {
  int64_t matmul_flops = 0;  // of matrix products and convolutions (2 per multiply-add)
  // Bytes read and written by the operators the stage's code called (their tensor inputs and
  // outputs; views none), matrix products included.
  int64_t bytes = 0;
  int64_t ops = 0;  // those operators, each a kernel's fixed cost
};

// One stage under one policy, as a planner needs it. Bytes are tensor bytes; times are
// medians of repeated runs on the run's device.
struct StageCosts {
  double forward_ms = 0;         // forward with autograd recording
  double nograd_forward_ms = 0;  // forward without (a checkpointed segment's first pass)
  double backward_ms = 0;        // backward through the recorded graph
  int64_t input_bytes = 0;       // x: the storages of the tensors the stage takes
  int64_t output_bytes = 0;      // those of the tensors it returns (the next stage's x)
  // x-bar: what running it with a graph adds until its backward: what the graph keeps besides
  // its input, and the output storages it allocates.
  int64_t kept_bytes = 0;
  int64_t forward_transient_bytes = 0;   // tmp_f: the forward's peak above input + kept
  int64_t nograd_transient_bytes = 0;    // the same without a graph, above input + output
  int64_t backward_transient_bytes = 0;  // tmp_b: the backward's peak above its start
  int64_t param_grad_bytes = 0;          // the parameter gradients its backward creates
};

// Memory is counted in storages, as the allocator sees it: the tensors at a stage boundary name
// storages, several tensors may name one (a tensor returned twice, a view and its base), a view
// keeps all of its base's storage alive (x[:, :0] too), and a stage's output may name its
// input's (the input returned, nn.Flatten, x.t()). A boundary's storages are listed in the
// order its tensors first name them.
struct BoundaryStorage {
  int64_t bytes = 0;
  int input = -1;  // the index of the stage's input storage it is; -1: the stage allocated it
};

// One stage under one policy, as the memory model needs it: measured in isolation but as the
// stage sits in the chain, on the input the chain gives it (its tensors sharing storages as
// they do there), with its input and output tensors owned by the caller as the executor owns
// them.
struct StageProfile {
  StagePolicy policy;
  int64_t input_bytes = 0;   // the storages of the tensors it takes (the previous stage's)
  int64_t output_bytes = 0;  // the storages of the tensors it returns, its input's included
  // Each storage its outputs name. Empty (a hand-made profile): one of output_bytes, allocated.
  std::vector<BoundaryStorage> outputs;
  int64_t retained_bytes = 0;  // what its graph keeps besides its input and output storages
  // The storages its graph keeps alive until its backward: of its input (their indices) and of
  // those it allocated for its output (indices into OutputStorages()).
  std::vector<int> kept_inputs;
  std::vector<int> kept_outputs;
  int64_t forward_transient_bytes = 0;  // forward peak above (input + retained + output)
  int64_t nograd_transient_bytes = 0;   // same without grad, above (input + output)
  // The gradients its backward creates: (index in ChainModel::Parameters(), bytes). A
  // parameter used by several stages (a tied embedding) is listed by each.
  std::vector<std::pair<int, int64_t>> param_grads;
  // Aligned with param_grads: whether the autograd engine adds a later stage's contribution to
  // that parameter into this one in place, when this one is the first to arrive in a backward
  // pass (compat::kEngineSumsInPlace: LibTorch 2.0 on, a contiguous gradient sharing its
  // storage with nothing, such as autocast's cast of a weight's gradient back to float32).
  // Otherwise the sum is a new tensor. Missing entries (a hand-made profile) read false.
  std::vector<bool> param_grad_sums_in_place;
  bool SumsInPlace(size_t k) const {
    return k < param_grad_sums_in_place.size() && param_grad_sums_in_place[k];
  }
  // The bytes alive beside gradient k while the engine sums a later stage's contribution of the
  // same bytes into it (gradient k arriving first): the fresh one alone where it adds in place,
  // else the fresh one and the new sum (core/plan/memory_model.cc says when).
  int64_t SumBytes(size_t k) const {
    return SumsInPlace(k) ? param_grads[k].second : 2 * param_grads[k].second;
  }
  // The storages of the gradient it passes to its input, each once: a view into the incoming
  // gradient keeps all of that (the batch's: what its .grad holds).
  int64_t input_grad_bytes = 0;
  int64_t backward_transient_bytes = 0;  // backward peak above its start (graph + grad in)
  // The same when its input stays referenced for the whole backward, as when it is the first
  // stage of a run the executor starts at a value it holds (what its graph saves of the input is
  // then not freed in the backward).
  int64_t backward_input_held_transient_bytes = 0;
  // The same when its inputs and outputs stay referenced for the whole backward and the
  // incoming gradient goes as the engine frees it: a later stage passes an output it keeps on
  // unchanged into a value the executor holds (a ResNet block's output carried past the next
  // block for its skip), while the previous stage keeps its input (a ReLU's output). Where the
  // input is not held, an upper bound.
  int64_t backward_input_output_held_transient_bytes = 0;
  // The same when its input, output and incoming gradient stay referenced for the whole
  // backward, as when a checkpoint reruns it and backpropagates from its outputs.
  int64_t backward_held_transient_bytes = 0;
  int64_t rng_state_bytes = 0;  // a checkpoint's RNG snapshot, for stochastic stages
  // Under autocast (ModelProfile::autocast): the operators its code calls that computed a new
  // float32 tensor from floating-point inputs ("layer_norm", "softmax", "add"; not views,
  // copies or what they call in turn), sorted, each once. What autocast lowers (matrix
  // products) is absent; what it left in float32 is here, and what those save for backward is
  // float32 in the bytes above. Empty without autocast.
  std::vector<std::string> float32_ops;
  // The work of its forward with a graph, without one, and of its backward.
  OpWork forward_work, nograd_work, backward_work;
  StageCosts costs;  // the planner's view, with the measured times

  // `outputs`, or for a hand-made profile the one storage it implies.
  std::vector<BoundaryStorage> OutputStorages() const;
  // The bytes of the output storages it allocates (not its input's).
  int64_t AllocatedOutputBytes() const;
  // `costs` with its bytes as the fields above say (its times as they are).
  void SetCostBytes();
};

// The loss, profiled like a stage (its input is the last stage's output).
struct LossProfile {
  int64_t retained_bytes = 0;    // besides its input and the scalar
  std::vector<int> kept_inputs;  // its input's storages its graph (or the scalar) keeps
  int64_t output_bytes = 0;      // the scalar, unless it is its input's
  // Its forward's peak above (input + retained + output): what it frees before it ends (under
  // autocast, the float32 copy of bfloat16 logits a log-softmax reads).
  int64_t forward_transient_bytes = 0;
  int64_t backward_transient_bytes = 0;  // above its start; includes the input's gradient
  // Live bytes after its backward minus before: its input's gradient and the seed gradient
  // LibTorch allocates, less what its graph retained.
  int64_t backward_net_bytes = 0;
  int64_t input_grad_bytes = 0;
  double forward_ms = 0;
  double backward_ms = 0;
  OpWork forward_work, backward_work;
};

struct ModelProfile {
  std::string model;  // canonical model spec
  std::vector<StageInfo> stages;
  // Per stage, one entry per measured policy; the first is every part stored.
  std::vector<std::vector<StageProfile>> measured;
  LossProfile loss;
  int64_t input_bytes = 0;  // bytes of the chain's inputs (the batch holds them)
  // Each storage the chain's inputs name (the caller's: in the baseline). Empty (a hand-made
  // profile): one of input_bytes.
  std::vector<int64_t> input_storage_bytes;
  int64_t target_bytes = 0;         // bytes of the batch's targets, less storage its inputs share
  int64_t param_bytes = 0;          // bytes of the model's parameters
  int64_t param_element_bytes = 4;  // bytes of one element of a parameter (the largest kind)
  bool timed = false;               // whether the times were measured (or are zeros)
  // Where the bytes were extrapolated from samples at smaller sizes (core/plan/extrapolate.h),
  // the samples ("seq=8..20 in steps of 4"), and the times scaled, not measured; empty where the
  // profile was measured at its own size.
  std::string extrapolated;
  // The autocast dtype the stages and the loss ran under ("BFloat16", "Half"), empty for none
  // (ProfileOptions::autocast). Steps it predicts must run under the same.
  std::string autocast;
  int menu_chunks = 4;  // the chunk count of the chunking policies in the stages' menus
  // Offload copies between the device and the host pool (core/run/host_pool.h), in bytes per ms
  // each way: measured by the profiler (timed) on the largest stage boundary, or assumed (a link
  // the run does not have, as --link_bandwidth sets: then `link_assumed`). 0: unknown.
  double to_host_bytes_per_ms = 0;
  double from_host_bytes_per_ms = 0;
  bool link_assumed = false;
  // Whether a copy runs beside the compute (a GPU's copy stream, or an assumed link), so that
  // the time model charges only what the compute running meanwhile does not hide; false: the
  // copy is part of the step's own work (a CPU's memcpy), charged in full.
  bool copies_overlap = false;
  // Gradients sharded across data-parallel ranks (RankProfile, core/plan/states.h): parameter
  // index -> the bytes of its gradient a rank keeps once the backward of a stage that made it
  // ends (its shard; the whole gradient lives during that backward, as measured). A parameter
  // absent keeps all of it.
  std::map<int, int64_t> kept_gradient_bytes;

  int num_stages() const { return static_cast<int>(stages.size()); }
  // Stage `stage` under `policy`, or nullptr when that policy was not measured.
  const StageProfile* Find(int stage, const StagePolicy& policy) const;
  // Each stage under the policy `plan` gives it; FailedPrecondition naming the first stage
  // measured under no such policy.
  absl::StatusOr<std::vector<const StageProfile*>> MeasuredUnder(const Plan& plan) const;
  // Stage `stage` with every part stored (always measured).
  const StageProfile& Stored(int stage) const { return measured[stage].front(); }
};

// The profile of model `model`, whose stages are `stages`, from `shallow`: the profile of a
// shallower instance of the same model (fewer repeated stages, built and measured for what the
// deep one would cost: a 7B model's profile from two of its blocks). Each stage takes the
// measurements of the shallow stage of its name; else, with a repeat key (StageInfo::repeat_key:
// same code, same shapes), of the shallow model's last stage of that key other than its first
// stage (whose input is the batch); else of the one as far from the end (a head named by its
// index). A shallow stage's first taker keeps its parameters' indices; every further one gets
// fresh indices after the shallow model's, as a model of that depth would number its own
// parameters, and adds their bytes to param_bytes.
// InvalidArgument naming the stage when one has no counterpart, or one that differs from it
// in kind, parts or FLOPs (then the shallow model is not a shallower copy). `counterparts`, if
// given, receives each stage's shallow stage.
absl::StatusOr<ModelProfile> ExpandProfile(const ModelProfile& shallow, std::string model,
                                           const std::vector<StageInfo>& stages,
                                           std::vector<int>* counterparts = nullptr);

// A profile of the stages' structure alone (every byte and time zero): enough for strategies
// that plan from the chain's structure, without running anything.
ModelProfile StructureOnlyProfile(std::string model, const std::vector<StageInfo>& stages);

}  // namespace ckpt
