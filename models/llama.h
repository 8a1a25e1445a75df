// llama: a Llama-style decoder (Touvron et al. 2023) on synthetic token sequences.
//
// Stages: the token embedding; per block an attention stage, x + Wo Attention(RoPE(Wq n),
// RoPE(Wk n), Wv n) with n = RMSNorm1(x), causal, with grouped-query attention (`kv_heads`
// key/value heads, each shared by heads / kv_heads query heads), and an MLP stage,
// x + W2 (SiLU(W1 n) * W3 n) with n = RMSNorm2(x) (SwiGLU); last the head: final RMSNorm, an
// untied LM head and the next-token cross-entropy, so the head stage returns the loss. No
// biases, no dropout. Rotary position embedding (base 10000) rotates each query and key by its
// position, so a chunk of queries is rotated by the positions it holds and chunking changes no
// arithmetic. No tokenizer, no downloaded weights: tokens are drawn from a seeded generator and
// the targets are the tokens shifted by one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan/spec.h"
#include "core/run/chain_model.h"
#include "models/module_model.h"
#include "torch/nn/module.h"
#include "torch/nn/modules/embedding.h"
#include "torch/nn/modules/linear.h"

namespace ckpt {

struct LlamaOptions {
  int64_t depth = 2;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t kv_heads = 4;
  int64_t mlp = 172;  // the SwiGLU's width
  int64_t vocab = 32000;
  double norm_eps = 1e-5;
};

// RMSNorm over the last dimension: x r w, with r = 1 / sqrt(mean(x^2) + eps) and w a learned
// scale. One autograd node with its own backward, which keeps x, w and r and returns a single
// gradient for x, r (g w - x r mean(g w x r)): built of primitive ops, x would reach backward by
// two paths whose gradients add up in an order that depends on what a plan recomputes, and
// float addition is not associative.
at::Tensor RmsNormFunction(const at::Tensor& x, const at::Tensor& weight, double eps);

// Rotary position embedding of [B, H, S, d] (d even) at positions [offset, offset + S): the
// pairs (x_i, x_{i + d/2}) rotated by the angle position / 10000^(2i / d). Element by element,
// so a chunk is rotated exactly as the same positions of the whole sequence are.
at::Tensor Rotary(const at::Tensor& x, int64_t offset);

class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t hidden, double eps);
  at::Tensor forward(const at::Tensor& x);

 private:
  double eps_;
  at::Tensor weight_;
};
TORCH_MODULE(RmsNorm);

class LlamaImpl : public torch::nn::Module {
 public:
  explicit LlamaImpl(const LlamaOptions& options);
  // The embedding has no parts. The blocks' stages run their positions in the chunks of their
  // part "sequence"; the attention core (grouped keys and values spread to every head, scores,
  // probabilities) is the part "core", the SwiGLU's gate and up products and their product
  // "hidden", each stage's RMSNorm "norm".
  at::Tensor Embed(const at::Tensor& tokens);
  at::Tensor AttentionStage(int64_t block, const at::Tensor& x, const StageParts& parts);
  at::Tensor MlpStage(int64_t block, const at::Tensor& x, const StageParts& parts);
  // Mean next-token cross-entropy of the final hidden states against `targets`.
  at::Tensor HeadLoss(const at::Tensor& x, const at::Tensor& targets, const StageParts& parts);

  LlamaOptions options;

 private:
  struct Block {
    RmsNorm norm1{nullptr}, norm2{nullptr};
    torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
    torch::nn::Linear gate{nullptr}, up{nullptr}, down{nullptr};
  };
  torch::nn::Embedding embedding_{nullptr};
  std::vector<Block> blocks_;
  RmsNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Llama);

class LlamaModel : public HeadLossModel<Llama> {
 public:
  static constexpr char kId[] = "llama";
  static constexpr char kSummary[] =
      "Llama-style decoder: embedding, depth x (RMSNorm, rotary grouped-query causal attention + "
      "RMSNorm, SwiGLU MLP), untied LM head with its loss";
  static constexpr char kQuickSpec[] =
      "llama:size=tiny:depth=4:hidden=256:heads=4:kv_heads=2:mlp=688:seq=128:batch=2:vocab=8192";
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context);
  static std::vector<std::string> PaperSpecs();
  static std::string SmallSpec(const SpecChooser& choose);
  // hidden a multiple of heads, heads a multiple of kv_heads, an even head width (after the
  // size's defaults).
  static absl::Status Check(const ParamValues& params);

  static std::vector<StageInfo> StagesFor(const ParamValues& params);

  LlamaModel(ParamValues params, std::string spec, Llama net, c10::Device device)
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
