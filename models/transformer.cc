// transformer: post-LayerNorm encoder blocks (Vaswani et al. 2017) on random inputs.
//
// Each block is two stages: attention, y = LN1(x + Dropout(SelfAttention(x))), and MLP,
// y = LN2(x + Dropout(W2 GELU(W1 x))) with a 4x hidden width. Loss: mean squared error
// against a random target. Parameters: depth (6), hidden (768), heads (12), seq (256),
// batch (4), dropout (0.1).

#include <memory>
#include <string>
#include <vector>

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/TensorOperators.h"
#include "ATen/ops/mse_loss.h"
#include "ATen/ops/randn.h"
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

struct TransformerOptions {
  TransformerOptions(int64_t depth, int64_t hidden, int64_t heads)
      : depth_(depth), hidden_(hidden), heads_(heads) {}
  TORCH_ARG(int64_t, depth);
  TORCH_ARG(int64_t, hidden);
  TORCH_ARG(int64_t, heads);
  TORCH_ARG(double, dropout) = 0.1;
};

class Transformer : public ParamSet {
 public:
  explicit Transformer(const TransformerOptions& options_) : options(options_) {
    for (int64_t b = 0; b < options.depth(); ++b) {
      attention_.emplace_back(*this, options.hidden(), options.heads());
      ln1_.emplace_back(*this, options.hidden());
      mlp_.emplace_back(*this, options.hidden(), /*tanh_gelu=*/false);
      ln2_.emplace_back(*this, options.hidden());
    }
  }
  // Block b's attention stage, LN1(x + Dropout(Attention(x))): its query positions in the
  // chunks of the part "sequence", each chunk attending to all of x; the attention core is
  // the part "core".
  at::Tensor AttentionStage(int64_t b, const at::Tensor& x, const StageParts& parts) {
    const double p = is_training() ? options.dropout() : 0.0;
    const int64_t seq = x.size(1);
    const int64_t attention_seed = DrawDropoutSeed();
    const int64_t residual_seed = DrawDropoutSeed();
    // Keys and values of the whole sequence, computed once; queries per chunk.
    const at::Tensor k = attention_[b].KeysTransposed(x);
    const at::Tensor v = attention_[b].Values(x);
    auto chunk = [this, b, p, seq, attention_seed, residual_seed, parts](
                     const std::vector<at::Tensor>& in, int64_t offset) {
      const at::Tensor& xq = in[0];
      const at::Tensor q = attention_[b].Queries(xq);
      const bool fused = parts.Fused("core");
      auto core = [offset, p, attention_seed, fused](const std::vector<at::Tensor>& qkv) {
        return std::vector<at::Tensor>{SelfAttention::Core(qkv[0], qkv[1], qkv[2], offset,
                                                           /*causal=*/false, p, attention_seed,
                                                           fused)};
      };
      const at::Tensor context = parts.Run("core", core, {q, in[1], in[2]})[0];
      const at::Tensor attended =
          CounterDropout(attention_[b].Output(context), p, residual_seed, 1, offset, seq);
      return std::vector<at::Tensor>{ln1_[b](xq + attended)};
    };
    return parts.RunChunked("sequence", chunk, {x, k, v}, {true, false, false}, /*dim=*/1)[0];
  }
  // Block b's MLP stage, LN2(x + Dropout(MLP(x))): positions in the chunks of "sequence", the
  // MLP (its 4x-wide hidden activation) the part "hidden".
  at::Tensor MlpStage(int64_t b, const at::Tensor& x, const StageParts& parts) {
    const double p = is_training() ? options.dropout() : 0.0;
    const int64_t seq = x.size(1);
    const int64_t seed = DrawDropoutSeed();
    auto chunk = [this, b, p, seq, seed, parts](const std::vector<at::Tensor>& in, int64_t offset) {
      const at::Tensor& xc = in[0];
      auto mlp = [this, b](const std::vector<at::Tensor>& h) {
        return std::vector<at::Tensor>{mlp_[b](h[0])};
      };
      const at::Tensor y = parts.Run("hidden", mlp, {xc})[0];
      return std::vector<at::Tensor>{ln2_[b](xc + CounterDropout(y, p, seed, 1, offset, seq))};
    };
    return parts.RunChunked("sequence", chunk, {x}, {true}, /*dim=*/1)[0];
  }

  TransformerOptions options;

 private:
  std::vector<SelfAttention> attention_;
  std::vector<FeedForward> mlp_;
  std::vector<LayerNorm> ln1_, ln2_;
};

class TransformerModel : public ModuleModel<Transformer> {
 public:
  static std::vector<ParamDef> Params() {
    return {IntParam("depth", "6", "number of blocks (2 stages each)").Min(1).Max(1000),
            IntParam("hidden", "768", "model width; a multiple of heads").Min(1).Max(1 << 16),
            IntParam("heads", "12", "attention heads").Min(1).Max(1024),
            IntParam("seq", "256", "sequence length").Min(1).Max(1 << 20).Scales(2),
            IntParam("batch", "4", "sequences per batch").Min(1).Max(1 << 16).Scales(1),
            FloatParam("dropout", "0.1", "dropout probability").Range(0, 0.95)};
  }
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context) {
    const int64_t hidden = params.Int("hidden"), heads = params.Int("heads");
    std::unique_ptr<Transformer> net = InitSeeded(context.init_seed, [&] {
      return std::make_unique<Transformer>(
          TransformerOptions(params.Int("depth"), hidden, heads).dropout(params.Float("dropout")));
    });
    return std::make_shared<TransformerModel>(params, std::move(net), context.device);
  }
  static std::vector<std::string> PaperSpecs() {
    return {"transformer:depth=6:hidden=768:heads=12:seq=256:batch=4"};
  }
  static std::string SmallSpec(const SpecChooser& choose) {
    const int64_t heads = choose("heads", 1, 3), head_dim = choose("head width", 1, 6);
    static const char* const kDropout[] = {"0", "0.1", "0.5"};
    return absl::StrCat("transformer:depth=", choose("depth", 1, 2), ":hidden=", heads * head_dim,
                        ":heads=", heads, ":seq=", choose("seq", 1, 9),
                        ":batch=", choose("batch", 1, 3),
                        ":dropout=", kDropout[choose("dropout", 0, 2)]);
  }
  static absl::Status Check(const ParamValues& params) {
    const int64_t hidden = params.Int("hidden"), heads = params.Int("heads");
    if (hidden % heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("transformer: hidden=", hidden, " is not a multiple of heads=", heads,
                       "; accepted: hidden = heads x the width of a head"));
    }
    return absl::OkStatus();
  }

  static std::vector<StageInfo> StagesFor(const ParamValues& params) {
    const int64_t seq = params.Int("seq");
    std::vector<StageInfo> stages;
    AppendBlockStages(params.Int("depth"), params.Int("batch") * seq, seq, params.Int("hidden"),
                      params.Float("dropout") > 0, /*pre_norm=*/false, &stages);
    return stages;
  }

  TransformerModel(ParamValues params, std::unique_ptr<Transformer> net, c10::Device device)
      : ModuleModel(params, params.Canonical(), std::move(net), params.Int("batch"), device),
        seq_(params.Int("seq")) {}
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& in,
                                   const StageParts& parts, const Batch&) override {
    const int64_t block = index / 2;
    if (index % 2 == 0) return {module_->AttentionStage(block, in.at(0), parts)};
    return {module_->MlpStage(block, in.at(0), parts)};
  }
  at::Tensor Loss(const std::vector<at::Tensor>& outputs, const Batch& batch) override {
    return at::mse_loss(outputs.at(0), batch.targets.at(0));
  }
  Batch MakeBatch(uint64_t seed) override {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const int64_t hidden = module_->options.hidden();
    at::Tensor x = at::randn({batch_, seq_, hidden}, gen).to(device_);
    at::Tensor target = at::randn({batch_, seq_, hidden}, gen).to(device_);
    x.requires_grad_(true);
    return {{x}, {target}};
  }

 private:
  int64_t seq_;
};

const ModelRegistration<TransformerModel> registration(
    "transformer",
    "post-LayerNorm encoder: depth x (attention + MLP stages), MSE loss on random targets",
    "transformer:depth=4:hidden=256:heads=4:seq=128:batch=4");

}  // namespace
}  // namespace ckpt
