#include "core/run/op_recorders.h"

#include <algorithm>
#include <memory>
#include <unordered_set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace ckpt {
namespace {

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

// Adds `enter` and `leave` as RecordFunction callbacks on the operators this thread runs, with
// their inputs and outputs. Callbacks are plain functions: they write through the thread-local
// sinks above.
at::CallbackHandle AddCallbacks(
    std::unique_ptr<at::ObserverContext> (*enter)(const at::RecordFunction&),
    void (*leave)(const at::RecordFunction&, at::ObserverContext*)) {
  return at::addThreadLocalCallback(at::RecordFunctionCallback(enter, leave)
                                        .needsInputs(true)
                                        .needsOutputs(true)
                                        .scopes({at::RecordScope::FUNCTION}));
}

}  // namespace

Float32OpsRecorder::Float32OpsRecorder(std::set<std::string>& sink) {
  float32_ops_sink = &sink;
  op_depth = 0;
  handle_ = AddCallbacks(&EnterOp, &LeaveOp);
}

Float32OpsRecorder::~Float32OpsRecorder() {
  float32_ops_sink = nullptr;
  at::removeCallback(handle_);
}

WorkRecorder::WorkRecorder(OpWork& sink) {
  work_sink = &sink;
  work_depth = 0;
  handle_ = AddCallbacks(&EnterWork, &LeaveWork);
}

WorkRecorder::~WorkRecorder() {
  work_sink = nullptr;
  at::removeCallback(handle_);
}

}  // namespace ckpt
