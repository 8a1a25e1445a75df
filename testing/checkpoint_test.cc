// The checkpoint primitive against plain autograd: several inputs and outputs, inputs without
// grad, outputs without grad, RNG replay of dropout (and of every kind of draw, in generated
// nested checkpoints), and the recompute count.
#include "core/run/checkpoint.h"

#include <cstdint>
#include <vector>

#include "ATen/Context.h"
#include "ATen/TensorOperators.h"
#include "ATen/core/grad_mode.h"
#include "ATen/ops/batch_norm.h"
#include "ATen/ops/bernoulli.h"
#include "ATen/ops/cat.h"
#include "ATen/ops/dropout.h"
#include "ATen/ops/equal.h"
#include "ATen/ops/full_like.h"
#include "ATen/ops/index_select.h"
#include "ATen/ops/layer_norm.h"
#include "ATen/ops/linear.h"
#include "ATen/ops/matmul.h"
#include "ATen/ops/ones.h"
#include "ATen/ops/rand.h"
#include "ATen/ops/randn.h"
#include "ATen/ops/randn_like.h"
#include "ATen/ops/randperm.h"
#include "ATen/ops/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"
#include "torch/csrc/autograd/function.h"

namespace ckpt {
namespace {

std::vector<at::Tensor> TwoInTwoOut(const std::vector<at::Tensor>& in) {
  const at::Tensor& a = in[0];
  const at::Tensor& b = in[1];
  return {a * b + a.sin(), (a - b).exp() * 0.5};
}

// Gradients of `loss(outputs)` with and without checkpointing must be bitwise equal: the
// recomputation performs the same operations on the same values.
TEST(Checkpoint, SeveralInputsAndOutputsMatchPlainAutograd) {
  at::manual_seed(1);
  const at::Tensor a0 = at::randn({5, 7});
  const at::Tensor b0 = at::randn({5, 7});
  const at::Tensor w = at::randn({5, 7});

  at::Tensor a = a0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
  std::vector<at::Tensor> plain = TwoInTwoOut({a, b});
  ((plain[0] * w).sum() + plain[1].sum()).backward();

  at::Tensor ca = a0.clone().requires_grad_(true), cb = b0.clone().requires_grad_(true);
  int calls = 0;
  auto counted = [&calls](const std::vector<at::Tensor>& in) {
    ++calls;
    return TwoInTwoOut(in);
  };
  std::vector<at::Tensor> ckpt = Checkpoint(counted, {ca, cb});
  EXPECT_TRUE(at::equal(ckpt[0], plain[0]));
  EXPECT_TRUE(at::equal(ckpt[1], plain[1]));
  EXPECT_EQ(calls, 1);  // nothing recomputed before backward
  ((ckpt[0] * w).sum() + ckpt[1].sum()).backward();
  EXPECT_EQ(calls, 2);

  EXPECT_TRUE(at::equal(ca.grad(), a.grad()));
  EXPECT_TRUE(at::equal(cb.grad(), b.grad()));
}

// The gradient a checkpoint hands back is the one the plain graph hands on, layout and all: a
// slice of a concatenation's gradient, not a contiguous copy of it, so that a BatchNorm before
// the checkpoint reduces it as in the plain step (a copy rounds differently).
TEST(Checkpoint, HandsBackTheGradientAsThePlainGraphLaysItOut) {
  for (int seed = 0; seed < 8; ++seed) {
    at::manual_seed(seed);
    const at::Tensor x0 = at::randn({6, 4});
    const at::Tensor row = at::randn({1, 4});
    const at::Tensor w = at::randn({8, 4});
    auto mix = [&](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{at::cat({in[0], row.expand({6, 4})}, 1).matmul(w)};
    };
    auto norm = [](const at::Tensor& x, const at::Tensor& weight) {
      return at::batch_norm(x, weight, at::Tensor(), at::Tensor(), at::Tensor(),
                            /*training=*/true, 0.1, 1e-5, /*cudnn_enabled=*/false);
    };
    at::Tensor x = x0.clone().requires_grad_(true);
    at::Tensor weight = at::ones({4}).requires_grad_(true);
    mix({norm(x, weight)})[0].square().sum().backward();

    at::Tensor cx = x0.clone().requires_grad_(true);
    at::Tensor cweight = at::ones({4}).requires_grad_(true);
    Checkpoint(mix, {norm(cx, cweight)})[0].square().sum().backward();
    EXPECT_TRUE(at::equal(cweight.grad(), weight.grad())) << "seed " << seed;
    EXPECT_TRUE(at::equal(cx.grad(), x.grad())) << "seed " << seed;
  }
}

TEST(Checkpoint, KeepsNoIntermediateTensors) {
  // Plain autograd keeps a, b, sin's input... the checkpointed call keeps only its inputs,
  // so the only graph node between outputs and inputs is the checkpoint itself.
  at::Tensor a = at::randn({3}).requires_grad_(true);
  at::Tensor b = at::randn({3}).requires_grad_(true);
  std::vector<at::Tensor> out = Checkpoint(TwoInTwoOut, {a, b});
  ASSERT_NE(out[0].grad_fn(), nullptr);
  EXPECT_EQ(out[0].grad_fn(), out[1].grad_fn());
  EXPECT_THAT(out[0].grad_fn()->name(), ::testing::HasSubstr("CheckpointFunction"));
}

TEST(Checkpoint, InputsWithoutGradGetNoneAndParametersStillGetTheirs) {
  at::manual_seed(2);
  const at::Tensor weight = at::randn({4, 6}).requires_grad_(true);
  const at::Tensor bias = at::randn({4}).requires_grad_(true);
  const at::Tensor x0 = at::randn({3, 6});
  const at::Tensor index = at::tensor(std::vector<int64_t>{2, 0, 1}, at::kLong);  // integers
  auto fn = [&](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{at::linear(in[0], weight, bias).index_select(0, in[1]).tanh()};
  };

  // Plain autograd, x without grad: only the parameters get gradients.
  fn({x0, index})[0].sum().backward();
  const at::Tensor weight_grad = weight.grad().clone();
  const at::Tensor bias_grad = bias.grad().clone();
  weight.mutable_grad().reset();
  bias.mutable_grad().reset();

  // No input requires grad at all: the checkpoint must still be recorded and recomputed.
  at::Tensor x = x0.clone();
  std::vector<at::Tensor> out = Checkpoint(fn, {x, index});
  ASSERT_TRUE(out[0].requires_grad());
  out[0].sum().backward();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(weight.grad().equal(weight_grad));
  EXPECT_TRUE(bias.grad().equal(bias_grad));
}

TEST(Checkpoint, IntegerOutputsAreNotDifferentiableAndUnusedOutputsAreFine) {
  at::Tensor x = at::randn({4, 5}).requires_grad_(true);
  auto fn = [](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{in[0].relu(), in[0].argmax(1), in[0] * 3};
  };
  std::vector<at::Tensor> out = Checkpoint(fn, {x});
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_FALSE(out[1].requires_grad());
  EXPECT_EQ(out[1].scalar_type(), at::kLong);
  out[0].sum().backward();  // outputs 1 and 2 get no gradient
  EXPECT_TRUE(at::equal(x.grad(), (x.detach() > 0).to(at::kFloat)));
}

// Dropout inside a checkpoint: the recomputation must draw the same mask as the forward.
TEST(Checkpoint, RngReplayReproducesDropout) {
  auto fn = [](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{at::dropout(in[0] * 2, /*p=*/0.5, /*train=*/true)};
  };
  const at::Tensor x0 = at::randn({64, 64});

  at::manual_seed(7);
  at::Tensor x = x0.clone().requires_grad_(true);
  fn({x})[0].sum().backward();
  const double next_plain = at::rand({1}).item<double>();

  at::manual_seed(7);
  at::Tensor cx = x0.clone().requires_grad_(true);
  std::vector<at::Tensor> out = Checkpoint(fn, {cx});
  at::rand({1});  // draws between forward and backward must not disturb the replay...
  out[0].sum().backward();
  EXPECT_TRUE(at::equal(cx.grad(), x.grad()));

  // ...and backward leaves the generator where the program's own stream had it.
  at::manual_seed(7);
  at::Tensor rx = x0.clone().requires_grad_(true);
  std::vector<at::Tensor> rout = Checkpoint(fn, {rx});
  rout[0].sum().backward();
  EXPECT_EQ(at::rand({1}).item<double>(), next_plain);
}

TEST(Checkpoint, WithoutRngReplayDropoutMasksDiffer) {
  // The control for the test above: with replay off, the recomputed mask is a new draw, so
  // the gradient no longer matches (the chance that 4096 p=0.5 draws agree is 2^-4096).
  auto fn = [](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{at::dropout(in[0], 0.5, true)};
  };
  at::manual_seed(3);
  at::Tensor x = at::randn({64, 64}).requires_grad_(true);
  at::Tensor plain_x = x.detach().clone().requires_grad_(true);
  at::manual_seed(4);
  fn({plain_x})[0].sum().backward();
  at::manual_seed(4);
  std::vector<at::Tensor> out = Checkpoint(fn, {x}, {/*preserve_rng_state=*/false});
  out[0].sum().backward();
  EXPECT_FALSE(at::equal(x.grad(), plain_x.grad()));
}

TEST(Checkpoint, RecomputesOncePerCheckpointPerBackward) {
  int calls = 0;
  auto fn = [&calls](const std::vector<at::Tensor>& in) {
    ++calls;
    return std::vector<at::Tensor>{in[0].sigmoid()};
  };
  at::Tensor x = at::randn({8}).requires_grad_(true);
  std::vector<at::Tensor> h = {x};
  for (int i = 0; i < 3; ++i) h = Checkpoint(fn, h);
  EXPECT_EQ(calls, 3);
  h[0].sum().backward();
  EXPECT_EQ(calls, 6);
  EXPECT_TRUE(x.grad().defined());
}

// A norm's output dropped until backward: the same gradients as plain autograd, the output's
// storage empty between forward and backward, and once backward has used what it reran, nothing
// of it held. A backward call keeps its graph's nodes (and the hooks on them) until it returns,
// and the caller may keep them longer, here by holding `results`: what was rerun must live only
// as long as the consumer's backward needs it.
TEST(Checkpoint, DroppingOutputHoldsNothingOnceTheConsumersBackwardIsDone) {
  at::manual_seed(4);
  const at::Tensor x0 = at::randn({4, 6});
  const at::Tensor w = at::randn({6, 5}).requires_grad_(true);
  auto norm = [](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{at::layer_norm(in[0], {6})};
  };
  const at::Tensor leaf = x0.clone().requires_grad_(true);
  at::matmul(norm({leaf * 2})[0], w).sum().backward();
  const at::Tensor plain_leaf_grad = leaf.grad().clone();
  const at::Tensor plain_w_grad = w.grad().clone();
  w.mutable_grad().reset();

  const at::Tensor dropped_leaf = x0.clone().requires_grad_(true);
  c10::weak_intrusive_ptr<c10::StorageImpl> output(c10::intrusive_ptr<c10::StorageImpl>{});
  c10::weak_intrusive_ptr<c10::StorageImpl> input(c10::intrusive_ptr<c10::StorageImpl>{});
  std::vector<at::Tensor> results;
  {
    const at::Tensor x = dropped_leaf * 2;  // an input only the primitive holds from here on
    input = x.storage().getWeakStorageImpl();
    results = CheckpointDroppingOutput(norm, {x}, [&](const std::vector<at::Tensor>& out) {
      output = out[0].storage().getWeakStorageImpl();
      return std::vector<at::Tensor>{at::matmul(out[0], w)};
    });
  }
  ASSERT_FALSE(output.expired());
  EXPECT_EQ(output.lock()->nbytes(), 0u);  // dropped until backward
  results[0].sum().backward();
  EXPECT_TRUE(at::equal(dropped_leaf.grad(), plain_leaf_grad));
  EXPECT_TRUE(at::equal(w.grad(), plain_w_grad));
  EXPECT_TRUE(output.expired());
  EXPECT_TRUE(input.expired());
}

TEST(Checkpoint, WithoutGradModeRunsOnceAndRecordsNothing) {
  at::Tensor x = at::randn({8}).requires_grad_(true);
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> out = Checkpoint(
      [](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{in[0] * 2}; }, {x});
  EXPECT_FALSE(out[0].requires_grad());
  EXPECT_EQ(out[0].grad_fn(), nullptr);
}

// A generated function of one tensor: ops in order, most drawing random numbers from the default
// generator (dropout of any p, noise, a Bernoulli mask, a column shuffle), some none.
struct RandomOps {
  std::vector<int> kinds;  // 0 dropout, 1 noise, 2 bernoulli, 3 shuffle, 4 tanh
  std::vector<double> p;
  at::Tensor Run(at::Tensor x, size_t begin, size_t end) const {
    for (size_t k = begin; k < end; ++k) {
      switch (kinds[k]) {
        case 0:
          x = at::dropout(x, p[k], /*train=*/true);
          break;
        case 1:
          x = x + 0.1 * at::randn_like(x);
          break;
        case 2:
          x = x * at::bernoulli(at::full_like(x, 1 - p[k]));
          break;
        case 3:
          x = x.index_select(1, at::randperm(x.size(1)));
          break;
        default:
          x = x.tanh();
      }
    }
    return x;
  }
};

// RNG replay on generated functions: ops [a, b) under a checkpoint and [c, d) within it under
// another, draws between the forward and the backward, against plain autograd from the same
// seed: the gradients bitwise, and, where nothing draws in between, the generator left where
// the plain step leaves it.
RC_GTEST_PROP(Checkpoint, NestedCheckpointsReplayEveryDraw, ()) {
  RandomOps ops;
  const size_t n = *rc::gen::inRange<size_t>(1, 8).as("ops");
  for (size_t k = 0; k < n; ++k) {
    ops.kinds.push_back(*rc::gen::inRange(0, 5));
    ops.p.push_back(*rc::gen::element(0.0, 0.1, 0.5, 0.9));
  }
  const size_t a = *rc::gen::inRange<size_t>(0, n).as("a");
  const size_t b = *rc::gen::inRange<size_t>(a + 1, n + 1).as("b");
  const size_t c = *rc::gen::inRange<size_t>(a, b).as("c");
  const size_t d = *rc::gen::inRange<size_t>(c + 1, b + 1).as("d");
  const bool draw_between = *rc::gen::arbitrary<bool>();
  const uint64_t seed = *rc::gen::inRange<uint64_t>(0, 1 << 20);
  at::manual_seed(seed);
  const at::Tensor x0 = at::randn({*rc::gen::inRange<int64_t>(1, 5), 8});
  const at::Tensor w = at::randn({8});

  at::manual_seed(seed + 1);
  at::Tensor x = x0.clone().requires_grad_(true);
  (ops.Run(x, 0, n) * w).sum().backward();
  const at::Tensor next_plain = at::rand({4});

  at::manual_seed(seed + 1);
  at::Tensor cx = x0.clone().requires_grad_(true);
  at::Tensor y = ops.Run(cx, 0, a);
  y = Checkpoint(
      [&](const std::vector<at::Tensor>& in) {
        at::Tensor z = ops.Run(in[0], a, c);
        z = Checkpoint(
            [&](const std::vector<at::Tensor>& inner) {
              return std::vector<at::Tensor>{ops.Run(inner[0], c, d)};
            },
            {z})[0];
        return std::vector<at::Tensor>{ops.Run(z, d, b)};
      },
      {y})[0];
  y = ops.Run(y, b, n);
  if (draw_between) at::rand({16});  // must not change what the reruns draw
  (y * w).sum().backward();
  RC_ASSERT(at::equal(cx.grad(), x.grad()));
  if (!draw_between) RC_ASSERT(at::equal(at::rand({4}), next_plain));
}

}  // namespace
}  // namespace ckpt
