#include "core/run/checkpoint.h"

#include <memory>
#include <optional>
#include <utility>

#include "ATen/core/grad_mode.h"
#include "ATen/core/ivalue.h"
#include "ATen/ops/cat.h"
#include "ATen/ops/empty.h"
#include "core/run/graph_inputs.h"
#include "core/run/rng.h"
#include "core/run/torch_compat.h"
#include "torch/csrc/autograd/autograd.h"
#include "torch/csrc/autograd/custom_function.h"

namespace ckpt {
namespace {
thread_local bool in_rerun = false;
}  // namespace

bool InRerun() { return in_rerun; }
RerunScope::RerunScope() : previous_(in_rerun) { in_rerun = true; }
RerunScope::~RerunScope() { in_rerun = previous_; }

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Everything a checkpointed call needs in backward besides its saved inputs. Held by the
// autograd context as a capsule, freed with the graph.
struct CheckpointCall : torch::CustomClassHolder {
  TensorFn fn;
  CheckpointOptions options;
  std::optional<RngState> rng;
  // Mixed precision as the forward ran it; the recomputation (inside backward, where the
  // caller has usually left autocast) must cast the same way.
  compat::AutocastState autocast = compat::GetAutocast();
  std::vector<bool> input_requires_grad;
};

// Restores the RNG state it was given when destroyed, also when the recomputation throws.
class RngRestorer {
 public:
  explicit RngRestorer(std::optional<RngState> state) : state_(std::move(state)) {}
  ~RngRestorer() {
    if (state_) RestoreRng(*state_);
  }

 private:
  std::optional<RngState> state_;
};

// Backpropagates `grad_outputs` through the graph that produced `outputs`, skipping outputs
// without grad or without an incoming gradient. Consumes `outputs`.
void BackwardThrough(variable_list outputs, const variable_list& grad_outputs) {
  variable_list roots;
  variable_list root_grads;
  for (size_t i = 0; i < outputs.size() && i < grad_outputs.size(); ++i) {
    if (grad_outputs[i].defined() && outputs[i].defined() && outputs[i].requires_grad()) {
      roots.push_back(outputs[i]);
      root_grads.push_back(grad_outputs[i]);
    }
  }
  outputs.clear();  // the graph is owned by `roots` now; free what backward does not need
  if (!roots.empty()) torch::autograd::backward(roots, root_grads);
}

void MarkNonDifferentiable(AutogradContext* ctx, const variable_list& outputs) {
  for (const at::Tensor& out : outputs) {
    if (out.defined() && !IsDifferentiable(out)) {
      ctx->mark_non_differentiable({out});
    }
  }
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // `inputs` are the caller's inputs plus, last, the anchor (see Checkpoint). Grad mode is off
  // here (Function::apply turns it off around forward).
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               c10::intrusive_ptr<CheckpointCall> call) {
    std::vector<at::Tensor> caller_inputs(inputs.begin(), inputs.end() - 1);
    for (const at::Tensor& t : caller_inputs)
      call->input_requires_grad.push_back(t.requires_grad());
    if (call->options.preserve_rng_state) call->rng = CaptureRng(CudaDevicesOf(caller_inputs));

    variable_list outputs = call->fn(caller_inputs);

    ctx->save_for_backward(caller_inputs);
    ctx->saved_data["call"] = at::IValue::make_capsule(std::move(call));
    // Unused outputs get no gradient instead of a zero-filled one: no bytes spent on zeros.
    ctx->set_materialize_grads(false);
    MarkNonDifferentiable(ctx, outputs);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto call =
        c10::static_intrusive_pointer_cast<CheckpointCall>(ctx->saved_data["call"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();

    // The recomputed graph starts at views of the saved inputs that took a gradient, whose
    // gradients backward leaves in `into` as the graph lays them out (a fresh leaf's .grad
    // would be autograd's accumulated copy, made contiguous, and a kernel before the checkpoint
    // reading it would round differently from the plain step); the others are read detached.
    std::vector<at::Tensor> differentiable;
    for (size_t i = 0; i < saved.size(); ++i) {
      if (call->input_requires_grad[i]) differentiable.push_back(saved[i]);
    }
    auto into = c10::make_intrusive<InputGradients>();
    variable_list outputs;
    {
      std::optional<RngState> current;
      if (call->rng) {
        current = CaptureRng(CudaDevicesOf(saved));
        RestoreRng(*call->rng);
      }
      RngRestorer restore_after(std::move(current));
      compat::ScopedAutocast autocast(call->autocast);
      at::AutoGradMode enable_grad(true);
      std::vector<at::Tensor> views;
      if (!differentiable.empty()) views = GraphInputs(differentiable, into);
      std::vector<at::Tensor> inputs;
      for (size_t i = 0, k = 0; i < saved.size(); ++i) {
        inputs.push_back(call->input_requires_grad[i] ? views[k++] : saved[i].detach());
      }
      RerunScope rerun;
      outputs = call->fn(inputs);
    }
    BackwardThrough(std::move(outputs), grad_outputs);
    variable_list grads;
    for (size_t i = 0, k = 0; i < saved.size(); ++i) {
      grads.push_back(call->input_requires_grad[i] ? into->grads[k++] : at::Tensor());
    }
    grads.emplace_back();  // the anchor
    grads.emplace_back();  // the call capsule (not a tensor)
    return grads;
  }
};

// The anchor: an empty tensor (zero bytes) that requires grad. Autograd only records a
// Function whose inputs require grad; without it, a segment whose inputs are all without grad
// (token ids) would never be recomputed and its parameters would get no gradient.
std::vector<at::Tensor> WithAnchor(const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> all = inputs;
  all.push_back(at::empty({0}).requires_grad_(true));
  return all;
}

// GraphInputs' node: its outputs are its inputs (autograd makes them views); backward stores
// the gradients that reach them.
struct GraphInputsFunction : torch::autograd::Function<GraphInputsFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               c10::intrusive_ptr<InputGradients> into) {
    variable_list outputs(inputs.begin(), inputs.end() - 1);  // without the anchor
    ctx->saved_data["into"] = at::IValue::make_capsule(std::move(into));
    ctx->set_materialize_grads(false);
    MarkNonDifferentiable(ctx, outputs);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto into =
        c10::static_intrusive_pointer_cast<InputGradients>(ctx->saved_data["into"].toCapsule());
    const size_t n = grad_outputs.size();
    for (size_t k = 0; k < n && k < into->first.size(); ++k) {
      into->grads[into->first[k]] = std::move(grad_outputs[k]);
    }
    return variable_list(n + 2);  // nothing for the inputs, the anchor or the capsule
  }
};

}  // namespace

std::vector<at::Tensor> GraphInputs(const std::vector<at::Tensor>& inputs,
                                    c10::intrusive_ptr<InputGradients> into) {
  into->grads.assign(inputs.size(), at::Tensor());
  // A tensor named twice is one view named twice, as in the middle of a graph: its two
  // contributions are summed before backward stores the gradient (at its first place).
  std::vector<at::Tensor> distinct;
  std::vector<size_t> of;  // per input, its index in `distinct`
  for (const at::Tensor& t : inputs) {
    size_t k = 0;
    while (k < distinct.size() && !(t.defined() && distinct[k].is_same(t))) ++k;
    if (k == distinct.size()) distinct.push_back(t);
    of.push_back(k);
  }
  into->first.assign(distinct.size(), 0);
  for (size_t i = inputs.size(); i-- > 0;) into->first[of[i]] = i;
  // Detached: an input made by another run (its output) must not tie this graph to that one.
  std::vector<at::Tensor> detached;
  for (const at::Tensor& t : distinct) detached.push_back(t.defined() ? t.detach() : t);
  std::vector<at::Tensor> all_inputs = WithAnchor(detached);
  const std::vector<at::Tensor> views =
      GraphInputsFunction::apply(at::TensorList(all_inputs), std::move(into));
  std::vector<at::Tensor> out;
  for (const size_t k : of) out.push_back(views[k]);
  return out;
}

std::vector<at::Tensor> ChunkedCheckpoint(const ChunkFn& fn, const std::vector<at::Tensor>& inputs,
                                          const std::vector<bool>& split, int64_t dim, int chunks,
                                          const CheckpointOptions& options) {
  if (chunks <= 1) return fn(inputs, 0);
  int64_t length = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (split[i]) length = inputs[i].size(dim);
  }
  TORCH_CHECK(length >= 0, "ChunkedCheckpoint: no input is marked to split");
  const int64_t n = std::min<int64_t>(chunks, std::max<int64_t>(length, 1));
  std::vector<std::vector<at::Tensor>> pieces;
  int64_t begin = 0;
  for (int64_t c = 0; c < n; ++c) {
    const int64_t size = length / n + (c < length % n ? 1 : 0);
    std::vector<at::Tensor> chunk_inputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      chunk_inputs.push_back(split[i] ? inputs[i].narrow(dim, begin, size) : inputs[i]);
    }
    const int64_t offset = begin;
    pieces.push_back(Checkpoint(
        // By value: the closure runs again in backward, after this function returned.
        [fn, offset](const std::vector<at::Tensor>& in) { return fn(in, offset); }, chunk_inputs,
        options));
    begin += size;
  }
  std::vector<at::Tensor> outputs;
  for (size_t k = 0; k < pieces[0].size(); ++k) {
    if (pieces[0][k].dim() == 0) {
      at::Tensor sum = pieces[0][k];
      for (size_t c = 1; c < pieces.size(); ++c) sum = sum.add(pieces[c][k]);
      outputs.push_back(sum);
    } else {
      std::vector<at::Tensor> parts;
      for (auto& piece : pieces) parts.push_back(std::move(piece[k]));
      outputs.push_back(at::cat(parts, dim));
    }
  }
  return outputs;
}

namespace {

// What CheckpointDroppingOutput needs to refill the outputs it freed.
struct DroppedOutputs {
  TensorFn fn;
  std::vector<at::Tensor> inputs;   // detached; the checkpoint keeps them too
  std::vector<at::Tensor> outputs;  // their storage emptied until Refill
  std::vector<size_t> nbytes;
  compat::AutocastState autocast = compat::GetAutocast();
  bool refilled = false;

  void Refill() {
    if (refilled) return;
    refilled = true;
    at::NoGradGuard no_grad;
    compat::ScopedAutocast scope(autocast);
    RerunScope rerun;
    const std::vector<at::Tensor> again = fn(inputs);
    for (size_t i = 0; i < outputs.size(); ++i) {
      const at::Tensor& out = outputs[i];
      if (!out.defined() || nbytes[i] == 0) continue;
      c10::StorageImpl* storage = out.storage().unsafeGetStorageImpl();
      storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes[i]));
      storage->set_nbytes(nbytes[i]);
      // Written through a tensor of its own: the saved tensors' version counters, which
      // autograd checks, do not move.
      at::empty({0}, out.options())
          .set_(out.storage(), out.storage_offset(), out.sizes(), out.strides())
          .copy_(again[i]);
    }
    // Let go once refilled: this struct lives as long as the hooked tensors' nodes, which a
    // backward call keeps until it returns, long after the consumer's backward has freed the
    // outputs it read and the checkpoint the inputs it kept.
    fn = nullptr;
    inputs.clear();
    outputs.clear();
  }
};

}  // namespace

std::vector<at::Tensor> CheckpointDroppingOutput(const TensorFn& fn,
                                                 const std::vector<at::Tensor>& inputs,
                                                 const TensorFn& consumer) {
  if (!at::GradMode::is_enabled()) return consumer(fn(inputs));
  std::vector<at::Tensor> outputs = Checkpoint(fn, inputs, kNoRngReplay);
  std::vector<at::Tensor> results = consumer(outputs);
  auto dropped = std::make_shared<DroppedOutputs>();
  dropped->fn = fn;
  for (const at::Tensor& t : inputs) dropped->inputs.push_back(t.defined() ? t.detach() : t);
  for (const at::Tensor& out : outputs) {
    for (const at::Tensor& r : results) {
      TORCH_CHECK(!out.defined() || !r.defined() || !r.storage().is_alias_of(out.storage()),
                  "CheckpointDroppingOutput: the consumer returned a part's output or a view of "
                  "it, which must stay");
    }
    dropped->nbytes.push_back(out.defined() && out.has_storage() ? out.storage().nbytes() : 0);
    if (dropped->nbytes.back() > 0) {
      c10::StorageImpl* storage = out.storage().unsafeGetStorageImpl();
      storage->set_data_ptr_noswap(at::DataPtr(nullptr, out.device()));
      storage->set_nbytes(0);
    }
    dropped->outputs.push_back(out);
  }
  for (at::Tensor& r : results) {
    if (r.defined() && r.requires_grad()) {
      r.register_hook([dropped](const at::Tensor&) { dropped->Refill(); });
    }
  }
  return results;
}

bool IsDifferentiable(const at::Tensor& t) {
  return t.defined() && (at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()));
}

std::vector<at::Tensor> Checkpoint(TensorFn fn, const std::vector<at::Tensor>& inputs,
                                   const CheckpointOptions& options) {
  if (!at::GradMode::is_enabled()) return fn(inputs);
  auto call = c10::make_intrusive<CheckpointCall>();
  call->fn = std::move(fn);
  call->options = options;
  std::vector<at::Tensor> all_inputs = WithAnchor(inputs);
  return CheckpointFunction::apply(at::TensorList(all_inputs), std::move(call));
}

}  // namespace ckpt
