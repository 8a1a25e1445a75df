// vit: a Vision Transformer (Dosovitskiy et al. 2021) classifying synthetic images.
//
// Stages: the embedding (the image cut into patch x patch squares, each projected to `hidden`
// by a strided convolution, a learned class token in front, learned position embeddings added,
// dropout); per block a pre-norm attention stage and MLP stage (GELU), as GPT-2's but attending
// to every position; last the head: the final LayerNorm of the class token, a linear classifier
// and the cross-entropy against the labels, so the head stage returns the loss. Sizes b16 and
// l16 at 224 px are the published ViT-B/16 and ViT-L/16 (86,567,656 and 304,326,632
// parameters with 1000 classes). The images need no gradient, as in training.

#include <memory>
#include <string>
#include <vector>

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/TensorOperators.h"
#include "ATen/core/grad_mode.h"
#include "ATen/ops/cat.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/empty.h"
#include "ATen/ops/randint.h"
#include "ATen/ops/randn.h"
#include "ATen/ops/zeros.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/plan/spec.h"
#include "core/run/chain_model.h"
#include "models/layers.h"
#include "models/model_init.h"
#include "models/module_model.h"
#include "models/nn.h"

namespace ckpt {
namespace {

struct VitOptions {
  int64_t depth = 12, hidden = 768, heads = 12;
  int64_t image = 224, patch = 16, channels = 3, classes = 1000;
  double dropout = 0;
  int64_t tokens() const { return (image / patch) * (image / patch) + 1; }
};

struct Size {
  const char* name;
  int64_t depth, hidden, heads;
};
// Dosovitskiy et al.'s ViT-B and ViT-L (the MLP 4x wide in both).
constexpr Size kSizes[] = {{"b16", 12, 768, 12}, {"l16", 24, 1024, 16}};

// The size's shape with the spec's overrides.
VitOptions Resolved(const ParamValues& params) {
  Size size = kSizes[0];
  for (const Size& s : kSizes) {
    if (params.Text("size") == s.name) size = s;
  }
  VitOptions o;
  o.depth = params.IntOr("depth", size.depth);
  o.hidden = params.IntOr("hidden", size.hidden);
  o.heads = params.IntOr("heads", size.heads);
  o.image = params.Int("image");
  o.patch = params.Int("patch");
  o.channels = params.Int("channels");
  o.classes = params.Int("classes");
  o.dropout = params.Float("dropout");
  return o;
}

class Vit : public ParamSet {
 public:
  // The class token and the position embeddings are listed first, the patches' convolution
  // drawn first (as a torch::nn::Module lists its own parameters before its children's).
  explicit Vit(const VitOptions& options_) : options(options_) {
    const int64_t h = options.hidden;
    class_token_ = AddParameter(at::zeros({1, 1, h}));
    positions_ = AddParameter(at::empty({1, options.tokens(), h}));
    patches_ = Conv2d(*this, options.channels, h, options.patch, /*stride=*/options.patch,
                      /*padding=*/0, /*with_bias=*/true);
    {
      const at::NoGradGuard no_grad;
      positions_.normal_(0, 1).mul_(0.02);
    }
    for (int64_t b = 0; b < options.depth; ++b) {
      blocks_.emplace_back(*this, h, options.heads, /*causal=*/false, /*tanh_gelu=*/false);
    }
    norm_ = LayerNorm(*this, h);
    head_ = Linear(*this, h, options.classes);
  }
  // [B, channels, image, image] -> [B, tokens, hidden]. No parts.
  at::Tensor Embed(const at::Tensor& images) {
    const at::Tensor patches = patches_(images).flatten(2).transpose(1, 2);  // [B, N, hidden]
    const at::Tensor x =
        at::cat({class_token_.expand({images.size(0), 1, options.hidden}), patches}, 1) +
        positions_;
    return CounterDropout(x, Dropout(), DrawDropoutSeed(), 1, 0, options.tokens());
  }
  // PreNormBlock's stages, bidirectional.
  at::Tensor AttentionStage(int64_t b, const at::Tensor& x, const StageParts& parts) {
    return blocks_[b].AttentionStage(x, parts, Dropout());
  }
  at::Tensor MlpStage(int64_t b, const at::Tensor& x, const StageParts& parts) {
    return blocks_[b].MlpStage(x, parts, Dropout());
  }
  // Mean cross-entropy of the class token's logits against `labels`. No parts.
  at::Tensor HeadLoss(const at::Tensor& x, const at::Tensor& labels, const StageParts&) {
    return at::cross_entropy_loss(head_(norm_(x.select(1, 0))), labels);
  }

  const VitOptions options;

 private:
  double Dropout() const { return is_training() ? options.dropout : 0.0; }

  Conv2d patches_;
  at::Tensor class_token_, positions_;
  std::vector<PreNormBlock> blocks_;
  LayerNorm norm_;
  Linear head_;
};

class VitModel : public HeadLossModel<Vit> {
 public:
  static std::vector<ParamDef> Params() {
    return SizeParams(
        {"b16", "l16"},
        "b16: 12 layers, 768 wide, 12 heads; l16: 24, 1024, 16 (patch 16 at 224 px)",
        {
            IntParam("image", "224", "image side in pixels, a multiple of patch")
                .Min(1)
                .Max(1 << 14),
            IntParam("patch", "16", "patch side in pixels").Min(1).Max(1 << 14),
            IntParam("channels", "3", "image channels").Min(1).Max(64),
            IntParam("classes", "1000", "classes of the classifier").Min(2).Max(1 << 20),
            IntParam("batch", "2", "images per batch").Min(1).Max(1 << 16).Scales(1),
            FloatParam("dropout", "0", "dropout probability").Range(0, 0.95),
        });
  }
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context) {
    const VitOptions o = Resolved(params);
    std::unique_ptr<Vit> net =
        InitSeeded(context.init_seed, [&] { return std::make_unique<Vit>(o); });
    // The canonical spec names the resolved shape.
    const std::string spec =
        params.Canonical({{"depth", o.depth}, {"hidden", o.hidden}, {"heads", o.heads}});
    return std::make_shared<VitModel>(params, spec, std::move(net), context.device);
  }
  static std::vector<std::string> PaperSpecs() { return {"vit:size=b16:batch=8"}; }

  static std::string SmallSpec(const SpecChooser& choose) {
    const int64_t heads = choose("heads", 1, 3), head_dim = choose("head width", 1, 6);
    const int64_t patch = choose("patch", 1, 3);
    static const char* const kDropout[] = {"0", "0.1", "0.5"};
    return absl::StrCat("vit:depth=", choose("depth", 1, 2), ":hidden=", heads * head_dim,
                        ":heads=", heads, ":image=", patch * choose("patches per side", 1, 3),
                        ":patch=", patch, ":channels=", choose("channels", 1, 3),
                        ":classes=", choose("classes", 2, 12), ":batch=", choose("batch", 1, 3),
                        ":dropout=", kDropout[choose("dropout", 0, 2)]);
  }
  // hidden a multiple of heads (after the size's defaults), image a multiple of patch.
  static absl::Status Check(const ParamValues& params) {
    const VitOptions o = Resolved(params);
    if (o.hidden % o.heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("vit: hidden=", o.hidden, " is not a multiple of heads=", o.heads,
                       "; accepted: hidden = heads x the width of a head"));
    }
    if (o.image % o.patch != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("vit: image=", o.image, " is not a multiple of patch=", o.patch,
                       "; accepted: image = patch x patches per side"));
    }
    return absl::OkStatus();
  }

  static std::vector<StageInfo> StagesFor(const ParamValues& params) {
    const VitOptions o = Resolved(params);
    const int64_t batch = params.Int("batch");
    const double b = static_cast<double>(batch), h = static_cast<double>(o.hidden);
    const double pixels = static_cast<double>(o.channels * o.patch * o.patch);
    const bool stochastic = o.dropout > 0;
    std::vector<StageInfo> stages;
    // The patch projection: a product of (B x patches) x pixels by pixels x hidden.
    stages.push_back({"embedding",
                      StageKind::kEmbedding,
                      stochastic,
                      {},
                      2 * b * static_cast<double>(o.tokens() - 1) * pixels * h,
                      ""});
    AppendBlockStages(o.depth, batch * o.tokens(), o.tokens(), o.hidden, stochastic,
                      /*pre_norm=*/true, &stages);
    stages.push_back({"head",
                      StageKind::kHead,
                      /*stochastic=*/false,
                      {},
                      2 * b * h * static_cast<double>(o.classes),
                      ""});
    return stages;
  }

  VitModel(ParamValues params, std::string spec, std::unique_ptr<Vit> net, c10::Device device)
      : HeadLossModel(params, std::move(spec), std::move(net), params.Int("batch"), device) {}
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& in,
                                   const StageParts& parts, const Batch& batch) override {
    return RunBlockChainStage(*module_, module_->options.depth, index, in, parts, batch);
  }
  Batch MakeBatch(uint64_t seed) override {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const VitOptions& o = module_->options;
    const at::Tensor images = at::randn({batch_, o.channels, o.image, o.image}, gen);
    const at::Tensor labels = at::randint(o.classes, {batch_}, gen, at::kLong);
    return {{images.to(device_)}, {labels.to(device_)}};
  }
};

const ModelRegistration<VitModel> registration(
    "vit",
    "Vision Transformer: patch embedding with class token, depth x (attention + MLP, pre-norm), "
    "classifier head with its loss",
    "vit:depth=4:hidden=256:heads=4:image=64:patch=8:classes=100:batch=4");

}  // namespace
}  // namespace ckpt
