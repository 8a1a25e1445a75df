#include "models/gpt2.h"

#include "ATen/TensorOperators.h"
#include "ATen/ops/arange.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/linear.h"
#include "absl/strings/str_cat.h"
#include "models/model_init.h"

namespace ckpt {
namespace {
const ModelRegistration<Gpt2Model> registration;

struct Size {
  const char* name;
  int64_t depth, hidden, heads;
};
// Radford et al.'s four: 124M, 355M, 774M, 1558M parameters.
constexpr Size kSizes[] = {{"small", 12, 768, 12},
                           {"medium", 24, 1024, 16},
                           {"large", 36, 1280, 20},
                           {"xl", 48, 1600, 25}};
}  // namespace

Gpt2Impl::Gpt2Impl(const Gpt2Options& options_) : options(options_) {
  const int64_t h = options.hidden();
  wte_ = register_module("wte", torch::nn::Embedding(options.vocab(), h));
  wpe_ = register_module("wpe", torch::nn::Embedding(options.context(), h));
  {
    torch::NoGradGuard no_grad;
    wte_->weight.normal_(0, 0.02);  // GPT-2's initialisation; N(0, 1) would swamp the logits
    wpe_->weight.normal_(0, 0.01);
  }
  for (int64_t b = 0; b < options.depth(); ++b) {
    blocks_.push_back(
        register_module(absl::StrCat("block", b),
                        PreNormBlock(h, options.heads(), /*causal=*/true, /*tanh_gelu=*/true)));
  }
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({h})));
}

at::Tensor Gpt2Impl::Embed(const at::Tensor& tokens) {
  const double p = is_training() ? options.dropout() : 0.0;
  const int64_t seq = tokens.size(1);
  const at::Tensor positions = at::arange(seq, tokens.options().dtype(at::kLong));
  return CounterDropout(wte_(tokens) + wpe_(positions), p, DrawDropoutSeed(), 1, 0, seq);
}

at::Tensor Gpt2Impl::AttentionStage(int64_t b, const at::Tensor& x, const StageParts& parts) {
  return blocks_[b]->AttentionStage(x, parts, is_training() ? options.dropout() : 0.0);
}

at::Tensor Gpt2Impl::MlpStage(int64_t b, const at::Tensor& x, const StageParts& parts) {
  return blocks_[b]->MlpStage(x, parts, is_training() ? options.dropout() : 0.0);
}

at::Tensor Gpt2Impl::HeadLoss(const at::Tensor& x, const at::Tensor& targets,
                              const StageParts& parts) {
  // Summed per chunk, divided once: the mean over every token, whatever the chunking.
  auto chunk = [this](const std::vector<at::Tensor>& in, int64_t) {
    const at::Tensor logits = at::linear(ln_f_(in[0]), wte_->weight);
    return std::vector<at::Tensor>{at::cross_entropy_loss(logits.flatten(0, 1), in[1].flatten(),
                                                          /*weight=*/{}, at::Reduction::Sum)};
  };
  const at::Tensor sum = parts.RunChunked("sequence", chunk, {x, targets}, {true, true}, 1)[0];
  return sum / static_cast<double>(targets.numel());
}

std::vector<ParamDef> Gpt2Model::Params() {
  return {
      ChoiceParam("size", {"small", "medium", "large", "xl"}, "small",
                  "small: 12 layers, 768 wide, 12 heads; medium: 24, 1024, 16; large (774M): 36, "
                  "1280, 20; xl (1558M): 48, 1600, 25"),
      IntParam("depth", "auto", "blocks; auto = the size's").Min(1).Max(1000).AllowAuto(),
      IntParam("hidden", "auto", "width; auto = the size's").Min(1).Max(1 << 16).AllowAuto(),
      IntParam("heads", "auto", "attention heads; auto = the size's").Min(1).Max(1024).AllowAuto(),
      IntParam("seq", "256", "tokens per sequence, at most context").Min(1).Max(1 << 20),
      IntParam("batch", "2", "sequences per batch").Min(1).Max(1 << 16),
      IntParam("vocab", "50257", "vocabulary size").Min(2).Max(1 << 24),
      IntParam("context", "1024", "positions of the position embedding").Min(1).Max(1 << 20),
      FloatParam("dropout", "0.1", "dropout probability").Range(0, 0.95),
  };
}

namespace {
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
}  // namespace

absl::Status Gpt2Model::Check(const ParamValues& params) {
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

absl::StatusOr<std::shared_ptr<ChainModel>> Gpt2Model::Create(const ParamValues& params,
                                                              const ModelContext& context) {
  if (absl::Status s = Check(params); !s.ok()) return s;
  const Size size = Resolved(params);
  const int64_t depth = size.depth, hidden = size.hidden, heads = size.heads;
  const int64_t seq = params.Int("seq"), ctx = params.Int("context");
  Gpt2 net = InitSeeded(context.init_seed, [&] {
    return Gpt2(Gpt2Options(depth, hidden, heads)
                    .vocab(params.Int("vocab"))
                    .context(ctx)
                    .dropout(params.Float("dropout")));
  });
  net->to(context.device);
  // The canonical spec names the resolved shape.
  const std::string spec =
      absl::StrCat("gpt2:size=", size.name, ":depth=", depth, ":hidden=", hidden, ":heads=", heads,
                   ":seq=", seq, ":batch=", params.Int("batch"), ":vocab=", params.Int("vocab"),
                   ":context=", ctx, ":dropout=", params.Text("dropout"));
  return std::make_shared<Gpt2Model>(params, spec, std::move(net), context.device);
}

std::vector<std::string> Gpt2Model::PaperSpecs() {
  return {"gpt2:size=small:seq=256:batch=2", "gpt2:size=medium:seq=256:batch=2"};
}

std::string Gpt2Model::SmallSpec(const SpecChooser& choose) {
  const int64_t heads = choose("heads", 1, 3), head_dim = choose("head width", 1, 6);
  const int64_t seq = choose("seq", 1, 9);
  // Vocabularies near the sequence's size, and far larger, as GPT-2's is (50257 against 1024
  // positions): the tied embedding's gradient then outweighs a stage's output.
  const int64_t vocab = choose("vocabulary far larger than seq", 0, 1) ? choose("vocab", 200, 1999)
                                                                       : choose("vocab", 2, 39);
  static const char* const kDropout[] = {"0", "0.1", "0.5"};
  return absl::StrCat("gpt2:depth=", choose("depth", 1, 2), ":hidden=", heads * head_dim,
                      ":heads=", heads, ":seq=", seq, ":batch=", choose("batch", 1, 2),
                      ":vocab=", vocab, ":context=", seq + 2,
                      ":dropout=", kDropout[choose("dropout", 0, 2)]);
}

std::vector<StageInfo> Gpt2Model::StagesFor(const ParamValues& params) {
  const Size size = Resolved(params);
  const int64_t seq = params.Int("seq"), batch = params.Int("batch");
  const bool stochastic = params.Float("dropout") > 0;
  std::vector<StageInfo> stages;
  // The embedding offers no chunking: a lookup has no intermediates to spare, and each chunk's
  // backward would make a dense gradient of the whole (tied) table.
  stages.push_back({"embedding", StageKind::kEmbedding, stochastic, {}, 0, ""});
  AppendBlockStages(size.depth, batch * seq, seq, size.hidden, stochastic, /*pre_norm=*/true,
                    &stages);
  stages.push_back({"head",
                    StageKind::kHead,
                    /*stochastic=*/false,
                    {SequencePart(seq)},
                    2 * static_cast<double>(batch * seq) * static_cast<double>(size.hidden) *
                        static_cast<double>(params.Int("vocab")),
                    ""});
  return stages;
}

std::vector<at::Tensor> Gpt2Model::RunStage(int index, const std::vector<at::Tensor>& in,
                                            const StageParts& parts, const Batch& batch) {
  return RunBlockChainStage(*module_, module_->options.depth(), index, in, parts, batch);
}

Batch Gpt2Model::MakeBatch(uint64_t seed) {
  return NextTokenBatch(seed, module_->options.vocab(), batch_, seq_, device_);
}

}  // namespace ckpt
