// gpt2: a GPT-2 decoder (Radford et al. 2019) on synthetic token sequences.
//
// Stages: the embedding (token + position embeddings, dropout); per block an attention stage,
// x + Dropout(Attention(LN1(x))) with a causal mask, and an MLP stage,
// x + Dropout(W2 GELU_tanh(W1 LN2(x))); last the head: final LayerNorm, the LM head tied to
// the token embedding, and the next-token cross-entropy, so the head stage returns the loss
// (and chunking it never materialises all the logits at once). Dropout 0.1 on embeddings,
// attention probabilities and residual branches. No tokenizer, no downloaded weights: tokens
// are drawn from a seeded generator and the targets are the tokens shifted by one.

#include <memory>
#include <string>
#include <vector>

#include "ATen/TensorOperators.h"
#include "ATen/core/grad_mode.h"
#include "ATen/ops/arange.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/linear.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/plan/spec.h"
#include "core/run/chain_model.h"
#include "models/layers.h"
#include "models/model_init.h"
#include "models/module_model.h"
#include "models/nn.h"
#include "torch/arg.h"

namespace ckpt {
namespace {

struct Size {
  const char* name;
  int64_t depth, hidden, heads;
};
// Radford et al.'s four: 124M, 355M, 774M, 1558M parameters.
constexpr Size kSizes[] = {{"small", 12, 768, 12},
                           {"medium", 24, 1024, 16},
                           {"large", 36, 1280, 20},
                           {"xl", 48, 1600, 25}};

// The size's shape with the spec's overrides.
Size Resolved(const ParamValues& params) {
  Size size = kSizes[0];
  for (const Size& s : kSizes) {
    if (params.Text("size") == s.name) size = s;
  }
  size.depth = params.IntOr("depth", size.depth);
  size.hidden = params.IntOr("hidden", size.hidden);
  size.heads = params.IntOr("heads", size.heads);
  return size;
}

struct Gpt2Options {
  Gpt2Options(int64_t depth, int64_t hidden, int64_t heads)
      : depth_(depth), hidden_(hidden), heads_(heads) {}
  TORCH_ARG(int64_t, depth);
  TORCH_ARG(int64_t, hidden);
  TORCH_ARG(int64_t, heads);
  TORCH_ARG(int64_t, vocab) = 50257;
  TORCH_ARG(int64_t, context) = 1024;
  TORCH_ARG(double, dropout) = 0.1;
};

class Gpt2 : public ParamSet {
 public:
  explicit Gpt2(const Gpt2Options& options_) : options(options_) {
    const int64_t h = options.hidden();
    wte_ = Embedding(*this, options.vocab(), h);
    wpe_ = Embedding(*this, options.context(), h);
    {
      const at::NoGradGuard no_grad;
      wte_.weight.normal_(0, 0.02);  // GPT-2's initialisation; N(0, 1) would swamp the logits
      wpe_.weight.normal_(0, 0.01);
    }
    for (int64_t b = 0; b < options.depth(); ++b) {
      blocks_.emplace_back(*this, h, options.heads(), /*causal=*/true, /*tanh_gelu=*/true);
    }
    ln_f_ = LayerNorm(*this, h);
  }
  // The embedding has no parts. The other stages run their positions in the chunks of their
  // part "sequence"; the attention core is the part "core", the MLP with its LayerNorm (the
  // 4x-wide hidden activation) "hidden".
  at::Tensor Embed(const at::Tensor& tokens) {
    const double p = is_training() ? options.dropout() : 0.0;
    const int64_t seq = tokens.size(1);
    const at::Tensor positions = at::arange(seq, tokens.options().dtype(at::kLong));
    return CounterDropout(wte_(tokens) + wpe_(positions), p, DrawDropoutSeed(), 1, 0, seq);
  }
  at::Tensor AttentionStage(int64_t b, const at::Tensor& x, const StageParts& parts) {
    return blocks_[b].AttentionStage(x, parts, is_training() ? options.dropout() : 0.0);
  }
  at::Tensor MlpStage(int64_t b, const at::Tensor& x, const StageParts& parts) {
    return blocks_[b].MlpStage(x, parts, is_training() ? options.dropout() : 0.0);
  }
  // Mean next-token cross-entropy of the final hidden states against `targets`.
  at::Tensor HeadLoss(const at::Tensor& x, const at::Tensor& targets, const StageParts& parts) {
    // Summed per chunk, divided once: the mean over every token, whatever the chunking.
    auto chunk = [this](const std::vector<at::Tensor>& in, int64_t) {
      const at::Tensor logits = at::linear(ln_f_(in[0]), wte_.weight);
      return std::vector<at::Tensor>{at::cross_entropy_loss(logits.flatten(0, 1), in[1].flatten(),
                                                            /*weight=*/{}, at::Reduction::Sum)};
    };
    const at::Tensor sum = parts.RunChunked("sequence", chunk, {x, targets}, {true, true}, 1)[0];
    return sum / static_cast<double>(targets.numel());
  }

  Gpt2Options options;

 private:
  Embedding wte_, wpe_;
  std::vector<PreNormBlock> blocks_;
  LayerNorm ln_f_;
};

class Gpt2Model : public DecoderModel<Gpt2> {
 public:
  static std::vector<ParamDef> Params() {
    return SizeParams(
        {"small", "medium", "large", "xl"},
        "small: 12 layers, 768 wide, 12 heads; medium: 24, 1024, 16; large (774M): 36, "
        "1280, 20; xl (1558M): 48, 1600, 25",
        {
            IntParam("seq", "256", "tokens per sequence, at most context")
                .Min(1)
                .Max(1 << 20)
                .Scales(2),
            IntParam("batch", "2", "sequences per batch").Min(1).Max(1 << 16).Scales(1),
            IntParam("vocab", "50257", "vocabulary size").Min(2).Max(1 << 24),
            IntParam("context", "1024", "positions of the position embedding").Min(1).Max(1 << 20),
            FloatParam("dropout", "0.1", "dropout probability").Range(0, 0.95),
        });
  }
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context) {
    const Size size = Resolved(params);
    const int64_t depth = size.depth, hidden = size.hidden, heads = size.heads;
    const int64_t ctx = params.Int("context");
    std::unique_ptr<Gpt2> net = InitSeeded(context.init_seed, [&] {
      return std::make_unique<Gpt2>(Gpt2Options(depth, hidden, heads)
                                        .vocab(params.Int("vocab"))
                                        .context(ctx)
                                        .dropout(params.Float("dropout")));
    });
    // The canonical spec names the resolved shape.
    const std::string spec =
        params.Canonical({{"depth", depth}, {"hidden", hidden}, {"heads", heads}});
    return std::make_shared<Gpt2Model>(params, spec, std::move(net), depth, context.device);
  }
  static std::vector<std::string> PaperSpecs() {
    return {"gpt2:size=small:seq=256:batch=2", "gpt2:size=medium:seq=256:batch=2"};
  }
  static std::string SmallSpec(const SpecChooser& choose) {
    const int64_t heads = choose("heads", 1, 3), head_dim = choose("head width", 1, 6);
    const int64_t seq = choose("seq", 1, 9);
    // Vocabularies near the sequence's size, and far larger, as GPT-2's is (50257 against 1024
    // positions): the tied embedding's gradient then outweighs a stage's output.
    const int64_t vocab = choose("vocabulary far larger than seq", 0, 1)
                              ? choose("vocab", 200, 1999)
                              : choose("vocab", 2, 39);
    static const char* const kDropout[] = {"0", "0.1", "0.5"};
    return absl::StrCat("gpt2:depth=", choose("depth", 1, 2), ":hidden=", heads * head_dim,
                        ":heads=", heads, ":seq=", seq, ":batch=", choose("batch", 1, 2),
                        ":vocab=", vocab, ":context=", seq + 2,
                        ":dropout=", kDropout[choose("dropout", 0, 2)]);
  }
  // hidden a multiple of heads (after the size's defaults), seq at most context.
  static absl::Status Check(const ParamValues& params) {
    const Size size = Resolved(params);
    if (size.hidden % size.heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("gpt2: hidden=", size.hidden, " is not a multiple of heads=", size.heads,
                       "; accepted: hidden = heads x the width of a head"));
    }
    const int64_t seq = params.Int("seq"), ctx = params.Int("context");
    if (seq > ctx) {
      return absl::InvalidArgumentError(
          absl::StrCat("gpt2: seq=", seq, " is longer than context=", ctx, "; accepted: 1..", ctx));
    }
    return absl::OkStatus();
  }

  static std::vector<StageInfo> StagesFor(const ParamValues& params) {
    const Size size = Resolved(params);
    const int64_t seq = params.Int("seq"), batch = params.Int("batch");
    const bool stochastic = params.Float("dropout") > 0;
    std::vector<StageInfo> stages;
    // The embedding offers no chunking: a lookup has no intermediates to spare, and each chunk's
    // backward would make a dense gradient of the whole (tied) table.
    stages.push_back({"embedding", StageKind::kEmbedding, stochastic, {}, 0, ""});
    AppendBlockStages(size.depth, batch * seq, seq, size.hidden, stochastic, /*pre_norm=*/true,
                      &stages);
    stages.push_back(LmHeadStage(seq, static_cast<double>(batch * seq),
                                 static_cast<double>(size.hidden),
                                 static_cast<double>(params.Int("vocab"))));
    return stages;
  }

  using DecoderModel::DecoderModel;
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
};

const ModelRegistration<Gpt2Model> registration(
    "gpt2",
    "GPT-2 decoder: embedding, depth x (causal attention + MLP), tied LM head with its loss",
    "gpt2:depth=4:hidden=256:heads=4:seq=128:batch=2:vocab=8192");

}  // namespace
}  // namespace ckpt
