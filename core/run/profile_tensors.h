// What the profiler reads off a stage's tensors and makes for them: the storages they name,
// each counted once; the layout a gradient comes back in, and gradients made so; the parameters
// a graph reaches; keys that tell alike stages' tensors apart; and inputs made afresh as the
// chain hands them on. Each a function of its arguments alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ATen/core/Tensor.h"
#include "torch/csrc/autograd/custom_function.h"

namespace ckpt {

// Bytes of the storage behind a tensor: a view (a reduction's scalar can be one) keeps all
// of it alive.
int64_t StorageBytes(const at::Tensor& t);

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

// The bytes of the storages `tensors` name, each once.
int64_t TotalBytes(const std::vector<at::Tensor>& tensors);

// The first place in `tensors` of the tensor at place k.
size_t FirstPlace(const std::vector<at::Tensor>& tensors, size_t k);

// `tensors` with each tensor once: a stage's outputs as the next stage's backward hands their
// gradients on (a tensor returned twice gets its two contributions summed first).
std::vector<at::Tensor> Distinct(const std::vector<at::Tensor>& tensors);

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
GradLayout FreshLayout(const at::Tensor& y);

// A gradient of `sizes` laid out as `layout`, its storage fresh, random.
at::Tensor MakeGradient(at::IntArrayRef sizes, const at::TensorOptions& options,
                        const GradLayout& layout);
at::Tensor MakeGradient(const at::Tensor& y, const GradLayout& layout);

// z = GradientSource(y, layout), a 0-dim zero, whose backward makes y's gradient afresh, laid
// out as the next stage's backward would hand it: summed over a stage's outputs, z.backward()
// runs the stage's backward as the chain does, with the incoming gradient freed once the stage
// no longer needs it.
struct GradientSource : torch::autograd::Function<GradientSource> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y,
                            const GradLayout& layout);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list);
};

// Bytes of the storages behind `tensors` that none of `besides` (nor an earlier one of
// `tensors`) shares: a target that is a view of an input costs nothing more.
int64_t BytesBeyond(const std::vector<at::Tensor>& tensors, const std::vector<at::Tensor>& besides);

// The parameters (indices by their TensorImpl) whose gradients a backward through `outputs`
// would accumulate: the AccumulateGrad leaves of their graph, in index order.
std::vector<int> GraphLeaves(const std::vector<at::Tensor>& outputs,
                             const std::unordered_map<const c10::TensorImpl*, int>& index);

// Shapes and types of `tensors` (and which need a gradient), for comparing stages.
std::string ShapeKey(const std::vector<at::Tensor>& tensors);

// Which storage each of `tensors` names (its index among them) and where in it: tensors alike in
// shape may still share storage differently (a tensor returned twice, a view beside its base).
std::string StorageLayout(const std::vector<at::Tensor>& tensors);

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
                   std::vector<at::Tensor>& leaves);

}  // namespace ckpt
