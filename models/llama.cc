#include "models/llama.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ATen/TensorOperators.h"
#include "ATen/core/grad_mode.h"
#include "ATen/ops/arange.h"
#include "ATen/ops/cat.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/ones.h"
#include "ATen/ops/pow.h"
#include "ATen/ops/rsqrt.h"
#include "ATen/ops/silu.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/plan/spec.h"
#include "core/run/chain_model.h"
#include "models/layers.h"
#include "models/model_init.h"
#include "models/module_model.h"
#include "models/nn.h"
#include "torch/csrc/autograd/custom_function.h"

namespace ckpt {
namespace {

struct RmsNormNode : torch::autograd::Function<RmsNormNode> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, double eps) {
    const at::Tensor r = at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
    ctx->save_for_backward({x, weight, r});
    return x * r * weight;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &r = saved[2];
    const at::Tensor normed = x * r;
    const at::Tensor gw = grads[0] * weight;
    const at::Tensor gx = r * (gw - normed * (gw * normed).mean(-1, /*keepdim=*/true));
    const at::Tensor gweight = (grads[0] * normed).sum_to_size(weight.sizes());
    return {gx, gweight, at::Tensor()};
  }
};

}  // namespace

at::Tensor RmsNormFunction(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return RmsNormNode::apply(x, weight, eps);
}

at::Tensor Rotary(const at::Tensor& x, int64_t offset) {
  const int64_t s = x.size(2), d = x.size(3), half = d / 2;
  const at::Tensor inverse = at::pow(10000.0, at::arange(half, x.options()) * (-2.0 / d));
  const at::Tensor angles =
      at::arange(offset, offset + s, x.options()).unsqueeze(1) * inverse.unsqueeze(0);
  const at::Tensor cos = angles.cos(), sin = angles.sin();
  const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

namespace {

struct Size {
  const char* name;
  int64_t depth, hidden, heads, kv_heads, mlp;
};
// Touvron et al.'s 7B and 13B (6,738,415,616 and 13,015,864,320 parameters at vocabulary
// 32000), and a tiny one for tests.
constexpr Size kSizes[] = {
    {"tiny", 2, 64, 4, 2, 172}, {"7b", 32, 4096, 32, 32, 11008}, {"13b", 40, 5120, 40, 40, 13824}};

Linear Dense(ParamSet& set, int64_t in, int64_t out) {
  return Linear(set, in, out, /*with_bias=*/false);
}

// [B, S, heads x d] -> [B, heads, S, d], contiguous (see SelfAttention::Core).
at::Tensor SplitHeads(const at::Tensor& t, int64_t heads) {
  return t.view({t.size(0), t.size(1), heads, t.size(2) / heads}).transpose(1, 2).contiguous();
}

// The size's shape with the spec's overrides.
Size Resolved(const ParamValues& params) {
  Size size = kSizes[0];
  for (const Size& s : kSizes) {
    if (params.Text("size") == s.name) size = s;
  }
  size.depth = params.IntOr("depth", size.depth);
  size.hidden = params.IntOr("hidden", size.hidden);
  size.heads = params.IntOr("heads", size.heads);
  size.kv_heads = params.IntOr("kv_heads", size.kv_heads);
  size.mlp = params.IntOr("mlp", size.mlp);
  return size;
}

struct LlamaOptions {
  int64_t depth = 2;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t kv_heads = 4;
  int64_t mlp = 172;  // the SwiGLU's width
  int64_t vocab = 32000;
  double norm_eps = 1e-5;
};

class RmsNorm {
 public:
  RmsNorm() = default;
  RmsNorm(ParamSet& set, int64_t hidden, double eps)
      : eps_(eps), weight_(set.AddParameter(at::ones({hidden}))) {}
  at::Tensor operator()(const at::Tensor& x) const { return RmsNormFunction(x, weight_, eps_); }

 private:
  double eps_ = 0;
  at::Tensor weight_;
};

class Llama : public ParamSet {
 public:
  explicit Llama(const LlamaOptions& options_) : options(options_) {
    const int64_t h = options.hidden, kv = h / options.heads * options.kv_heads;
    embedding_ = Embedding(*this, options.vocab, h);
    {
      const at::NoGradGuard no_grad;
      embedding_.weight.normal_(0, 0.02);
    }
    for (int64_t b = 0; b < options.depth; ++b) {
      Block block;
      block.norm1 = RmsNorm(*this, h, options.norm_eps);
      block.q = Dense(*this, h, h);
      block.k = Dense(*this, h, kv);
      block.v = Dense(*this, h, kv);
      block.o = Dense(*this, h, h);
      block.norm2 = RmsNorm(*this, h, options.norm_eps);
      block.gate = Dense(*this, h, options.mlp);
      block.up = Dense(*this, h, options.mlp);
      block.down = Dense(*this, options.mlp, h);
      blocks_.push_back(block);
    }
    norm_ = RmsNorm(*this, h, options.norm_eps);
    head_ = Dense(*this, h, options.vocab);
  }
  // The embedding has no parts. The blocks' stages run their positions in the chunks of their
  // part "sequence"; the attention core (grouped keys and values spread to every head, scores,
  // probabilities) is the part "core", the SwiGLU's gate and up products and their product
  // "hidden", each stage's RMSNorm "norm".
  at::Tensor Embed(const at::Tensor& tokens) { return embedding_(tokens); }
  at::Tensor AttentionStage(int64_t b, const at::Tensor& x, const StageParts& parts) {
    Block& block = blocks_[b];
    const int64_t heads = options.heads, kv_heads = options.kv_heads;
    const int64_t groups = heads / kv_heads;
    auto chunk = [&block, heads, groups, parts](const std::vector<at::Tensor>& in, int64_t offset) {
      const at::Tensor q = Rotary(SplitHeads(block.q(in[1]), heads), offset);
      // Each key and value head spread to the query heads of its group, inside the core, so that
      // a recomputed core keeps only the grouped ones.
      const bool fused = parts.Fused("core");
      auto core = [offset, groups, fused](const std::vector<at::Tensor>& qkv) {
        const at::Tensor k_t = groups == 1 ? qkv[1] : qkv[1].repeat_interleave(groups, 1);
        const at::Tensor v = groups == 1 ? qkv[2] : qkv[2].repeat_interleave(groups, 1);
        return std::vector<at::Tensor>{SelfAttention::Core(qkv[0], k_t, v, offset,
                                                           /*causal=*/true, /*dropout=*/0, 0,
                                                           fused)};
      };
      const at::Tensor context = parts.Run("core", core, {q, in[2], in[3]})[0];
      const at::Tensor merged = context.transpose(1, 2).reshape(
          {context.size(0), context.size(2), context.size(1) * context.size(3)});
      return std::vector<at::Tensor>{in[0] + block.o(merged)};
    };
    // RMSNorm1 of the whole sequence once (the part "norm"), then, reading it, the rotated keys
    // and the values, and the queries per chunk.
    auto norm = [&block](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{block.norm1(in[0])};
    };
    auto attend = [&block, kv_heads, x, parts, chunk](const std::vector<at::Tensor>& normed) {
      const at::Tensor k_t =
          Rotary(SplitHeads(block.k(normed[0]), kv_heads), 0).transpose(2, 3).contiguous();
      const at::Tensor v = SplitHeads(block.v(normed[0]), kv_heads);
      return parts.RunChunked("sequence", chunk, {x, normed[0], k_t, v}, {true, true, false, false},
                              1);
    };
    return parts.RunConsumed("norm", norm, {x}, attend)[0];
  }
  at::Tensor MlpStage(int64_t b, const at::Tensor& x, const StageParts& parts) {
    Block& block = blocks_[b];
    auto chunk = [&block, parts](const std::vector<at::Tensor>& in, int64_t) {
      // RMSNorm2 (the part "norm") read by the SwiGLU (the part "hidden", which holds it).
      auto mlp = [&block, parts](const std::vector<at::Tensor>& h) {
        return parts.RunConsumed(
            "norm",
            [&block](const std::vector<at::Tensor>& x) {
              return std::vector<at::Tensor>{block.norm2(x[0])};
            },
            h,
            [&block](const std::vector<at::Tensor>& n) {
              return std::vector<at::Tensor>{
                  block.down(at::silu(block.gate(n[0])) * block.up(n[0]))};
            });
      };
      return std::vector<at::Tensor>{in[0] + parts.Run("hidden", mlp, {in[0]})[0]};
    };
    return parts.RunChunked("sequence", chunk, {x}, {true}, 1)[0];
  }
  // Mean next-token cross-entropy of the final hidden states against `targets`.
  at::Tensor HeadLoss(const at::Tensor& x, const at::Tensor& targets, const StageParts& parts) {
    // Summed per chunk, divided once: the mean over every token, whatever the chunking.
    auto chunk = [this](const std::vector<at::Tensor>& in, int64_t) {
      const at::Tensor logits = head_(norm_(in[0]));
      return std::vector<at::Tensor>{at::cross_entropy_loss(logits.flatten(0, 1), in[1].flatten(),
                                                            /*weight=*/{}, at::Reduction::Sum)};
    };
    const at::Tensor sum = parts.RunChunked("sequence", chunk, {x, targets}, {true, true}, 1)[0];
    return sum / static_cast<double>(targets.numel());
  }

  LlamaOptions options;

 private:
  struct Block {
    RmsNorm norm1, norm2;
    Linear q, k, v, o;
    Linear gate, up, down;
  };
  Embedding embedding_;
  std::vector<Block> blocks_;
  RmsNorm norm_;
  Linear head_;
};

class LlamaModel : public DecoderModel<Llama> {
 public:
  static std::vector<ParamDef> Params() {
    return SizeParams(
        {"tiny", "7b", "13b"},
        "tiny: 2 layers, 64 wide, 4 heads, 2 key/value heads, SwiGLU 172 wide; 7b: 32, "
        "4096, 32, 32, 11008; 13b: 40, 5120, 40, 40, 13824",
        {
            IntParam("kv_heads", "auto",
                     "key/value heads, each shared by heads / kv_heads query heads; "
                     "auto = the size's")
                .Min(1)
                .Max(1024)
                .AllowAuto(),
            IntParam("mlp", "auto", "the SwiGLU's width; auto = the size's")
                .Min(1)
                .Max(1 << 20)
                .AllowAuto(),
            IntParam("seq", "256", "tokens per sequence").Min(1).Max(1 << 20).Scales(2),
            IntParam("batch", "1", "sequences per batch").Min(1).Max(1 << 16).Scales(1),
            IntParam("vocab", "32000", "vocabulary size").Min(2).Max(1 << 24),
        },
        "query heads");
  }
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context) {
    const Size size = Resolved(params);
    LlamaOptions options;
    options.depth = size.depth;
    options.hidden = size.hidden;
    options.heads = size.heads;
    options.kv_heads = size.kv_heads;
    options.mlp = size.mlp;
    options.vocab = params.Int("vocab");
    std::unique_ptr<Llama> net =
        InitSeeded(context.init_seed, [&] { return std::make_unique<Llama>(options); });
    // The canonical spec names the resolved shape.
    const std::string spec = params.Canonical({{"depth", size.depth},
                                               {"hidden", size.hidden},
                                               {"heads", size.heads},
                                               {"kv_heads", size.kv_heads},
                                               {"mlp", size.mlp}});
    return std::make_shared<LlamaModel>(params, spec, std::move(net), size.depth, context.device);
  }
  // The full sizes do not fit a CPU's memory, nor a GPU's at full depth in float32: the paper
  // preset leaves them to --models.
  static std::vector<std::string> PaperSpecs() { return {}; }
  static std::string SmallSpec(const SpecChooser& choose) {
    const int64_t kv_heads = choose("kv_heads", 1, 2),
                  groups = choose("query heads per kv head", 1, 3);
    const int64_t half_width = choose("half head width", 1, 3);
    const int64_t heads = kv_heads * groups;
    const int64_t seq = choose("seq", 1, 9);
    const int64_t vocab = choose("vocabulary far larger than seq", 0, 1)
                              ? choose("vocab", 200, 1999)
                              : choose("vocab", 2, 39);
    return absl::StrCat("llama:depth=", choose("depth", 1, 2), ":hidden=", heads * 2 * half_width,
                        ":heads=", heads, ":kv_heads=", kv_heads, ":mlp=", choose("mlp", 1, 12),
                        ":seq=", seq, ":batch=", choose("batch", 1, 2), ":vocab=", vocab);
  }
  // hidden a multiple of heads, heads a multiple of kv_heads, an even head width (after the
  // size's defaults).
  static absl::Status Check(const ParamValues& params) {
    const Size size = Resolved(params);
    if (size.hidden % size.heads != 0 || (size.hidden / size.heads) % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "llama: hidden=", size.hidden, " is not heads=", size.heads,
          " times an even head width; accepted: hidden = heads x an even width (rotary pairs)"));
    }
    if (size.heads % size.kv_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "llama: heads=", size.heads, " is not a multiple of kv_heads=", size.kv_heads,
          "; accepted: kv_heads dividing heads"));
    }
    return absl::OkStatus();
  }

  static std::vector<StageInfo> StagesFor(const ParamValues& params) {
    const Size size = Resolved(params);
    const double seq = static_cast<double>(params.Int("seq"));
    const double t = static_cast<double>(params.Int("batch")) * seq;
    const double h = static_cast<double>(size.hidden);
    const double kv = h / static_cast<double>(size.heads) * static_cast<double>(size.kv_heads);
    std::vector<StageInfo> stages;
    stages.push_back({"embedding", StageKind::kEmbedding, /*stochastic=*/false, {}, 0, ""});
    // Q and O: 2 t h^2 each; K and V: 2 t h kv each; scores and probabilities x values:
    // 2 t seq h each. The SwiGLU: three products of t x h x mlp.
    AppendBlockStages(size.depth, params.Int("seq"), /*stochastic=*/false, /*pre_norm=*/true,
                      4 * t * h * h + 4 * t * h * kv + 4 * t * seq * h,
                      6 * t * h * static_cast<double>(size.mlp), &stages);
    stages.push_back(
        LmHeadStage(params.Int("seq"), t, h, static_cast<double>(params.Int("vocab"))));
    return stages;
  }

  using DecoderModel::DecoderModel;
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
};

const ModelRegistration<LlamaModel> registration(
    "llama",
    "Llama-style decoder: embedding, depth x (RMSNorm, rotary grouped-query causal attention + "
    "RMSNorm, SwiGLU MLP), untied LM head with its loss",
    "llama:size=tiny:depth=4:hidden=256:heads=4:kv_heads=2:mlp=688:seq=128:batch=2:vocab=8192");

}  // namespace
}  // namespace ckpt
