#include "core/run/profiler.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ATen/core/grad_mode.h"
#include "ATen/ops/ones_like.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/run/checkpoint.h"
#include "core/run/device.h"
#include "core/run/graph_inputs.h"
#include "core/run/host_pool.h"
#include "core/run/op_recorders.h"
#include "core/run/profile_tensors.h"
#include "core/run/rng.h"
#include "core/run/torch_compat.h"
#include "core/run/torch_status.h"
#include "torch/csrc/autograd/autograd.h"

namespace ckpt {
namespace {

// Puts a model's state (ChainModel::State) back as it was when made, also when measuring
// throws: the profiler runs stages that update it (StageInfo::updates_state) many times.
class StateRestorer {
 public:
  StateRestorer(ChainModel& model, const std::vector<StageInfo>& stages) {
    const bool updates = std::any_of(stages.begin(), stages.end(),
                                     [](const StageInfo& s) { return s.updates_state; });
    if (!updates) return;
    at::NoGradGuard no_grad;
    state_ = model.State();
    for (const at::Tensor& t : state_) saved_.push_back(t.clone());
  }
  ~StateRestorer() {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < state_.size(); ++i) state_[i].copy_(saved_[i]);
  }

 private:
  std::vector<at::Tensor> state_, saved_;
};

// Hooks on parameters' gradients, removed when it goes out of scope (also when the backward
// pass they watch throws), so that no later backward calls them.
class ParamHooks {
 public:
  ParamHooks() = default;
  ParamHooks(const ParamHooks&) = delete;
  ParamHooks& operator=(const ParamHooks&) = delete;
  ~ParamHooks() {
    for (auto& [param, hook] : hooks_) param.remove_hook(hook);
  }
  template <typename Hook>  // a callable taking the gradient (const at::Tensor&), returning void
  void Add(const at::Tensor& param, Hook&& hook) {
    hooks_.emplace_back(param, param.register_hook(std::forward<Hook>(hook)));
  }

 private:
  std::vector<std::pair<at::Tensor, unsigned>> hooks_;
};

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
    const StateRestorer restore_state(model_, stages_);
    ModelProfile profile;
    profile.model = model_.spec();
    profile.stages = stages_;
    const Storages batch_storages(batch_.inputs);
    profile.input_bytes = batch_storages.Total();
    profile.input_storage_bytes = batch_storages.bytes;
    profile.target_bytes = BytesBeyond(batch_.targets, batch_.inputs);
    profile.param_bytes = TotalBytes(params_);
    int64_t element_bytes = 0;
    for (const at::Tensor& p : params_) {
      element_bytes = std::max<int64_t>(element_bytes, p.element_size());
    }
    if (element_bytes > 0) profile.param_element_bytes = element_bytes;
    profile.timed = options_.timed;
    if (options_.autocast) profile.autocast = c10::toString(*options_.autocast);
    profile.menu_chunks = options_.chunks;
    profile.measured.resize(stages_.size());
    ClearGradients(params_);
    if (options_.warm_up == ProfileWarmUp::kAlways || device_.is_cuda()) WarmUp();
    ComputeInputs();
    const int n = static_cast<int>(stages_.size());
    ProfileProgress progress;
    progress.phase = "measuring";
    progress.stages = n;
    for (int i = 0; i < n; ++i) {
      if (twin_[i] != i) continue;
      const int menu = static_cast<int>(PolicyMenu(stages_[i], options_.chunks).size());
      progress.measurements += menu;
      progress.work += menu * forward_ms_[i];
    }
    for (int i = 0; i < n; ++i) {
      progress.stage = i + 1;
      if (twin_[i] != i) {  // measured already, as its earlier twin
        for (const StageProfile& measured : profile.measured[twin_[i]]) {
          CopyTracesOfTwin(i, static_cast<int>(profile.measured[i].size()));
          profile.measured[i].push_back(CopyOfTwin(measured, i));
        }
      } else {
        // Said before each policy too: one stage of a full-width model can take minutes.
        for (const StagePolicy& policy : PolicyMenu(stages_[i], options_.chunks)) {
          progress.policy = DescribePolicy(stages_[i], policy);
          Report(progress);
          at_ = {i, static_cast<int>(profile.measured[i].size())};
          profile.measured[i].push_back(Measure(i, policy));
          ++progress.measurements_done;
          progress.work_done += forward_ms_[i];
        }
      }
      progress.policy.clear();
      Report(progress);
    }
    at_ = {-1, 0};
    MeasureLoss(inputs_.back(), profile.loss);
    if (options_.link_bytes_per_ms > 0) {
      profile.to_host_bytes_per_ms = profile.from_host_bytes_per_ms = options_.link_bytes_per_ms;
      profile.link_assumed = profile.copies_overlap = true;
    } else if (options_.timed) {
      MeasureCopyRates(profile);
    }
    return profile;
  }

  void Extend(const Plan& plan, ModelProfile& profile) {
    const StateRestorer restore_state(model_, stages_);
    ClearGradients(params_);
    for (size_t i = 0; i < stages_.size(); ++i) {
      const StagePolicy& policy = plan.PolicyOf(static_cast<int>(i));
      if (profile.Find(static_cast<int>(i), policy) != nullptr) continue;
      if (inputs_.empty()) ComputeInputs();
      const int twin = twin_[i];
      const StageProfile* measured = profile.Find(twin, policy);
      at_ = {static_cast<int>(i), static_cast<int>(profile.measured[i].size())};
      if (measured != nullptr) {
        CopyTracesOfTwin(at_.first, at_.second,
                         static_cast<int>(measured - profile.measured[twin].data()));
        profile.measured[i].push_back(CopyOfTwin(*measured, i));
      } else {
        profile.measured[i].push_back(Measure(i, policy));
      }
    }
  }

 private:
  // Stage i's forward, and the loss's, under the options' autocast (as a step runs them).
  std::vector<at::Tensor> Run(size_t i, const std::vector<at::Tensor>& x,
                              const StagePolicy& policy = {}) {
    const compat::ScopedAutocast autocast(compat::AutocastOn(device_.type(), options_.autocast));
    return model_.RunStage(static_cast<int>(i), x, StageParts(stages_[i], policy), batch_);
  }
  at::Tensor Loss(const std::vector<at::Tensor>& x) {
    const compat::ScopedAutocast autocast(compat::AutocastOn(device_.type(), options_.autocast));
    return model_.Loss(x, batch_);
  }

  // The input of every stage (and the last stage's output), its own parameters and its twin
  // (the first stage measured for it), from one forward of the chain. Each stage runs with a
  // graph, whose leaves are its parameters; its outputs are kept detached, the graph dropped.
  void ComputeInputs() {
    std::unordered_map<const c10::TensorImpl*, int> index;
    for (size_t k = 0; k < params_.size(); ++k) index[params_[k].unsafeGetTensorImpl()] = k;
    const int n = static_cast<int>(stages_.size());
    inputs_ = {batch_.inputs};
    stage_params_.assign(n, {});
    twin_.assign(n, 0);
    input_grad_layouts_.assign(n, {});
    std::vector<std::string> keys;        // per stage, its repeat class (empty: none)
    std::map<std::string, int> first_of;  // a repeat class -> its first stage
    at::AutoGradMode enable_grad(true);
    float32_ops_.assign(n, {});
    forward_ms_.assign(n, 0);
    ProfileProgress progress;
    progress.phase = "forward";
    progress.stages = n;
    for (int i = 0; i < n; ++i) {
      std::vector<at::Tensor> outputs;
      timer_->Start();
      if (options_.autocast) {
        std::set<std::string> ops;
        {
          const Float32OpsRecorder recorder(ops);
          outputs = Run(i, inputs_.back());
        }
        float32_ops_[i].assign(ops.begin(), ops.end());
      } else {
        outputs = Run(i, inputs_.back());
      }
      forward_ms_[i] = timer_->StopMs();
      stage_params_[i] = GraphLeaves(outputs, index);
      std::string key;
      if (options_.reuse_repeated && !stages_[i].repeat_key.empty()) {
        // Alike where the measurements could tell them apart: the code (the key), whether the
        // input is the batch (i == 0), the shapes and types of inputs and parameters, and which
        // inputs share storage, and how (and, below, how their gradients come back).
        std::vector<at::Tensor> own;
        for (const int k : stage_params_[i]) own.push_back(params_[k]);
        key = absl::StrCat(stages_[i].repeat_key, "|", i == 0, "|", ShapeKey(inputs_.back()), "|",
                           ShapeKey(own), "|", StorageLayout(inputs_.back()));
      }
      keys.push_back(key);
      // Alike stages hand their inputs' gradients back alike.
      const auto first = key.empty() ? first_of.end() : first_of.find(key);
      if (first != first_of.end()) {
        input_grad_layouts_[i] = input_grad_layouts_[first->second];
      } else {
        if (!key.empty()) first_of.emplace(key, i);
        if (i > 0) input_grad_layouts_[i] = InputGradientLayouts(i);
      }
      // Detached, a tensor returned twice staying one tensor.
      std::unordered_map<const c10::TensorImpl*, at::Tensor> detached;
      for (at::Tensor& t : outputs) {
        if (t.defined()) t = detached.emplace(t.unsafeGetTensorImpl(), t.detach()).first->second;
      }
      inputs_.push_back(std::move(outputs));
      progress.stage = i + 1;
      Report(progress);
    }
    // Twins: alike, and their outputs' gradients come back alike (the next stages' inputs').
    first_of.clear();
    for (int i = 0; i < n; ++i) {
      twin_[i] = i;
      if (keys[i].empty()) continue;
      std::string key = keys[i];
      if (i + 1 < n) {
        for (const GradLayout& g : input_grad_layouts_[i + 1]) {
          absl::StrAppend(&key, "|", g.offset, ":", absl::StrJoin(g.strides, ","), "/",
                          g.storage_numel);
        }
      }
      twin_[i] = first_of.emplace(key, i).first->second;
    }
  }

  // How stage i's backward hands back its inputs' gradients (from a fresh gradient for each of
  // its outputs), for measuring the backward of the stage before it: one forward and backward of
  // the stage, its inputs begun as a run begins (GraphInputs), the random streams as they were.
  std::vector<GradLayout> InputGradientLayouts(size_t i) {
    const std::vector<at::Tensor>& given = inputs_[i];
    const RngState rng = CaptureRng(CudaDevicesOf(given));
    auto into = c10::make_intrusive<InputGradients>();
    {
      std::vector<at::Tensor> ys = Run(i, GraphInputs(given, into));
      std::vector<at::Tensor> roots, grads;
      for (const at::Tensor& y : Distinct(ys)) {
        if (!y.defined() || !y.requires_grad()) continue;
        roots.push_back(y);
        grads.push_back(MakeGradient(y, FreshLayout(y)));
      }
      ys.clear();
      if (!roots.empty()) torch::autograd::backward(roots, grads);
    }
    RestoreRng(rng);
    ClearGradients(StageParams(i));
    std::vector<GradLayout> out(given.size());
    for (size_t k = 0; k < given.size() && k < into->grads.size(); ++k) {
      const at::Tensor& g = into->grads[k];
      if (!g.defined() || !g.has_storage() || g.sizes() != given[k].sizes()) continue;
      out[k] = {g.strides().vec(), g.storage_offset(),
                static_cast<int64_t>(g.storage().nbytes()) / g.element_size()};
    }
    return out;
  }

  // The layout of the gradient that stage i's output `k`, `y`, gets back from the next stage.
  GradLayout IncomingLayout(size_t i, size_t k, const at::Tensor& y) const {
    if (i + 1 < input_grad_layouts_.size() && k < input_grad_layouts_[i + 1].size()) {
      const GradLayout& g = input_grad_layouts_[i + 1][k];
      if (g.storage_numel > 0 && g.strides.size() == static_cast<size_t>(y.dim())) return g;
    }
    return FreshLayout(y);
  }

  // The measurement of stage `i`'s twin, as stage `i`'s: its parameters in the twin's places.
  StageProfile CopyOfTwin(const StageProfile& measured, int i) const {
    StageProfile copy = measured;
    const std::vector<int>& theirs = stage_params_[twin_[i]];
    const std::vector<int>& ours = stage_params_[i];
    for (auto& [param, bytes] : copy.param_grads) {
      const size_t at = std::lower_bound(theirs.begin(), theirs.end(), param) - theirs.begin();
      param = at < ours.size() ? ours[at] : param;
    }
    return copy;
  }

  // The peak since the meter's ResetPeak less `below`: the transient `transient` of the
  // measurement at work (at_), its candidates traced where asked.
  int64_t PeakAbove(int64_t below, Transient transient) {
    const int64_t peak = meter_.Stats().peak_bytes;
    if (options_.peaks != nullptr) {
      std::vector<int64_t> candidates = meter_.PeakCandidates();
      for (int64_t& c : candidates) c -= below;
      (*options_.peaks)[PeakKey{at_.first, at_.second, transient}] = std::move(candidates);
    }
    return peak - below;
  }
  // A transient measured as another of the same measurement, traced so.
  void SameTransient(Transient from, Transient to) {
    if (options_.peaks == nullptr) return;
    auto it = options_.peaks->find(PeakKey{at_.first, at_.second, from});
    if (it != options_.peaks->end()) {
      (*options_.peaks)[PeakKey{at_.first, at_.second, to}] = it->second;
    }
  }
  // Stage i's measurement `m` taken from its twin's measurement `twin_m`: its traces too.
  void CopyTracesOfTwin(int i, int m, int twin_m = -1) {
    if (options_.peaks == nullptr) return;
    const int from = twin_m < 0 ? m : twin_m;
    std::vector<std::pair<PeakKey, std::vector<int64_t>>> copies;
    for (const auto& [key, candidates] : *options_.peaks) {
      if (key.stage == twin_[i] && key.measurement == from) {
        copies.emplace_back(PeakKey{i, m, key.transient}, candidates);
      }
    }
    for (auto& [key, candidates] : copies) (*options_.peaks)[key] = std::move(candidates);
  }

  void Report(const ProfileProgress& progress) const {
    if (options_.progress) options_.progress(progress);
  }

  // Stage i's own parameters, whose gradients its measurements clear and read.
  std::vector<at::Tensor> StageParams(size_t i) const {
    std::vector<at::Tensor> out;
    for (const int k : stage_params_[i]) out.push_back(params_[k]);
    return out;
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
      PrepareInputs(batch_.inputs, /*batch=*/true, xs, leaves);
      for (size_t i = 0; i < stages_.size(); ++i) xs = Run(i, xs);
      at::Tensor loss = Loss(xs);
      if (loss.requires_grad()) loss.backward();
    }
    ClearGradients(params_);
    RestoreRng(rng);
    Synchronize(device_);
  }

  // Stage i's inputs for a measurement (PrepareInputs); past the batch, begun as the executor
  // begins a run at a value (GraphInputs), so that backward leaves their gradients as the
  // stage's backward makes them (a view stays a view), in the returned holder.
  c10::intrusive_ptr<InputGradients> PrepareStageInputs(size_t i, std::vector<at::Tensor>& xs,
                                                        std::vector<at::Tensor>& leaves) {
    PrepareInputs(inputs_[i], /*batch=*/i == 0, xs, leaves);
    auto into = c10::make_intrusive<InputGradients>();
    if (i > 0) {
      xs = GraphInputs(xs, into);
      leaves.clear();
    }
    return into;
  }

  // z: the sum of a GradientSource for each of stage i's outputs `ys` that needs a gradient
  // (each tensor once), laid out as the next stage hands it back (IncomingLayout);
  // `incoming_bytes`: the bytes of their storages.
  at::Tensor GradientSink(size_t i, const std::vector<at::Tensor>& ys, int64_t& incoming_bytes) {
    at::Tensor z;
    incoming_bytes = 0;
    for (size_t k = 0; k < ys.size(); ++k) {
      if (!ys[k].requires_grad() || FirstPlace(ys, k) != k) continue;
      const GradLayout layout = IncomingLayout(i, k, ys[k]);
      incoming_bytes += layout.storage_numel * static_cast<int64_t>(ys[k].element_size());
      at::Tensor term = GradientSource::apply(ys[k], layout);
      z = z.defined() ? z.add(term) : term;
    }
    return z;
  }

  StageProfile Measure(size_t i, const StagePolicy& policy) {
    StageProfile p;
    p.policy = policy;
    const std::vector<at::Tensor>& given = inputs_[i];
    p.input_bytes = TotalBytes(given);
    p.float32_ops = float32_ops_[i];
    if (stages_[i].stochastic) {
      const int64_t before = meter_.Stats().live_bytes;
      const RngState snapshot = CaptureRng(CudaDevicesOf(given));
      p.rng_state_bytes = meter_.Stats().live_bytes - before;
    }
    {  // Without grad: the transient above input and output.
      at::NoGradGuard no_grad;
      meter_.ResetPeak();
      std::vector<at::Tensor> out;
      {
        const WorkRecorder work(p.nograd_work);
        out = Run(i, given, policy);
      }
      p.nograd_transient_bytes = PeakAbove(meter_.Stats().live_bytes, Transient::kNograd);
    }
    const std::vector<at::Tensor> own = StageParams(i);
    ClearGradients(own);
    std::vector<at::Tensor> xs, leaves;
    const c10::intrusive_ptr<InputGradients> into = PrepareStageInputs(i, xs, leaves);
    const int64_t start = meter_.Stats().live_bytes;
    meter_.ResetPeak();
    std::vector<at::Tensor> ys;
    {
      const WorkRecorder work(p.forward_work);
      ys = Run(i, xs, policy);
    }
    const MemoryStats after = meter_.Stats();
    const Storages in(xs), out(ys);
    for (size_t k = 0; k < out.ids.size(); ++k) {
      p.outputs.push_back({out.bytes[k], in.Find(out.ids[k])});
      p.output_bytes += out.bytes[k];
    }
    p.retained_bytes = after.live_bytes - start - p.AllocatedOutputBytes();
    p.forward_transient_bytes = PeakAbove(after.live_bytes, Transient::kForward);

    int64_t incoming_bytes = 0;
    at::Tensor z = GradientSink(i, ys, incoming_bytes);
    // What the graph keeps: the storages that outlive the tensors. Stage 0's input is the
    // batch, which the caller holds throughout.
    if (i > 0) xs.clear();
    ys.clear();
    for (size_t k = 0; i > 0 && k < in.ids.size(); ++k) {
      if (in.Alive(k)) p.kept_inputs.push_back(static_cast<int>(k));
    }
    for (size_t k = 0; k < out.ids.size(); ++k) {
      if (p.outputs[k].input < 0 && out.Alive(k)) p.kept_outputs.push_back(static_cast<int>(k));
    }
    if (z.defined()) {
      // Each parameter's gradient as the engine hands it to the parameter's accumulator, which
      // is where a later stage's contribution would wait for it in a step's backward pass.
      auto sums_in_place = std::make_shared<std::map<int, bool>>();
      const int64_t base = meter_.Stats().live_bytes;
      {
        ParamHooks hooks;
        for (const int k : stage_params_[i]) {
          if (!params_[k].requires_grad()) continue;
          hooks.Add(params_[k], [sums_in_place, k](const at::Tensor& g) {
            (*sums_in_place)[k] = compat::kEngineSumsInPlace && g.defined() && !g.is_sparse() &&
                                  g.is_contiguous() && g.storage().use_count() == 1;
          });
        }
        meter_.ResetPeak();
        z.backward();
      }
      // Above the state at the start of the stage's backward, which already holds dL/dy (and
      // the 4-byte seed of z's backward, which the chain does not have).
      p.backward_transient_bytes =
          PeakAbove(base + incoming_bytes + static_cast<int64_t>(z.nbytes()), Transient::kBackward);
      for (const int k : stage_params_[i]) {
        if (!params_[k].grad().defined()) continue;
        p.param_grads.emplace_back(k, params_[k].grad().nbytes());
        p.param_grad_sums_in_place.push_back((*sums_in_place)[k]);
      }
      // The gradients backward leaves at the inputs: the batch's in .grad; any other's as the
      // stage's backward made them, each storage once (a view into the incoming gradient keeps
      // all of it).
      if (i == 0) {
        for (const at::Tensor& leaf : leaves) {
          p.input_grad_bytes += leaf.grad().defined() ? leaf.grad().nbytes() : 0;
        }
      } else {
        p.input_grad_bytes = TotalBytes(into->grads);
      }
      ClearGradients(own);
      z.reset();
      // Holding what the backward would not free anyway changes nothing: the batch, outputs
      // the graph does not keep.
      if (i == 0) {
        p.backward_input_held_transient_bytes = p.backward_transient_bytes;
        SameTransient(Transient::kBackward, Transient::kBackwardInputHeld);
      } else {
        p.backward_input_held_transient_bytes = MeasureBackward(i, given, policy, Held::kInputs);
      }
      if (p.kept_outputs.empty()) {
        p.backward_input_output_held_transient_bytes = p.backward_input_held_transient_bytes;
        SameTransient(Transient::kBackwardInputHeld, Transient::kBackwardInputOutputHeld);
      } else {
        p.backward_input_output_held_transient_bytes =
            MeasureBackward(i, given, policy, Held::kInputsAndOutputs);
      }
      p.backward_held_transient_bytes =
          MeasureBackward(i, given, policy, Held::kAll, &p.backward_work);
    }
    p.SetCostBytes();
    if (options_.timed) Time(i, given, policy, p.costs);
    return p;
  }

  // What the caller holds through a measured backward: the stage's inputs
  // (StageProfile::backward_input_held_transient_bytes), its inputs and outputs
  // (..._input_output_held_...), or those and the incoming gradients too (..._held_...: what
  // Checkpoint's nested backward does). Without kAll the incoming gradient goes as the engine
  // frees it, and the transient is above it, as StageProfile::backward_transient_bytes counts.
  enum class Held { kInputs, kInputsAndOutputs, kAll };
  // `work`, if given, receives the backward's work (OpWork).
  int64_t MeasureBackward(size_t i, const std::vector<at::Tensor>& given, const StagePolicy& policy,
                          Held held, OpWork* work = nullptr) {
    std::vector<at::Tensor> xs, leaves;
    const c10::intrusive_ptr<InputGradients> into = PrepareStageInputs(i, xs, leaves);
    std::vector<at::Tensor> ys = Run(i, xs, policy);
    int64_t transient = 0;
    if (held == Held::kAll) {
      std::vector<at::Tensor> roots, grads;
      for (size_t k = 0; k < ys.size(); ++k) {
        if (!ys[k].requires_grad() || FirstPlace(ys, k) != k) continue;
        roots.push_back(ys[k]);
        grads.push_back(MakeGradient(ys[k], IncomingLayout(i, k, ys[k])));
      }
      if (roots.empty()) return 0;
      const int64_t base = meter_.Stats().live_bytes;
      meter_.ResetPeak();
      {
        OpWork unused;
        const WorkRecorder recorder(work != nullptr ? *work : unused);
        torch::autograd::backward(roots, grads);
      }
      transient = PeakAbove(base, Transient::kBackwardHeld);
    } else {
      int64_t incoming_bytes = 0;
      at::Tensor z = GradientSink(i, ys, incoming_bytes);
      if (!z.defined()) return 0;
      if (held == Held::kInputs) ys.clear();
      const int64_t base = meter_.Stats().live_bytes;
      meter_.ResetPeak();
      z.backward();
      transient = PeakAbove(base + incoming_bytes + static_cast<int64_t>(z.nbytes()),
                            held == Held::kInputs ? Transient::kBackwardInputHeld
                                                  : Transient::kBackwardInputOutputHeld);
    }
    ClearGradients(StageParams(i));
    return transient;
  }

  // The offload copies' rates each way, on the largest stage boundary: copies to the host pool
  // and back repeated at least min_repeats times and until they add up to min_time_ms; medians.
  void MeasureCopyRates(ModelProfile& profile) {
    const std::vector<at::Tensor>* largest = &inputs_.front();
    for (const std::vector<at::Tensor>& x : inputs_) {
      if (TotalBytes(x) > TotalBytes(*largest)) largest = &x;
    }
    const int64_t bytes = TotalBytes(*largest);
    if (bytes == 0) return;
    HostPool& pool = **HostPoolFor(device_);
    at::NoGradGuard no_grad;
    std::vector<double> out, in;
    double total = 0;
    while (static_cast<int>(out.size()) < options_.min_repeats || total < options_.min_time_ms) {
      Synchronize(device_);
      timer_->Start();
      Transfer host = pool.ToHost(*largest);
      host.done->Wait();
      out.push_back(timer_->StopMs());
      timer_->Start();
      Transfer back = pool.ToDevice(host.tensors, device_);
      back.done->Wait();
      in.push_back(timer_->StopMs());
      total += out.back() + in.back();
    }
    profile.to_host_bytes_per_ms = bytes / std::max(Median(out), 1e-6);
    profile.from_host_bytes_per_ms = bytes / std::max(Median(in), 1e-6);
    // A GPU's copies run on a stream of their own, beside the compute (core/run/host_pool.h); a
    // CPU's are memcpys the step waits for.
    profile.copies_overlap = device_.is_cuda();
  }

  // The stage's forward with and without a graph, and its backward, each timed alone: runs of
  // the three repeated at least min_repeats times and until forward and backward add up to
  // min_time_ms; medians.
  void Time(size_t i, const std::vector<at::Tensor>& given, const StagePolicy& policy,
            StageCosts& c) {
    std::vector<double> forward, backward, nograd;
    const std::vector<at::Tensor> own = StageParams(i);
    double total = 0;
    while (static_cast<int>(forward.size()) < options_.min_repeats ||
           total < options_.min_time_ms) {
      std::vector<at::Tensor> xs, leaves;
      PrepareInputs(given, /*batch=*/i == 0, xs, leaves);
      Synchronize(device_);
      timer_->Start();
      std::vector<at::Tensor> ys = Run(i, xs, policy);
      forward.push_back(timer_->StopMs());
      std::vector<at::Tensor> roots, grads;
      for (const at::Tensor& y : Distinct(ys)) {
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
      ClearGradients(own);
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
    CountLossWork(given, p);
    std::vector<at::Tensor> xs, leaves;
    PrepareInputs(given, /*batch=*/stages_.empty(), xs, leaves);
    const int64_t start = meter_.Stats().live_bytes;
    meter_.ResetPeak();
    timer_->Start();
    at::Tensor loss = Loss(xs);
    p.forward_ms = timer_->StopMs();
    const Storages in(xs);
    const bool aliases_input =
        loss.has_storage() && in.Find(loss.storage().unsafeGetStorageImpl()) >= 0;
    p.output_bytes = aliases_input ? 0 : StorageBytes(loss);
    p.retained_bytes = meter_.Stats().live_bytes - start - p.output_bytes;
    p.forward_transient_bytes =
        PeakAbove(start + p.retained_bytes + p.output_bytes, Transient::kLossForward);
    // The input's storages its graph (or the scalar itself) keeps.
    xs.clear();
    for (size_t k = 0; !stages_.empty() && k < in.ids.size(); ++k) {
      if (in.Alive(k)) p.kept_inputs.push_back(static_cast<int>(k));
    }
    if (!loss.requires_grad()) return;
    const int64_t base = meter_.Stats().live_bytes;
    meter_.ResetPeak();
    timer_->Start();
    loss.backward();
    p.backward_ms = timer_->StopMs();
    p.backward_transient_bytes = PeakAbove(base, Transient::kLossBackward);
    // Without the release of the input storages its graph kept (the model releases boundaries
    // itself).
    int64_t released = 0;
    for (const int k : p.kept_inputs) released += in.Alive(k) ? 0 : in.bytes[k];
    p.backward_net_bytes = meter_.Stats().live_bytes - base + released;
    for (const at::Tensor& leaf : leaves) {
      p.input_grad_bytes += leaf.grad().defined() ? leaf.grad().nbytes() : 0;
    }
    ClearGradients(params_);
  }

  // The loss's work (OpWork), in a forward and backward of its own: its measured run is timed,
  // and the recorder's callbacks take time. Leaves no gradients; the random streams as they were.
  void CountLossWork(const std::vector<at::Tensor>& given, LossProfile& p) {
    const RngState rng = CaptureRng(CudaDevicesOf(given));
    {
      std::vector<at::Tensor> xs, leaves;
      PrepareInputs(given, /*batch=*/stages_.empty(), xs, leaves);
      at::Tensor loss;
      {
        const WorkRecorder work(p.forward_work);
        loss = Loss(xs);
      }
      if (loss.requires_grad()) {
        const WorkRecorder work(p.backward_work);
        loss.backward();
      }
    }
    ClearGradients(params_);
    RestoreRng(rng);
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
  std::vector<std::vector<int>> stage_params_;   // per stage, its parameters' indices
  std::vector<int> twin_;  // per stage, the stage whose measurements it takes (itself)
  // Per stage, how its backward hands back each input's gradient (InputGradientLayouts).
  std::vector<std::vector<GradLayout>> input_grad_layouts_;
  // Per stage, its first forward's time (ComputeInputs): what a measurement of it weighs in
  // ProfileProgress.
  std::vector<double> forward_ms_;
  std::vector<std::vector<std::string>> float32_ops_;  // per stage, StageProfile::float32_ops
  std::pair<int, int> at_ = {-1, 0};  // the measurement at work: (stage, index), the loss -1
};

}  // namespace

ModelProfile StructureOnlyProfile(const ChainModel& model) {
  return StructureOnlyProfile(model.spec(), model.Stages());
}

namespace {

// Turns the meter's peak tracing on for a scope where `options` asks for traces.
class PeakTracing {
 public:
  PeakTracing(MemoryMeter& meter, const ProfileOptions& options)
      : meter_(options.peaks != nullptr ? &meter : nullptr) {}
  ~PeakTracing() {
    if (meter_ != nullptr) meter_->TracePeaks(false).IgnoreError();
  }
  absl::Status Start() { return meter_ != nullptr ? meter_->TracePeaks(true) : absl::OkStatus(); }

 private:
  MemoryMeter* meter_;
};

}  // namespace

absl::StatusOr<ModelProfile> ProfileModel(ChainModel& model, const Batch& batch, MemoryMeter& meter,
                                          c10::Device device, const ProfileOptions& options) {
  PeakTracing tracing(meter, options);
  if (absl::Status started = tracing.Start(); !started.ok()) return started;
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
  PeakTracing tracing(meter, options);
  if (absl::Status started = tracing.Start(); !started.ok()) return started;
  return RunTorch([&] { Profiler(model, batch, meter, device, options).Extend(plan, profile); });
}

}  // namespace ckpt
