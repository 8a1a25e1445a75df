// What the zoo's models take of torch::nn, without LibTorch's C++ frontend (its module header
// brings serialization and the JIT into every model's compile): a set of parameters and
// buffers with a training mode, and the layers the models are built of, initialised as
// torch::nn's are (the same draws from the CPU generator, in the same order) and run by the
// same ATen operators.
//
// A layer registers its tensors in the set it is made in, when it is made: the set lists them
// in that order, which is the order a torch::nn::Module of the same layers would list them
// (kept profiles index gradients by it). Layers are values that share their tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "ATen/core/Tensor.h"
#include "c10/core/Device.h"

namespace ckpt {

class ParamSet {
 public:
  // `value` as a parameter (it requires gradients from here on) or a buffer, listed last.
  at::Tensor AddParameter(at::Tensor value);
  at::Tensor AddBuffer(at::Tensor value);

  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  const std::vector<at::Tensor>& buffers() const { return buffers_; }
  bool is_training() const { return training_; }
  void train(bool training) { training_ = training; }
  // Moves every parameter and buffer to `device` in place: whatever holds one sees the move.
  void to(c10::Device device);

 private:
  std::vector<at::Tensor> parameters_, buffers_;
  bool training_ = true;
};

// y = x W^T + b: W [out, in] and b [out] uniform in +-1/sqrt(in) (Kaiming's uniform with
// a = sqrt(5), as torch::nn::Linear).
struct Linear {
  Linear() = default;
  Linear(ParamSet& set, int64_t in, int64_t out, bool with_bias = true);
  at::Tensor operator()(const at::Tensor& x) const;
  at::Tensor weight, bias;
};

// LayerNorm over the last dimension of width `width`, eps 1e-5: weight ones, bias zeros.
struct LayerNorm {
  LayerNorm() = default;
  LayerNorm(ParamSet& set, int64_t width);
  at::Tensor operator()(const at::Tensor& x) const;
  at::Tensor weight, bias;
};

// A lookup table of `count` rows of width `width`, drawn from N(0, 1).
struct Embedding {
  Embedding() = default;
  Embedding(ParamSet& set, int64_t count, int64_t width);
  at::Tensor operator()(const at::Tensor& indices) const;
  at::Tensor weight;
};

// A square 2-D convolution, weights as Linear's with in x kernel^2 inputs.
struct Conv2d {
  Conv2d() = default;
  Conv2d(ParamSet& set, int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
         bool with_bias);
  at::Tensor operator()(const at::Tensor& x) const;
  at::Tensor weight, bias;
  int64_t stride = 1, padding = 0;
};

// BatchNorm's parameters (weight ones, bias zeros) and its running statistics (mean zeros,
// variance ones, a batch counter), momentum 0.1, eps 1e-5; a model runs it (resnet's
// BatchNorm decides when the statistics update).
struct BatchNorm2d {
  BatchNorm2d() = default;
  BatchNorm2d(ParamSet& set, int64_t channels);
  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  static constexpr double kMomentum = 0.1, kEps = 1e-5;
  // The bytes of its buffers for `channels` channels, in float32: the statistics and the counter.
  static constexpr int64_t StateBytes(int64_t channels) {
    return 2 * channels * static_cast<int64_t>(sizeof(float)) +
           static_cast<int64_t>(sizeof(int64_t));
  }
};

}  // namespace ckpt
