// The Llama model's own arithmetic: RMSNorm's explicit backward (models/llama.h) against
// autograd's derivative of the same formula, in float64 on generated shapes and values. The
// conformance suite compares every plan against store_all, which runs the same backward, so a
// wrong derivative would pass there; here it cannot.
#include "models/llama.h"

#include <cmath>
#include <random>

#include "ATen/Context.h"
#include "ATen/TensorOperators.h"
#include "ATen/ops/allclose.h"
#include "ATen/ops/equal.h"
#include "ATen/ops/randn.h"
#include "ATen/ops/rsqrt.h"
#include "gtest/gtest.h"
#include "torch/csrc/autograd/autograd.h"

namespace ckpt {
namespace {

TEST(RmsNorm, BackwardIsTheDerivativeOfItsFormula) {
  std::mt19937 random(std::random_device{}());
  for (int k = 0; k < 20; ++k) {
    const int64_t rows = 1 + random() % 5, width = 1 + random() % 9;
    const double eps = k % 2 == 0 ? 1e-5 : 1e-1;
    const auto options = at::TensorOptions().dtype(at::kDouble);
    at::manual_seed(random());
    const at::Tensor x = at::randn({rows, 2, width}, options).mul_(1 + k).requires_grad_(true);
    const at::Tensor w = at::randn({width}, options).requires_grad_(true);
    const at::Tensor g = at::randn({rows, 2, width}, options);

    const at::Tensor ours = RmsNormFunction(x, w, eps);
    const torch::autograd::variable_list ours_grads = torch::autograd::grad({ours}, {x, w}, {g});
    const at::Tensor composite = x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
    const torch::autograd::variable_list composite_grads =
        torch::autograd::grad({composite}, {x, w}, {g});

    EXPECT_TRUE(at::allclose(ours, composite, 1e-12, 1e-12))
        << "rows " << rows << " width " << width;
    EXPECT_TRUE(at::allclose(ours_grads[0], composite_grads[0], 1e-10, 1e-12))
        << "x's gradient, rows " << rows << " width " << width << ":\n"
        << ours_grads[0] - composite_grads[0];
    EXPECT_TRUE(at::allclose(ours_grads[1], composite_grads[1], 1e-10, 1e-12))
        << "w's gradient, rows " << rows << " width " << width;
  }
}

// Rotary embedding makes a query-key product depend on the positions' difference alone, keeps
// each vector's length, and rotates a chunk as the whole sequence's same positions.
TEST(Rotary, ScoresDependOnRelativePositionOnly) {
  std::mt19937 random(std::random_device{}());
  const auto options = at::TensorOptions().dtype(at::kDouble);
  for (int k = 0; k < 20; ++k) {
    const int64_t d = 2 * (1 + random() % 4), p = random() % 50, q_pos = random() % 50;
    const int64_t shift = 1 + random() % 1000;
    at::manual_seed(random());
    const at::Tensor q = at::randn({1, 1, 1, d}, options), kv = at::randn({1, 1, 1, d}, options);
    const double near = (Rotary(q, p) * Rotary(kv, q_pos)).sum().item<double>();
    const double far = (Rotary(q, p + shift) * Rotary(kv, q_pos + shift)).sum().item<double>();
    EXPECT_NEAR(near, far, 1e-9 * (1 + std::abs(near))) << "d " << d << " shift " << shift;
    EXPECT_NEAR(Rotary(q, p).norm().item<double>(), q.norm().item<double>(), 1e-12);
    if (p > 0) {  // not the identity away from position 0
      EXPECT_FALSE(at::allclose(Rotary(q, p), q, 1e-6, 1e-6)) << "d " << d << " p " << p;
    }
  }
  const at::Tensor x = at::randn({2, 3, 8, 4});
  const at::Tensor whole = Rotary(x, 5);
  EXPECT_TRUE(at::equal(Rotary(x.narrow(2, 3, 5).contiguous(), 8), whole.narrow(2, 3, 5)));
}

}  // namespace
}  // namespace ckpt
