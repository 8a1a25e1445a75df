#include "core/checkpoint.h"

#include <optional>
#include <utility>

#include "ATen/core/grad_mode.h"
#include "ATen/core/ivalue.h"
#include "ATen/ops/empty.h"
#include "core/rng.h"
#include "torch/csrc/autograd/autograd.h"
#include "torch/csrc/autograd/custom_function.h"

namespace ckpt {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Everything a checkpointed call needs in backward besides its saved inputs. Held by the
// autograd context as a capsule, freed with the graph.
struct CheckpointCall : torch::CustomClassHolder {
  TensorFn fn;
  CheckpointOptions options;
  std::optional<RngState> rng;
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

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // `inputs` are the caller's inputs plus, last, the anchor (see Checkpoint). Grad mode is off
  // here (Function::apply turns it off around forward).
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               c10::intrusive_ptr<CheckpointCall> call) {
    std::vector<at::Tensor> caller_inputs(inputs.begin(), inputs.end() - 1);
    for (const at::Tensor& t : caller_inputs) call->input_requires_grad.push_back(t.requires_grad());
    if (call->options.preserve_rng_state) call->rng = CaptureRng(CudaDevicesOf(caller_inputs));

    variable_list outputs = call->fn(caller_inputs);

    ctx->save_for_backward(caller_inputs);
    ctx->saved_data["call"] = at::IValue::make_capsule(std::move(call));
    // Unused outputs get no gradient instead of a zero-filled one: no bytes spent on zeros.
    ctx->set_materialize_grads(false);
    for (const at::Tensor& out : outputs) {
      if (out.defined() && !at::isFloatingType(out.scalar_type()) &&
          !at::isComplexType(out.scalar_type())) {
        ctx->mark_non_differentiable({out});
      }
    }
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto call = c10::static_intrusive_pointer_cast<CheckpointCall>(
        ctx->saved_data["call"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();

    // Fresh leaves over the same storage: the recomputed graph ends at them.
    std::vector<at::Tensor> inputs;
    inputs.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      at::Tensor leaf = saved[i].detach();
      if (call->input_requires_grad[i]) leaf.requires_grad_(true);
      inputs.push_back(std::move(leaf));
    }

    variable_list outputs;
    {
      std::optional<RngState> current;
      if (call->rng) {
        current = CaptureRng(CudaDevicesOf(inputs));
        RestoreRng(*call->rng);
      }
      RngRestorer restore_after(std::move(current));
      at::AutoGradMode enable_grad(true);
      outputs = call->fn(inputs);
    }
    if (call->options.recompute_count != nullptr) ++*call->options.recompute_count;

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

    variable_list grads;
    grads.reserve(inputs.size() + 2);
    for (size_t i = 0; i < inputs.size(); ++i) {
      grads.push_back(call->input_requires_grad[i] ? inputs[i].grad() : at::Tensor());
    }
    grads.emplace_back();  // the anchor
    grads.emplace_back();  // the call capsule (not a tensor)
    return grads;
  }
};

}  // namespace

std::vector<at::Tensor> Checkpoint(TensorFn fn, const std::vector<at::Tensor>& inputs,
                                   const CheckpointOptions& options) {
  if (!at::GradMode::is_enabled()) return fn(inputs);
  auto call = c10::make_intrusive<CheckpointCall>();
  call->fn = std::move(fn);
  call->options = options;
  // The anchor: an empty tensor (zero bytes) that requires grad. Autograd only records a
  // Function whose inputs require grad; without it, a segment whose inputs are all without
  // grad (token ids) would never be recomputed and its parameters would get no gradient.
  std::vector<at::Tensor> all_inputs = inputs;
  all_inputs.push_back(at::empty({0}).requires_grad_(true));
  return CheckpointFunction::apply(at::TensorList(all_inputs), std::move(call));
}

}  // namespace ckpt
