#include "models/nn.h"

#include <cmath>

#include "ATen/core/grad_mode.h"
#include "ATen/ops/addmm.h"
#include "ATen/ops/conv2d.h"
#include "ATen/ops/embedding.h"
#include "ATen/ops/empty.h"
#include "ATen/ops/layer_norm.h"
#include "ATen/ops/matmul.h"
#include "ATen/ops/ones.h"
#include "ATen/ops/zeros.h"

namespace ckpt {
namespace {

// Kaiming's uniform initialisation with a = sqrt(5) of a weight whose rows read `fan_in`
// inputs, then its bias (where defined) uniform in +-1/sqrt(fan_in), computed as torch::nn
// computes them, so the bounds round alike.
void InitLikeTorch(at::Tensor& weight, at::Tensor& bias, int64_t fan_in) {
  const at::NoGradGuard no_grad;
  const double a = std::sqrt(5.0);
  const double gain = std::sqrt(2.0 / (1 + std::pow(a, 2)));
  const double bound = std::sqrt(3.0) * (gain / std::sqrt(static_cast<double>(fan_in)));
  weight.uniform_(-bound, bound);
  if (bias.defined()) {
    const double bias_bound = 1 / std::sqrt(static_cast<double>(fan_in));
    bias.uniform_(-bias_bound, bias_bound);
  }
}

}  // namespace

at::Tensor ParamSet::AddParameter(at::Tensor value) {
  value.requires_grad_(true);
  parameters_.push_back(value);
  return value;
}

at::Tensor ParamSet::AddBuffer(at::Tensor value) {
  buffers_.push_back(value);
  return value;
}

void ParamSet::to(c10::Device device) {
  const at::NoGradGuard no_grad;
  for (std::vector<at::Tensor>* list : {&parameters_, &buffers_}) {
    for (at::Tensor& t : *list) t.set_data(t.to(device));
  }
}

Linear::Linear(ParamSet& set, int64_t in, int64_t out, bool with_bias) {
  weight = set.AddParameter(at::empty({out, in}));
  if (with_bias) bias = set.AddParameter(at::empty({out}));
  InitLikeTorch(weight, bias, in);
}

// torch::nn::Linear's arithmetic, which is not at::linear's: a batched input's bias is added in
// place to the product, and its gradient summed in that order.
at::Tensor Linear::operator()(const at::Tensor& x) const {
  if (x.dim() == 2 && bias.defined()) return at::addmm(bias, x, weight.t());
  at::Tensor y = at::matmul(x, weight.t());
  if (bias.defined()) y.add_(bias);
  return y;
}

LayerNorm::LayerNorm(ParamSet& set, int64_t width)
    : weight(set.AddParameter(at::ones({width}))), bias(set.AddParameter(at::zeros({width}))) {}

at::Tensor LayerNorm::operator()(const at::Tensor& x) const {
  return at::layer_norm(x, {weight.size(0)}, weight, bias, /*eps=*/1e-5);
}

Embedding::Embedding(ParamSet& set, int64_t count, int64_t width)
    : weight(set.AddParameter(at::empty({count, width}).normal_(0, 1))) {}

at::Tensor Embedding::operator()(const at::Tensor& indices) const {
  return at::embedding(weight, indices);
}

Conv2d::Conv2d(ParamSet& set, int64_t in, int64_t out, int64_t kernel, int64_t stride,
               int64_t padding, bool with_bias)
    : stride(stride), padding(padding) {
  weight = set.AddParameter(at::empty({out, in, kernel, kernel}));
  if (with_bias) bias = set.AddParameter(at::empty({out}));
  InitLikeTorch(weight, bias, in * kernel * kernel);
}

at::Tensor Conv2d::operator()(const at::Tensor& x) const {
  return at::conv2d(x, weight, bias, {stride, stride}, {padding, padding});
}

BatchNorm2d::BatchNorm2d(ParamSet& set, int64_t channels)
    : weight(set.AddParameter(at::ones({channels}))),
      bias(set.AddParameter(at::zeros({channels}))),
      running_mean(set.AddBuffer(at::zeros({channels}))),
      running_var(set.AddBuffer(at::ones({channels}))),
      num_batches_tracked(set.AddBuffer(at::zeros({}, at::kLong))) {}

}  // namespace ckpt
