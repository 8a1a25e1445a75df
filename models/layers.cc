#include "models/layers.h"

#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/Context.h"
#include "ATen/TensorOperators.h"
#include "ATen/ops/arange.h"
#include "ATen/ops/gelu.h"
#include "ATen/ops/matmul.h"
#include "ATen/ops/randint.h"
#include "ATen/ops/relu.h"
#include "ATen/ops/scalar_tensor.h"
#include "ATen/ops/softmax.h"
#include "ATen/ops/where.h"
#include "absl/strings/str_cat.h"
#include "core/run/torch_compat.h"
#include "torch/version.h"
#if CKPT_TORCH_VERSION_AT_LEAST(2, 0)
#include "ATen/ops/scaled_dot_product_attention.h"
#endif

namespace ckpt {

LinearStack::LinearStack(const std::vector<int64_t>& widths, bool relu_last)
    : relu_last_(relu_last) {
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    layers_.push_back(Linear(*this, widths[i], widths[i + 1]));
  }
}

at::Tensor LinearStack::forward_layer(int64_t i, const at::Tensor& x) const {
  const at::Tensor y = layers_[i](x);
  return i + 1 == static_cast<int64_t>(layers_.size()) && !relu_last_ ? y : at::relu(y);
}

std::vector<at::Tensor> LinearStack::RunLayer(int64_t i, const std::vector<at::Tensor>& inputs,
                                              const StageParts& parts) const {
  return parts.RunChunked(
      "rows",
      [this, i](const std::vector<at::Tensor>& x, int64_t) {
        return std::vector<at::Tensor>{forward_layer(i, x[0])};
      },
      inputs, {true}, /*dim=*/0);
}

std::vector<ParamDef> SizeParams(const std::vector<std::string>& sizes,
                                 const std::string& described, std::vector<ParamDef> rest,
                                 const std::string& heads_are) {
  std::vector<ParamDef> params = {
      ChoiceParam("size", sizes, sizes.front(), described),
      IntParam("depth", "auto", "blocks; auto = the size's").Min(1).Max(1000).AllowAuto(),
      IntParam("hidden", "auto", "width; auto = the size's").Min(1).Max(1 << 16).AllowAuto(),
      IntParam("heads", "auto", heads_are + "; auto = the size's").Min(1).Max(1024).AllowAuto()};
  params.insert(params.end(), rest.begin(), rest.end());
  return params;
}
namespace {
constexpr int64_t kMask31 = (int64_t{1} << 31) - 1;
// Odd multipliers below 2^31, so products of 31-bit values stay inside int64.
constexpr int64_t kMix1 = 0x45d9f3b;
constexpr int64_t kMix2 = 0x2c1b3c6d;
}  // namespace

int64_t DrawDropoutSeed() {
  at::Generator gen = at::globalContext().defaultGenerator(c10::DeviceType::CPU);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return static_cast<int64_t>(gen.get<at::CPUGeneratorImpl>()->random() & kMask31);
}

at::Tensor CounterDropout(const at::Tensor& x, double p, int64_t seed, int64_t dim, int64_t offset,
                          int64_t full_length) {
  if (p <= 0) return x;
  const int64_t rank = x.dim();
  // Row-major strides of the whole tensor; the index of an element is the sum over dims of
  // its coordinate times the stride, built by broadcasting one arange per dim.
  std::vector<int64_t> strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * (d + 1 == dim ? full_length : x.size(d + 1));
  }
  const auto long_options = x.options().dtype(at::kLong);
  at::Tensor h;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t start = d == dim ? offset : 0;
    std::vector<int64_t> shape(rank, 1);
    shape[d] = x.size(d);
    at::Tensor coordinate =
        at::arange(start, start + x.size(d), long_options).mul_(strides[d]).view(shape);
    h = h.defined() ? h + coordinate : coordinate;
  }
  // Multiply-xorshift hashing inside 31 bits, with the seed mixed in after the first round.
  h = h.mul(kMix1).bitwise_and_(kMask31);
  h.bitwise_xor_(h.__rshift__(16)).bitwise_xor_(seed);
  h.mul_(kMix2).bitwise_and_(kMask31);
  h.bitwise_xor_(h.__rshift__(15));
  h.mul_(kMix1).bitwise_and_(kMask31);
  h.bitwise_xor_(h.__rshift__(16));
  const int64_t threshold = static_cast<int64_t>(std::llround(p * (int64_t{1} << 24)));
  const at::Tensor keep = h.bitwise_and_((int64_t{1} << 24) - 1).ge(threshold);
  h.reset();
  return at::where(keep, x * (1.0 / (1.0 - p)), at::scalar_tensor(0, x.options()));
}

SelfAttention::SelfAttention(ParamSet& set, int64_t hidden, int64_t heads)
    : heads_(heads),
      q_(set, hidden, hidden),
      k_(set, hidden, hidden),
      v_(set, hidden, hidden),
      o_(set, hidden, hidden) {}

namespace {
// Contiguous: see Core in layers.h.
at::Tensor SplitHeads(const at::Tensor& t, int64_t heads) {
  return t.view({t.size(0), t.size(1), heads, t.size(2) / heads}).transpose(1, 2).contiguous();
}
}  // namespace

at::Tensor SelfAttention::Queries(const at::Tensor& x) const { return SplitHeads(q_(x), heads_); }
at::Tensor SelfAttention::KeysTransposed(const at::Tensor& x) const {
  return SplitHeads(k_(x), heads_).transpose(2, 3).contiguous();
}
at::Tensor SelfAttention::Values(const at::Tensor& x) const { return SplitHeads(v_(x), heads_); }

std::string FusedAttentionUnavailable(bool dropout) {
  if (!compat::kHasFusedAttention) {
    return absl::StrCat("LibTorch ", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".",
                        TORCH_VERSION_PATCH,
                        " has no scaled_dot_product_attention (2.0 and newer have it)");
  }
  if (dropout) {
    return "it drops attention probabilities, which a fused kernel does with the generator, "
           "and reruns and chunks would draw other masks; a fused core needs dropout=0";
  }
  return "";
}

at::Tensor SelfAttention::Core(const at::Tensor& q, const at::Tensor& k_t, const at::Tensor& v,
                               int64_t q_offset, bool causal, double dropout, int64_t seed,
                               bool fused) {
  const int64_t sq = q.size(2);
  const int64_t skv = k_t.size(3);
  if (fused) {
    const std::string unavailable = FusedAttentionUnavailable(dropout > 0);
    TORCH_CHECK(unavailable.empty(), "the attention core cannot run fused: ", unavailable);
#if CKPT_TORCH_VERSION_AT_LEAST(2, 0)
    // The fused kernels want each head's rows contiguous (a transposed key falls back to the
    // unfused arithmetic). Causal: is_causal aligns the mask top-left, right for queries from
    // position 0; a later chunk's queries get the mask itself (true: attend).
    const at::Tensor k = k_t.transpose(2, 3).contiguous();
    if (!causal || q_offset == 0) {
      return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                              /*is_causal=*/causal);
    }
    const auto long_options = q.options().dtype(at::kLong);
    const at::Tensor visible = at::arange(skv, long_options).unsqueeze(0) <=
                               at::arange(q_offset, q_offset + sq, long_options).unsqueeze(1);
    return at::scaled_dot_product_attention(q, k, v, visible);
#endif
  }
  at::Tensor scores = at::matmul(q, k_t) * (1.0 / std::sqrt(q.size(3)));
  if (causal) {
    const auto long_options = q.options().dtype(at::kLong);
    const at::Tensor future = at::arange(skv, long_options).unsqueeze(0) >
                              at::arange(q_offset, q_offset + sq, long_options).unsqueeze(1);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  }
  at::Tensor probs = at::softmax(scores, -1);
  scores.reset();
  if (dropout > 0) probs = CounterDropout(probs, dropout, seed, /*dim=*/2, q_offset, skv);
  return at::matmul(probs, v);
}

at::Tensor SelfAttention::Output(const at::Tensor& context) const {
  const at::Tensor merged = context.transpose(1, 2).reshape(
      {context.size(0), context.size(2), context.size(1) * context.size(3)});
  return o_(merged);
}

FeedForward::FeedForward(ParamSet& set, int64_t hidden, bool tanh_gelu)
    : tanh_gelu_(tanh_gelu), fc1_(set, hidden, 4 * hidden), fc2_(set, 4 * hidden, hidden) {}

at::Tensor FeedForward::operator()(const at::Tensor& x) const {
  return fc2_(at::gelu(fc1_(x), tanh_gelu_ ? "tanh" : "none"));
}

// Made in the order its parameters are listed (LN1, attention, LN2, MLP), which is not the
// members' order.
PreNormBlock::PreNormBlock(ParamSet& set, int64_t hidden, int64_t heads, bool causal,
                           bool tanh_gelu)
    : causal_(causal) {
  ln1_ = LayerNorm(set, hidden);
  attention_ = SelfAttention(set, hidden, heads);
  ln2_ = LayerNorm(set, hidden);
  mlp_ = FeedForward(set, hidden, tanh_gelu);
}

at::Tensor PreNormBlock::AttentionStage(const at::Tensor& x, const StageParts& parts,
                                        double p) const {
  const int64_t seq = x.size(1);
  const int64_t attention_seed = DrawDropoutSeed();
  const int64_t residual_seed = DrawDropoutSeed();
  const bool causal = causal_;
  auto chunk = [this, p, seq, causal, attention_seed, residual_seed, parts](
                   const std::vector<at::Tensor>& in, int64_t offset) {
    const at::Tensor q = attention_.Queries(in[1]);
    const bool fused = parts.Fused("core");
    auto core = [offset, p, causal, attention_seed, fused](const std::vector<at::Tensor>& qkv) {
      return std::vector<at::Tensor>{
          SelfAttention::Core(qkv[0], qkv[1], qkv[2], offset, causal, p, attention_seed, fused)};
    };
    const at::Tensor context = parts.Run("core", core, {q, in[2], in[3]})[0];
    return std::vector<at::Tensor>{
        in[0] + CounterDropout(attention_.Output(context), p, residual_seed, 1, offset, seq)};
  };
  // LN1 of the whole sequence once (the part "norm"), then, reading it, its keys and values and
  // the queries per chunk.
  auto norm = [this](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{ln1_(in[0])};
  };
  auto attend = [this, x, parts, chunk](const std::vector<at::Tensor>& normed) {
    const at::Tensor k = attention_.KeysTransposed(normed[0]);
    const at::Tensor v = attention_.Values(normed[0]);
    return parts.RunChunked("sequence", chunk, {x, normed[0], k, v}, {true, true, false, false}, 1);
  };
  return parts.RunConsumed("norm", norm, {x}, attend)[0];
}

at::Tensor PreNormBlock::MlpStage(const at::Tensor& x, const StageParts& parts, double p) const {
  const int64_t seq = x.size(1);
  const int64_t seed = DrawDropoutSeed();
  auto chunk = [this, p, seq, seed, parts](const std::vector<at::Tensor>& in, int64_t offset) {
    // LN2 (the part "norm") read by the MLP (the part "hidden", which holds it).
    auto mlp = [this, parts](const std::vector<at::Tensor>& h) {
      return parts.RunConsumed(
          "norm",
          [this](const std::vector<at::Tensor>& x) { return std::vector<at::Tensor>{ln2_(x[0])}; },
          h,
          [this](const std::vector<at::Tensor>& n) { return std::vector<at::Tensor>{mlp_(n[0])}; });
    };
    const at::Tensor y = parts.Run("hidden", mlp, {in[0]})[0];
    return std::vector<at::Tensor>{in[0] + CounterDropout(y, p, seed, 1, offset, seq)};
  };
  return parts.RunChunked("sequence", chunk, {x}, {true}, 1)[0];
}

void AppendBlockStages(int64_t depth, int64_t tokens, int64_t seq, int64_t hidden, bool stochastic,
                       bool pre_norm, std::vector<StageInfo>* stages) {
  const double t = static_cast<double>(tokens);
  const double h = static_cast<double>(hidden);
  AppendBlockStages(depth, seq, stochastic, pre_norm,
                    8 * t * h * h + 4 * t * static_cast<double>(seq) * h, 16 * t * h * h, stages);
}

void AppendBlockStages(int64_t depth, int64_t seq, bool stochastic, bool pre_norm,
                       double attention_flops, double mlp_flops, std::vector<StageInfo>* stages) {
  std::vector<PartInfo> attention = {AttentionCorePart(FusedAttentionUnavailable(stochastic)),
                                     SequencePart(seq)};
  std::vector<PartInfo> mlp = {MlpHiddenPart(), SequencePart(seq)};
  if (pre_norm) {
    attention.push_back(NormPart());
    mlp.push_back(NormPart());
  }
  for (int64_t b = 0; b < depth; ++b) {
    stages->push_back({absl::StrCat("block", b, ".attention"), StageKind::kAttention, stochastic,
                       attention, attention_flops, "block.attention"});
    stages->push_back({absl::StrCat("block", b, ".mlp"), StageKind::kMlp, stochastic, mlp,
                       mlp_flops, "block.mlp"});
  }
}

StageInfo LmHeadStage(int64_t seq, double tokens, double hidden, double vocab) {
  return {"head",
          StageKind::kHead,
          /*stochastic=*/false,
          {SequencePart(seq)},
          2 * tokens * hidden * vocab,
          ""};
}

Batch NextTokenBatch(uint64_t seed, int64_t vocab, int64_t batch, int64_t seq, c10::Device device) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor tokens = at::randint(vocab, {batch, seq + 1}, gen, at::kLong);
  return {{tokens.narrow(1, 0, seq).contiguous().to(device)},
          {tokens.narrow(1, 1, seq).contiguous().to(device)}};
}

}  // namespace ckpt
