// Building blocks the models share: counter-based dropout, multi-head self-attention split into
// the pieces strategies act on, the position-wise MLP, the MLP models' stack of Linear layers, and
// the parameters of a model that comes in named sizes.
//
// Counter-based dropout: the mask of each element is a hash of (seed, the element's index in
// the whole tensor), so a chunk of a tensor drops exactly what the whole tensor would drop
// there. Chunked and unchunked executions of a stage therefore draw identical masks, and RNG
// replay only has to reproduce the seed, one draw from the CPU generator per call site. Stages
// draw their seeds before any chunking or selective recomputation, so those checkpointed
// pieces draw nothing themselves and run without an RNG snapshot (kNoRngReplay).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ATen/core/Tensor.h"
#include "c10/core/Device.h"
#include "core/plan/spec.h"
#include "core/plan/stage.h"
#include "core/run/chain_model.h"
#include "core/run/parts.h"
#include "models/module_model.h"
#include "models/nn.h"

namespace ckpt {

// The parameters of a model that comes in named sizes: `size` (one of `sizes`, the first the
// default; `described` says each size's shape), depth, hidden and heads (`heads_are`), each
// "auto" for the size's, then `rest`.
std::vector<ParamDef> SizeParams(const std::vector<std::string>& sizes,
                                 const std::string& described, std::vector<ParamDef> rest,
                                 const std::string& heads_are = "attention heads");

// One draw from the default CPU generator: the seed of one dropout call site for one step.
int64_t DrawDropoutSeed();

// Dropout of `x`, which is positions [offset, offset + x.size(dim)) along `dim` of a tensor
// whose size along `dim` is `full_length`. Keeps each element with probability 1 - p and
// scales it by 1 / (1 - p). Keeps a bool mask for backward, like LibTorch's dropout.
at::Tensor CounterDropout(const at::Tensor& x, double p, int64_t seed, int64_t dim, int64_t offset,
                          int64_t full_length);

// Why an attention core cannot run by a fused kernel (scaled_dot_product_attention), empty when
// it can: the LibTorch in use has none (before 2.0), or the core drops probabilities (`dropout`),
// which a fused kernel does with the generator inside it, where chunks and reruns, replaying no
// RNG (parts draw none, core/run/parts.h), would draw other masks.
std::string FusedAttentionUnavailable(bool dropout);

// Multi-head self-attention, in the pieces strategies act on. Queries, keys and values have
// separate projections so that projecting a chunk of the sequence is the same arithmetic as
// projecting all of it.
class SelfAttention {
 public:
  SelfAttention() = default;
  SelfAttention(ParamSet& set, int64_t hidden, int64_t heads);

  // [B, S, hidden] -> [B, heads, S, d] (d = hidden / heads), contiguous.
  at::Tensor Queries(const at::Tensor& x) const;
  at::Tensor Values(const at::Tensor& x) const;
  // [B, S, hidden] -> [B, heads, d, S], contiguous.
  at::Tensor KeysTransposed(const at::Tensor& x) const;

  // The quadratic core: softmax(q k^T / sqrt(d) [causal mask]) with dropout, times v, for the
  // queries at positions [q_offset, q_offset + q.size(2)) of a sequence of k_t.size(3).
  // Returns [B, heads, Sq, d].
  // Its inputs are contiguous and used as they are, so the gradients it returns for them are
  // contiguous whether it ran stored or was recomputed from detached copies: autograd gives a
  // detached leaf's gradient the leaf's strides, and a transposed gradient would send the
  // projections' backward down another BLAS path (not bitwise equal).
  // `fused`: by scaled_dot_product_attention instead, which keeps no seq^2 tensor for backward
  // (the fused kernels save the inputs, the output and per-row log-sum-exps); only where
  // FusedAttentionUnavailable(dropout > 0) is empty (it throws otherwise).
  static at::Tensor Core(const at::Tensor& q, const at::Tensor& k_t, const at::Tensor& v,
                         int64_t q_offset, bool causal, double dropout, int64_t seed,
                         bool fused = false);

  // [B, heads, Sq, d] -> [B, Sq, hidden], then the output projection.
  at::Tensor Output(const at::Tensor& context) const;

  int64_t heads() const { return heads_; }

 private:
  int64_t heads_ = 1;
  Linear q_, k_, v_, o_;
};

// Linear(hidden, 4 hidden) + GELU + Linear(4 hidden, hidden).
class FeedForward {
 public:
  FeedForward() = default;
  FeedForward(ParamSet& set, int64_t hidden, bool tanh_gelu);
  at::Tensor operator()(const at::Tensor& x) const;

 private:
  bool tanh_gelu_ = false;
  Linear fc1_, fc2_;
};

// Linear layers of `widths` (layer i: widths[i] -> widths[i + 1]), each followed by a ReLU but
// the last unless `relu_last`: the MLP models' network, a stage per layer, whose rows are
// independent (the part "rows" chunks them).
class LinearStack : public ParamSet {
 public:
  LinearStack(const std::vector<int64_t>& widths, bool relu_last);
  at::Tensor forward_layer(int64_t i, const at::Tensor& x) const;
  // Layer i as a stage: its input's rows in the chunks of the part "rows".
  std::vector<at::Tensor> RunLayer(int64_t i, const std::vector<at::Tensor>& inputs,
                                   const StageParts& parts) const;

 private:
  std::vector<Linear> layers_;
  bool relu_last_;
};

// A pre-norm transformer block as two stages (GPT-2's, ViT's): attention,
// x + Dropout(Attention(LN1(x))), and MLP, x + Dropout(W2 GELU(W1 LN2(x))). Each stage runs its
// positions in the chunks of its part "sequence" (the attention stage's queries; every chunk
// attends to the whole sequence) and its LayerNorm as the part "norm"; the attention core is the
// part "core", the MLP with its LayerNorm (the 4x-wide hidden activation) "hidden". `dropout` is
// the probability in force (0 in evaluation); each stage draws its seeds first
// (DrawDropoutSeed), so chunks and reruns draw nothing.
class PreNormBlock {
 public:
  PreNormBlock(ParamSet& set, int64_t hidden, int64_t heads, bool causal, bool tanh_gelu);
  at::Tensor AttentionStage(const at::Tensor& x, const StageParts& parts, double dropout) const;
  at::Tensor MlpStage(const at::Tensor& x, const StageParts& parts, double dropout) const;

 private:
  bool causal_;
  LayerNorm ln1_, ln2_;
  SelfAttention attention_;
  FeedForward mlp_;
};

// Appends the stages of `depth` transformer blocks, "block<b>.attention" (its core recomputable,
// and fusable where FusedAttentionUnavailable(stochastic) is empty: these blocks drop attention
// probabilities exactly when they drop anything; its sequence chunkable) and "block<b>.mlp" (its
// hidden activation recomputable, its sequence chunkable), each block's alike
// (StageInfo::repeat_key), with their forward FLOPs for `tokens` tokens in sequences of `seq`: the
// Q, K, V and output projections (2 x tokens x hidden^2 each), scores and probabilities x values (2
// x tokens x seq x hidden each; a causal mask is applied to full scores), and the MLP's two 4x-wide
// products. `pre_norm`: each stage opens with a norm whose output only its own layers read (GPT-2,
// Llama), declared as the part "norm". A post-norm block's norm (the encoder's) writes the
// stage's output, which the next stage keeps: nothing of it could be dropped, so it is no part.
void AppendBlockStages(int64_t depth, int64_t tokens, int64_t seq, int64_t hidden, bool stochastic,
                       bool pre_norm, std::vector<StageInfo>* stages);
// The same stages and parts with the forward FLOPs of each block's two stages given (a block of
// another shape: grouped-query attention, a gated MLP).
void AppendBlockStages(int64_t depth, int64_t seq, bool stochastic, bool pre_norm,
                       double attention_flops, double mlp_flops, std::vector<StageInfo>* stages);

// A decoder's last stage, its LM head with the loss: chunkable over its `seq` positions, forward
// FLOPs 2 x tokens x hidden x vocab.
StageInfo LmHeadStage(int64_t seq, double tokens, double hidden, double vocab);

// The batch of a decoder trained on next tokens: `batch` sequences of seq + 1 tokens below
// `vocab` drawn from `seed`, the first seq of each the inputs, the last seq the targets.
Batch NextTokenBatch(uint64_t seed, int64_t vocab, int64_t batch, int64_t seq, c10::Device device);

// Stage `index` of a chain of blocks (GPT-2's, Llama's, ViT's): the embedding, then per block its
// attention stage and its MLP stage, then the head, which returns the loss against the batch's
// targets.
template <typename Net>
std::vector<at::Tensor> RunBlockChainStage(Net& net, int64_t depth, int index,
                                           const std::vector<at::Tensor>& in,
                                           const StageParts& parts, const Batch& batch) {
  if (index == 0) return {net.Embed(in.at(0))};
  if (index == 2 * depth + 1) return {net.HeadLoss(in.at(0), batch.targets.at(0), parts)};
  const int64_t block = (index - 1) / 2;
  if ((index - 1) % 2 == 0) return {net.AttentionStage(block, in.at(0), parts)};
  return {net.MlpStage(block, in.at(0), parts)};
}

// A decoder trained on next tokens (GPT-2's, Llama's) of `depth` blocks: its stages run as
// RunBlockChainStage says, its head returns the loss, and its batches are NextTokenBatch's of the
// spec's batch, seq and vocab.
template <typename Net>
class DecoderModel : public HeadLossModel<Net> {
 public:
  DecoderModel(ParamValues params, std::string spec, std::unique_ptr<Net> net, int64_t depth,
               c10::Device device)
      : HeadLossModel<Net>(params, std::move(spec), std::move(net), params.Int("batch"), device),
        depth_(depth),
        seq_(params.Int("seq")),
        vocab_(params.Int("vocab")) {}
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& in,
                                   const StageParts& parts, const Batch& batch) override {
    return RunBlockChainStage(*this->module_, depth_, index, in, parts, batch);
  }
  Batch MakeBatch(uint64_t seed) override {
    return NextTokenBatch(seed, vocab_, this->batch_, seq_, this->device_);
  }

 private:
  const int64_t depth_, seq_, vocab_;
};

}  // namespace ckpt
