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
// attention core per attention stage.
// On models without attention stages it plans exactly like store_all and says so.
#pragma once

#include <memory>
#include <vector>

#include "core/plan/strategy.h"

namespace ckpt {

class SelectiveAttention : public Strategy {
 public:
  static constexpr char kId[] = "selective_attention";
  static constexpr char kSummary[] =
      "recompute only attention's seq^2 core (scores, softmax, dropout, x values), as "
      "Megatron-LM";
  static std::vector<ParamDef> Params() { return {}; }
  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params);

  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override;
};

}  // namespace ckpt
