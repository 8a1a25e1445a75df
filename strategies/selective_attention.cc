// selective_attention: Megatron-LM's selective activation recomputation (Korthikanti et al.
// 2022, "Reducing Activation Recomputation in Large Transformer Models", arXiv:2205.05198).
//
// Keeps: everything, except in attention stages the tensors that grow with sequence length
// squared: the scores, the softmax output, the attention-dropout mask and the dropped
// probabilities (batch x heads x seq^2 each). Attention keeps its queries, keys and values.
// Recomputes: in backward, each attention stage's core (q k^T, softmax, dropout, times v),
// which is cheap in FLOPs next to the projections and MLPs.
// Memory: saves about 9 bytes x batch x heads x seq^2 per attention stage in float32 (probs,
// dropped probs, the bool mask) and keeps the O(L x seq x hidden) rest. Compute: one extra
// attention core per attention stage. Without attention stages it plans as store_all, and says so.
#include "core/plan/strategy.h"
#include "strategies/plan_builders.h"

namespace ckpt {
namespace {

absl::StatusOr<Plan> SelectiveAttention(const ModelProfile& profile) {
  return WithPartRecomputed(profile, PartKind::kAttentionCore, "the seq^2 core", "attention",
                            "no attention cores");
}

const PlannerRegistration registration(
    "selective_attention",
    "recompute only attention's seq^2 core (scores, softmax, dropout, x values), as Megatron-LM",
    SelectiveAttention);

}  // namespace
}  // namespace ckpt
