#include "core/run/profile_tensors.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include "ATen/ops/empty.h"
#include "ATen/ops/zeros.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/run/checkpoint.h"
#include "core/run/graph_inputs.h"
#include "torch/csrc/autograd/function.h"
#include "torch/csrc/autograd/functions/accumulate_grad.h"

namespace ckpt {

int64_t StorageBytes(const at::Tensor& t) {
  return t.defined() && t.has_storage() ? static_cast<int64_t>(t.storage().nbytes()) : 0;
}

int64_t TotalBytes(const std::vector<at::Tensor>& tensors) { return Storages(tensors).Total(); }

size_t FirstPlace(const std::vector<at::Tensor>& tensors, size_t k) {
  size_t first = 0;
  while (first < k && !tensors[first].is_same(tensors[k])) ++first;
  return first;
}

std::vector<at::Tensor> Distinct(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (size_t k = 0; k < tensors.size(); ++k) {
    if (FirstPlace(tensors, k) == k) out.push_back(tensors[k]);
  }
  return out;
}

GradLayout FreshLayout(const at::Tensor& y) {
  if (y.is_non_overlapping_and_dense()) return {y.strides().vec(), 0, y.numel()};
  std::vector<int64_t> strides(y.dim(), 1);
  for (int64_t d = y.dim() - 1; d > 0; --d)
    strides[d - 1] = strides[d] * std::max<int64_t>(y.size(d), 1);
  return {strides, 0, y.numel()};
}

at::Tensor MakeGradient(at::IntArrayRef sizes, const at::TensorOptions& options,
                        const GradLayout& layout) {
  return at::empty({layout.storage_numel}, options.requires_grad(false))
      .normal_()
      .as_strided(sizes, layout.strides, layout.offset);
}
at::Tensor MakeGradient(const at::Tensor& y, const GradLayout& layout) {
  return MakeGradient(y.sizes(), y.options(), layout);
}

at::Tensor GradientSource::forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y,
                                   const GradLayout& layout) {
  ctx->saved_data["like"] = at::empty({0}, y.options().requires_grad(false));
  ctx->saved_data["sizes"] = y.sizes().vec();
  ctx->saved_data["strides"] = layout.strides;
  ctx->saved_data["offset"] = layout.offset;
  ctx->saved_data["numel"] = layout.storage_numel;
  return at::zeros({}, y.options().requires_grad(false));
}
torch::autograd::variable_list GradientSource::backward(torch::autograd::AutogradContext* ctx,
                                                        torch::autograd::variable_list) {
  const GradLayout layout{ctx->saved_data["strides"].toIntVector(),
                          ctx->saved_data["offset"].toInt(), ctx->saved_data["numel"].toInt()};
  return {MakeGradient(ctx->saved_data["sizes"].toIntVector(),
                       ctx->saved_data["like"].toTensor().options(), layout),
          at::Tensor()};
}

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

std::string ShapeKey(const std::vector<at::Tensor>& tensors) {
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

}  // namespace ckpt
