// transformer: post-LayerNorm encoder blocks (Vaswani et al. 2017) on random inputs.
//
// Each block is two stages: attention, y = LN1(x + Dropout(SelfAttention(x))), and MLP,
// y = LN2(x + Dropout(W2 GELU(W1 x))) with a 4x hidden width. Loss: mean squared error
// against a random target. Parameters: depth (6), hidden (768), heads (12), seq (256),
// batch (4), dropout (0.1).
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
#include "torch/nn/modules/container/modulelist.h"
#include "torch/nn/modules/normalization.h"

namespace ckpt {

struct TransformerOptions {
  TransformerOptions(int64_t depth, int64_t hidden, int64_t heads)
      : depth_(depth), hidden_(hidden), heads_(heads) {}
  TORCH_ARG(int64_t, depth);
  TORCH_ARG(int64_t, hidden);
  TORCH_ARG(int64_t, heads);
  TORCH_ARG(double, dropout) = 0.1;
};

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const TransformerOptions& options);
  // Block b's attention stage, LN1(x + Dropout(Attention(x))): its query positions in the
  // chunks of the part "sequence", each chunk attending to all of x; the attention core is
  // the part "core".
  at::Tensor AttentionStage(int64_t block, const at::Tensor& x, const StageParts& parts);
  // Block b's MLP stage, LN2(x + Dropout(MLP(x))): positions in the chunks of "sequence", the
  // MLP (its 4x-wide hidden activation) the part "hidden".
  at::Tensor MlpStage(int64_t block, const at::Tensor& x, const StageParts& parts);

  TransformerOptions options;

 private:
  std::vector<SelfAttention> attention_;
  std::vector<FeedForward> mlp_;
  std::vector<torch::nn::LayerNorm> ln1_, ln2_;
};
TORCH_MODULE(Transformer);

class TransformerModel : public ModuleModel<Transformer> {
 public:
  static constexpr char kId[] = "transformer";
  static constexpr char kSummary[] =
      "post-LayerNorm encoder: depth x (attention + MLP stages), MSE loss on random targets";
  static constexpr char kQuickSpec[] = "transformer:depth=4:hidden=256:heads=4:seq=128:batch=4";
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context);
  static std::vector<std::string> PaperSpecs();
  static std::string SmallSpec(const SpecChooser& choose);
  static absl::Status Check(const ParamValues& params);  // hidden a multiple of heads

  static std::vector<StageInfo> StagesFor(const ParamValues& params);

  TransformerModel(ParamValues params, Transformer net, c10::Device device)
      : ModuleModel(params, params.Canonical(), std::move(net), params.Int("batch"), device),
        seq_(params.Int("seq")) {}
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& inputs,
                                   const StageParts& parts, const Batch& batch) override;
  at::Tensor Loss(const std::vector<at::Tensor>& outputs, const Batch& batch) override;
  Batch MakeBatch(uint64_t seed) override;

 private:
  int64_t seq_;
};

}  // namespace ckpt
