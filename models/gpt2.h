// gpt2: a GPT-2 decoder (Radford et al. 2019) on synthetic token sequences.
//
// Stages: the embedding (token + position embeddings, dropout); per block an attention stage,
// x + Dropout(Attention(LN1(x))) with a causal mask, and an MLP stage,
// x + Dropout(W2 GELU_tanh(W1 LN2(x))); last the head: final LayerNorm, the LM head tied to
// the token embedding, and the next-token cross-entropy, so the head stage returns the loss
// (and chunking it never materialises all the logits at once). Dropout 0.1 on embeddings,
// attention probabilities and residual branches. No tokenizer, no downloaded weights: tokens
// are drawn from a seeded generator and the targets are the tokens shifted by one.
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
#include "torch/nn/modules/embedding.h"
#include "torch/nn/modules/normalization.h"

namespace ckpt {

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

class Gpt2Impl : public torch::nn::Module {
 public:
  explicit Gpt2Impl(const Gpt2Options& options);
  // The embedding has no parts. The other stages run their positions in the chunks of their
  // part "sequence"; the attention core is the part "core", the MLP with its LayerNorm (the
  // 4x-wide hidden activation) "hidden".
  at::Tensor Embed(const at::Tensor& tokens);
  at::Tensor AttentionStage(int64_t block, const at::Tensor& x, const StageParts& parts);
  at::Tensor MlpStage(int64_t block, const at::Tensor& x, const StageParts& parts);
  // Mean next-token cross-entropy of the final hidden states against `targets`.
  at::Tensor HeadLoss(const at::Tensor& x, const at::Tensor& targets, const StageParts& parts);

  Gpt2Options options;

 private:
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  std::vector<PreNormBlock> blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
};
TORCH_MODULE(Gpt2);

class Gpt2Model : public HeadLossModel<Gpt2> {
 public:
  static constexpr char kId[] = "gpt2";
  static constexpr char kSummary[] =
      "GPT-2 decoder: embedding, depth x (causal attention + MLP), tied LM head with its loss";
  static constexpr char kQuickSpec[] = "gpt2:depth=4:hidden=256:heads=4:seq=128:batch=2:vocab=8192";
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context);
  static std::vector<std::string> PaperSpecs();
  static std::string SmallSpec(const SpecChooser& choose);
  // hidden a multiple of heads (after the size's defaults), seq at most context.
  static absl::Status Check(const ParamValues& params);

  static std::vector<StageInfo> StagesFor(const ParamValues& params);

  Gpt2Model(ParamValues params, std::string spec, Gpt2 net, c10::Device device)
      : HeadLossModel(params, std::move(spec), std::move(net), params.Int("batch"), device),
        seq_(params.Int("seq")) {}
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& inputs,
                                   const StageParts& parts, const Batch& batch) override;
  Batch MakeBatch(uint64_t seed) override;

 private:
  int64_t seq_;
};

}  // namespace ckpt
