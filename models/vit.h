// vit: a Vision Transformer (Dosovitskiy et al. 2021) classifying synthetic images.
//
// Stages: the embedding (the image cut into patch x patch squares, each projected to `hidden`
// by a strided convolution, a learned class token in front, learned position embeddings added,
// dropout); per block a pre-norm attention stage and MLP stage (GELU), as GPT-2's but attending
// to every position; last the head: the final LayerNorm of the class token, a linear classifier
// and the cross-entropy against the labels, so the head stage returns the loss. Sizes b16 and
// l16 at 224 px are the published ViT-B/16 and ViT-L/16 (86,567,656 and 304,326,632
// parameters with 1000 classes). The images need no gradient, as in training.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan/spec.h"
#include "core/run/chain_model.h"
#include "models/layers.h"
#include "models/module_model.h"
#include "torch/nn/module.h"
#include "torch/nn/modules/conv.h"
#include "torch/nn/modules/linear.h"
#include "torch/nn/modules/normalization.h"

namespace ckpt {

struct VitOptions {
  int64_t depth = 12, hidden = 768, heads = 12;
  int64_t image = 224, patch = 16, channels = 3, classes = 1000;
  double dropout = 0;
  int64_t tokens() const { return (image / patch) * (image / patch) + 1; }
};

class VitImpl : public torch::nn::Module {
 public:
  explicit VitImpl(const VitOptions& options);
  // [B, channels, image, image] -> [B, tokens, hidden]. No parts.
  at::Tensor Embed(const at::Tensor& images);
  // PreNormBlock's stages, bidirectional.
  at::Tensor AttentionStage(int64_t block, const at::Tensor& x, const StageParts& parts);
  at::Tensor MlpStage(int64_t block, const at::Tensor& x, const StageParts& parts);
  // Mean cross-entropy of the class token's logits against `labels`. No parts.
  at::Tensor HeadLoss(const at::Tensor& x, const at::Tensor& labels, const StageParts& parts);

  const VitOptions options;

 private:
  double Dropout() const { return is_training() ? options.dropout : 0.0; }

  torch::nn::Conv2d patches_{nullptr};
  at::Tensor class_token_, positions_;
  std::vector<PreNormBlock> blocks_;
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Vit);

class VitModel : public HeadLossModel<Vit> {
 public:
  static constexpr char kId[] = "vit";
  static constexpr char kSummary[] =
      "Vision Transformer: patch embedding with class token, depth x (attention + MLP, pre-norm), "
      "classifier head with its loss";
  static constexpr char kQuickSpec[] =
      "vit:depth=4:hidden=256:heads=4:image=64:patch=8:classes=100:batch=4";
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context);
  static std::vector<std::string> PaperSpecs();
  static std::string SmallSpec(const SpecChooser& choose);
  // hidden a multiple of heads (after the size's defaults), image a multiple of patch.
  static absl::Status Check(const ParamValues& params);

  static std::vector<StageInfo> StagesFor(const ParamValues& params);

  VitModel(ParamValues params, std::string spec, Vit net, c10::Device device)
      : HeadLossModel(params, std::move(spec), std::move(net), params.Int("batch"), device) {}
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& inputs,
                                   const StageParts& parts, const Batch& batch) override;
  Batch MakeBatch(uint64_t seed) override;
};

}  // namespace ckpt
