#include "core/run/profiler.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ATen/core/grad_mode.h"
#include "ATen/ops/empty.h"
#include "ATen/ops/ones_like.h"
#include "ATen/ops/zeros.h"
#include "ATen/record_function.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/run/checkpoint.h"
#include "core/run/device.h"
#include "core/run/graph_inputs.h"
#include "core/run/host_pool.h"
#include "core/run/rng.h"
#include "core/run/torch_compat.h"
#include "core/run/torch_status.h"
#include "torch/csrc/autograd/autograd.h"
#include "torch/csrc/autograd/custom_function.h"
#include "torch/csrc/autograd/function.h"
#include "torch/csrc/autograd/functions/accumulate_grad.h"

namespace ckpt {
namespace {

// Bytes of the storage behind a tensor: a view (a reduction's scalar can be one) keeps all
// of it alive.
int64_t StorageBytes(const at::Tensor& t) {
  return t.defined() && t.has_storage() ? static_cast<int64_t>(t.storage().nbytes()) : 0;
}

// The storages some tensors name, each once, in the order they first name them (a boundary's,
// as core/plan/profile.h lists them), with a weak reference to each that tells when it is freed.
struct Storages {
  explicit Storages(const std::vector<at::Tensor>& tensors) {
    for (const at::Tensor& t : tensors) {
      if (!t.defined() || !t.has_storage()) continue;
      const c10::StorageImpl* id = t.storage().unsafeGetStorageImpl();
      if (Find(id) >= 0) continue;
      ids.push_back(id);
      bytes.push_back(static_cast<int64_t>(t.storage().nbytes()));
      weak.push_back(t.storage().getWeakStorageImpl());
    }
  }
  // The index of storage `id`, or -1.
  int Find(const c10::StorageImpl* id) const {
    const auto at = std::find(ids.begin(), ids.end(), id);
    return at == ids.end() ? -1 : static_cast<int>(at - ids.begin());
  }
  bool Alive(size_t k) const { return !weak[k].expired(); }
  int64_t Total() const {
    int64_t n = 0;
    for (const int64_t b : bytes) n += b;
    return n;
  }

  std::vector<const c10::StorageImpl*> ids;  // compared only while the storages live
  std::vector<int64_t> bytes;
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> weak;
};

int64_t TotalBytes(const std::vector<at::Tensor>& tensors) { return Storages(tensors).Total(); }

// The first place in `tensors` of the tensor at place k.
size_t FirstPlace(const std::vector<at::Tensor>& tensors, size_t k) {
  size_t first = 0;
  while (first < k && !tensors[first].is_same(tensors[k])) ++first;
  return first;
}

// `tensors` with each tensor once: a stage's outputs as the next stage's backward hands their
// gradients on (a tensor returned twice gets its two contributions summed first).
std::vector<at::Tensor> Distinct(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (size_t k = 0; k < tensors.size(); ++k) {
    if (FirstPlace(tensors, k) == k) out.push_back(tensors[k]);
  }
  return out;
}

// How a gradient is laid out in its storage: the next stage's backward may hand a stage's
// output its gradient as a view (a concatenation's backward hands back slices of one gradient,
// a permute's a permuted one), and the stage's backward then reads it so (a convolution copies
// it contiguous) and keeps that storage alive.
struct GradLayout {
  std::vector<int64_t> strides;
  int64_t offset = 0;
  int64_t storage_numel = 0;
};

// As at::randn_like lays out a gradient for `y`: its strides where it is dense, else contiguous.
GradLayout FreshLayout(const at::Tensor& y) {
  if (y.is_non_overlapping_and_dense()) return {y.strides().vec(), 0, y.numel()};
  std::vector<int64_t> strides(y.dim(), 1);
  for (int64_t d = y.dim() - 1; d > 0; --d)
    strides[d - 1] = strides[d] * std::max<int64_t>(y.size(d), 1);
  return {strides, 0, y.numel()};
}

// A gradient of `sizes` laid out as `layout`, its storage fresh, random.
at::Tensor MakeGradient(at::IntArrayRef sizes, const at::TensorOptions& options,
                        const GradLayout& layout) {
  return at::empty({layout.storage_numel}, options.requires_grad(false))
      .normal_()
      .as_strided(sizes, layout.strides, layout.offset);
}
at::Tensor MakeGradient(const at::Tensor& y, const GradLayout& layout) {
  return MakeGradient(y.sizes(), y.options(), layout);
}

// z = GradientSource(y, layout), a 0-dim zero, whose backward makes y's gradient afresh, laid
// out as the next stage's backward would hand it: summed over a stage's outputs, z.backward()
// runs the stage's backward as the chain does, with the incoming gradient freed once the stage
// no longer needs it.
struct GradientSource : torch::autograd::Function<GradientSource> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y,
                            const GradLayout& layout) {
    ctx->saved_data["like"] = at::empty({0}, y.options().requires_grad(false));
    ctx->saved_data["sizes"] = y.sizes().vec();
    ctx->saved_data["strides"] = layout.strides;
    ctx->saved_data["offset"] = layout.offset;
    ctx->saved_data["numel"] = layout.storage_numel;
    return at::zeros({}, y.options().requires_grad(false));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list) {
    const GradLayout layout{ctx->saved_data["strides"].toIntVector(),
                            ctx->saved_data["offset"].toInt(), ctx->saved_data["numel"].toInt()};
    return {MakeGradient(ctx->saved_data["sizes"].toIntVector(),
                         ctx->saved_data["like"].toTensor().options(), layout),
            at::Tensor()};
  }
};

// Bytes of the storages behind `tensors` that none of `besides` (nor an earlier one of
// `tensors`) shares: a target that is a view of an input costs nothing more.
int64_t BytesBeyond(const std::vector<at::Tensor>& tensors,
                    const std::vector<at::Tensor>& besides) {
  std::unordered_set<const void*> seen;
  for (const at::Tensor& t : besides) {
    if (t.defined() && t.has_storage()) seen.insert(t.storage().unsafeGetStorageImpl());
  }
  int64_t n = 0;
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.has_storage() && seen.insert(t.storage().unsafeGetStorageImpl()).second) {
      n += StorageBytes(t);
    }
  }
  return n;
}

// The parameters (indices by their TensorImpl) whose gradients a backward through `outputs`
// would accumulate: the AccumulateGrad leaves of their graph, in index order.
std::vector<int> GraphLeaves(const std::vector<at::Tensor>& outputs,
                             const std::unordered_map<const c10::TensorImpl*, int>& index) {
  std::set<int> found;
  std::vector<torch::autograd::Node*> stack;
  std::unordered_set<torch::autograd::Node*> seen;
  auto visit_leaf = [&](const at::Tensor& t) {
    auto it = index.find(t.unsafeGetTensorImpl());
    if (it != index.end()) found.insert(it->second);
  };
  for (const at::Tensor& t : outputs) {
    if (!t.defined() || !t.requires_grad()) continue;
    if (t.grad_fn() == nullptr) {
      visit_leaf(t);  // the stage returns a parameter itself
    } else if (seen.insert(t.grad_fn().get()).second) {
      stack.push_back(t.grad_fn().get());
    }
  }
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    for (const torch::autograd::Edge& edge : node->next_edges()) {
      torch::autograd::Node* next = edge.function.get();
      if (next == nullptr || !seen.insert(next).second) continue;
      if (auto* leaf = dynamic_cast<torch::autograd::AccumulateGrad*>(next)) {
        visit_leaf(leaf->variable);
      } else {
        stack.push_back(next);
      }
    }
  }
  return std::vector<int>(found.begin(), found.end());
}

// Shapes and types of `tensors`, for comparing stages.
std::string ShapesOf(const std::vector<at::Tensor>& tensors) {
  std::string out;
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) {
      out += "undefined;";
      continue;
    }
    out += std::string(t.dtype().name());
    for (const int64_t d : t.sizes()) out += absl::StrCat(",", d);
    out += absl::StrCat(t.requires_grad() ? "g" : "", ";");
  }
  return out;
}

// Which storage each of `tensors` names (its index among them) and where in it: tensors alike in
// shape may still share storage differently (a tensor returned twice, a view beside its base).
std::string StorageLayout(const std::vector<at::Tensor>& tensors) {
  const Storages storages(tensors);
  std::string out;
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || !t.has_storage()) {
      out += "-;";
      continue;
    }
    absl::StrAppend(&out, storages.Find(t.storage().unsafeGetStorageImpl()), "@",
                    t.storage_offset(), ":", absl::StrJoin(t.strides(), ","), ";");
  }
  return out;
}

// The operators a stage's code calls (not those they call in turn) that compute a float32
// tensor from floating-point inputs, on this thread while a Float32OpsRecorder lives.
// RecordFunction's callbacks are plain functions, so they write here.
thread_local std::set<std::string>* float32_ops_sink = nullptr;
thread_local int op_depth = 0;  // operators entered and not left

// The storages of an operator's floating-point inputs, read as it is entered: at its end they
// may be gone (the TorchScript interpreter hands RecordFunction its stack, which the operator's
// outputs then replace).
struct OpInputs : at::ObserverContext {
  std::unordered_set<const void*> storages;
};

std::unique_ptr<at::ObserverContext> EnterOp(const at::RecordFunction& fn) {
  if (++op_depth != 1 || float32_ops_sink == nullptr) return nullptr;
  auto inputs = std::make_unique<OpInputs>();
  for (const c10::IValue& value : fn.inputs()) {
    if (!value.isTensor()) continue;
    const at::Tensor& t = value.toTensor();
    if (t.defined() && t.is_floating_point() && t.has_storage()) {
      inputs->storages.insert(t.storage().unsafeGetStorageImpl());
    }
  }
  return inputs;
}

// Whether `fn`, an operator the stage's code called, computed a float32 tensor: a new one (not
// a view or an input written in place) from floating-point inputs (`inputs`), by more than a
// copy.
bool ComputesFloat32(const at::RecordFunction& fn, const std::unordered_set<const void*>& inputs) {
  absl::string_view name = fn.name();
  absl::ConsumePrefix(&name, "aten::");
  for (const char* moves : {"to", "_to_copy", "copy_", "clone", "contiguous", "type_as"}) {
    if (name == moves) return false;
  }
  if (inputs.empty()) return false;  // a factory, or integer work
  for (const c10::IValue& value : fn.outputs()) {
    if (!value.isTensor()) continue;
    const at::Tensor& t = value.toTensor();
    if (t.defined() && t.scalar_type() == at::kFloat && t.has_storage() &&
        !inputs.count(t.storage().unsafeGetStorageImpl())) {
      return true;
    }
  }
  return false;
}

void LeaveOp(const at::RecordFunction& fn, at::ObserverContext* entered) {
  if (--op_depth == 0 && float32_ops_sink != nullptr && entered != nullptr &&
      ComputesFloat32(fn, static_cast<OpInputs*>(entered)->storages)) {
    absl::string_view name = fn.name();
    absl::ConsumePrefix(&name, "aten::");
    float32_ops_sink->emplace(name);
  }
}

// Installs, for its lifetime, `enter` and `leave` as RecordFunction callbacks on the operators
// this thread runs (with their inputs and outputs), pointing `slot` at `sink`: callbacks are
// plain functions, so they write through such a thread-local slot and count their depth in
// `depth`.
template <typename Sink>
class OpRecorder {
 public:
  using Enter = std::unique_ptr<at::ObserverContext> (*)(const at::RecordFunction&);
  using Leave = void (*)(const at::RecordFunction&, at::ObserverContext*);
  OpRecorder(Sink& sink, Sink*& slot, int& depth, Enter enter, Leave leave)
      : slot_(slot),
        handle_(at::addThreadLocalCallback(at::RecordFunctionCallback(enter, leave)
                                               .needsInputs(true)
                                               .needsOutputs(true)
                                               .scopes({at::RecordScope::FUNCTION}))) {
    slot_ = &sink;
    depth = 0;
  }
  ~OpRecorder() {
    slot_ = nullptr;
    at::removeCallback(handle_);
  }
  OpRecorder(const OpRecorder&) = delete;
  OpRecorder& operator=(const OpRecorder&) = delete;

 private:
  Sink*& slot_;
  at::CallbackHandle handle_;
};

// Records, for its lifetime, the operators of StageProfile::float32_ops that this thread runs.
struct Float32OpsRecorder : OpRecorder<std::set<std::string>> {
  explicit Float32OpsRecorder(std::set<std::string>& sink)
      : OpRecorder(sink, float32_ops_sink, op_depth, &EnterOp, &LeaveOp) {}
};

// The work of what this thread runs while a WorkRecorder lives (OpWork): FLOPs of the matrix
// products and convolutions at any depth (what they call in turn is no product of these names),
// and the bytes and count of the operators the code called (depth 1), views apart. Read from
// inputs as an operator is entered: at its end the TorchScript interpreter's stack holds its
// outputs in their place (as OpInputs says).
thread_local OpWork* work_sink = nullptr;
thread_local int work_depth = 0;

int64_t Numel(const c10::IValue& v) { return v.isTensor() ? v.toTensor().numel() : 0; }
int64_t Size(const c10::IValue& v, int64_t dim) {
  if (!v.isTensor() || v.toTensor().dim() <= dim) return 0;
  return v.toTensor().size(dim);
}
// Products per element of a convolution's output: a weight [out, in / groups, k...] at in[k].
template <typename Values>  // the inputs RecordFunction hands over (their type varies by version)
int64_t ProductsPerOutput(const Values& in, size_t k) {
  if (in.size() <= k || !in[k].isTensor() || in[k].toTensor().dim() == 0) return 0;
  const at::Tensor& w = in[k].toTensor();
  return w.numel() / std::max<int64_t>(w.size(0), 1);
}

struct OpEntered : at::ObserverContext {
  // The autograd engine's record of a node's backward ("autograd::engine::evaluate_function:
  // MmBackward0"), around the operators the node calls: no operator, and no level of depth.
  bool engine = false;
  int depth = 0;
  int64_t flops = 0;       // known on entry (a product, a convolution's backward per gradient)
  int64_t per_output = 0;  // a convolution's: FLOPs are 2 x this x its output's elements
  bool conv_backward = false;
  std::unordered_set<const void*> storages;  // of its tensor inputs (depth 1)
  int64_t bytes = 0;                         // of its tensor inputs (depth 1)
};

// The bytes of the tensors `value` holds (a tensor, or a list of them), and their storages.
int64_t TensorBytes(const c10::IValue& value, std::unordered_set<const void*>* storages) {
  std::vector<at::Tensor> tensors;
  if (value.isTensor()) tensors.push_back(value.toTensor());
  if (value.isTensorList()) tensors = value.toTensorVector();
  int64_t bytes = 0;
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) continue;
    bytes += static_cast<int64_t>(t.nbytes());
    if (storages != nullptr && t.has_storage())
      storages->insert(t.storage().unsafeGetStorageImpl());
  }
  return bytes;
}

std::unique_ptr<at::ObserverContext> EnterWork(const at::RecordFunction& fn) {
  absl::string_view name = fn.name();
  if (absl::StartsWith(name, "autograd::engine::")) {
    auto engine = std::make_unique<OpEntered>();
    engine->engine = true;
    return engine;
  }
  const int depth = ++work_depth;
  if (work_sink == nullptr) return nullptr;
  absl::ConsumePrefix(&name, "aten::");
  const auto in = fn.inputs();
  auto entered = std::make_unique<OpEntered>();
  entered->depth = depth;
  if (name == "mm" && in.size() >= 2) entered->flops = 2 * Numel(in[0]) * Size(in[1], 1);
  if (name == "addmm" && in.size() >= 3) entered->flops = 2 * Numel(in[1]) * Size(in[2], 1);
  if (name == "bmm" && in.size() >= 2) entered->flops = 2 * Numel(in[0]) * Size(in[1], 2);
  if (name == "baddbmm" && in.size() >= 3) entered->flops = 2 * Numel(in[1]) * Size(in[2], 2);
  if (name == "convolution") entered->per_output = ProductsPerOutput(in, 1);
  if (name == "convolution_backward" && !in.empty()) {
    // Each gradient it makes (the input's, the weight's) is as many products as the forward,
    // whose output is the incoming gradient, in[0].
    entered->flops = 2 * Numel(in[0]) * ProductsPerOutput(in, 2);
    entered->conv_backward = true;
  }
  if (depth != 1) return entered;
  for (const c10::IValue& value : in) entered->bytes += TensorBytes(value, &entered->storages);
  return entered;
}

void LeaveWork(const at::RecordFunction& fn, at::ObserverContext* context) {
  const auto* entered = static_cast<OpEntered*>(context);
  if (entered != nullptr && entered->engine) return;
  --work_depth;
  if (work_sink == nullptr || entered == nullptr) return;
  const auto& out = fn.outputs();
  if (entered->conv_backward) {
    for (size_t k = 0; k < 2 && k < out.size(); ++k) {
      if (out[k].isTensor() && out[k].toTensor().defined())
        work_sink->matmul_flops += entered->flops;
    }
  } else {
    work_sink->matmul_flops += entered->flops;
    if (entered->per_output > 0 && !out.empty()) {
      work_sink->matmul_flops += 2 * Numel(out[0]) * entered->per_output;
    }
  }
  if (entered->depth != 1) return;
  absl::string_view name = fn.name();
  int64_t written = 0;
  bool view = !absl::EndsWith(name, "_");  // an in-place operator writes what it names
  for (const c10::IValue& value : out) {
    std::unordered_set<const void*> storages;
    written += TensorBytes(value, &storages);
    for (const void* s : storages) view = view && entered->storages.count(s) > 0;
  }
  if (view && written > 0) return;  // a view of an input: nothing moved
  work_sink->bytes += entered->bytes + written;
  ++work_sink->ops;
}

// Records, for its lifetime, the work this thread runs into `sink` (added to it).
struct WorkRecorder : OpRecorder<OpWork> {
  explicit WorkRecorder(OpWork& sink)
      : OpRecorder(sink, work_sink, work_depth, &EnterWork, &LeaveWork) {}
};

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
        key = absl::StrCat(stages_[i].repeat_key, "|", i == 0, "|", ShapesOf(inputs_.back()), "|",
                           ShapesOf(own), "|", StorageLayout(inputs_.back()));
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

  // Inputs as the chain has them, each a fresh tensor, so that dropping it frees it unless the
  // stage keeps it: a floating input that needs a gradient a non-leaf one, whose gradient lands
  // in `leaves`; any other a copy, but for the batch's own (`batch`), which the step holds
  // throughout. A stage's floating input needs a gradient where it is the batch's and requires
  // one, and wherever it comes from a stage: the executor's checkpoints make their floating
  // outputs differentiable, whatever their inputs (core/run/checkpoint.h). (Where no stage
  // before has parameters and the batch needs no gradient, a stored stage's input does not need
  // one in a step, and what it saves for one is predicted too high: docs/torchscript.md.)
  // Tensors that share a storage in `given` (one tensor twice, a view beside its base) share one
  // in `xs` too, each the same view of it: the storage is copied whole, as a leaf where one of
  // them needs a gradient.
  void PrepareInputs(const std::vector<at::Tensor>& given, bool batch, std::vector<at::Tensor>& xs,
                     std::vector<at::Tensor>& leaves) {
    // Per storage, the distinct tensors that name it.
    std::unordered_map<const c10::StorageImpl*, std::vector<const at::Tensor*>> sharing;
    for (const at::Tensor& t : given) {
      if (!t.defined() || !t.has_storage()) continue;
      std::vector<const at::Tensor*>& group = sharing[t.storage().unsafeGetStorageImpl()];
      if (std::none_of(group.begin(), group.end(),
                       [&](const at::Tensor* u) { return u->is_same(t); })) {
        group.push_back(&t);
      }
    }
    const auto needs_grad = [batch](const at::Tensor& t) {
      return IsDifferentiable(t) && (!batch || t.requires_grad());
    };
    std::unordered_map<const c10::StorageImpl*, at::Tensor> bases;  // a shared storage's copy
    std::unordered_map<const c10::TensorImpl*, at::Tensor> made;    // a tensor named again
    for (const at::Tensor& t : given) {
      if (!t.defined() || (batch && !needs_grad(t))) {
        xs.push_back(t);
        continue;
      }
      auto again = made.find(t.unsafeGetTensorImpl());
      if (again != made.end()) {
        xs.push_back(again->second);
        continue;
      }
      const std::vector<const at::Tensor*>* group =
          t.has_storage() ? &sharing[t.storage().unsafeGetStorageImpl()] : nullptr;
      const bool alike = group != nullptr && group->size() > 1 &&
                         std::all_of(group->begin(), group->end(), [&](const at::Tensor* u) {
                           return u->scalar_type() == t.scalar_type();
                         });
      at::Tensor x;
      if (alike) {
        at::Tensor& base = bases[t.storage().unsafeGetStorageImpl()];
        if (!base.defined()) {
          const int64_t numel = static_cast<int64_t>(t.storage().nbytes()) / t.element_size();
          at::Tensor copy = t.detach().as_strided({numel}, {1}, 0).clone();
          if (std::any_of(group->begin(), group->end(),
                          [&](const at::Tensor* u) { return needs_grad(*u); })) {
            leaves.push_back(copy.requires_grad_(true));
            copy = leaves.back().clone();
          }
          base = copy;
        }
        x = base.as_strided(t.sizes(), t.strides(), t.storage_offset());
      } else if (needs_grad(t)) {
        leaves.push_back(t.detach().requires_grad_(true));
        x = leaves.back().clone();
      } else {
        x = t.clone();
      }
      made.emplace(t.unsafeGetTensorImpl(), x);
      xs.push_back(x);
    }
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
    timer_->Start();
    at::Tensor loss = Loss(xs);
    p.forward_ms = timer_->StopMs();
    const Storages in(xs);
    const bool aliases_input =
        loss.has_storage() && in.Find(loss.storage().unsafeGetStorageImpl()) >= 0;
    p.output_bytes = aliases_input ? 0 : StorageBytes(loss);
    p.retained_bytes = meter_.Stats().live_bytes - start - p.output_bytes;
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
