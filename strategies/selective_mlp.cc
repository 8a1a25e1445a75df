// selective_mlp: recompute only the MLP's hidden activation, the other half of a transformer
// block's selective recomputation (Korthikanti et al. 2022 recompute attention's core; later
// Megatron-LM releases and torchtitan also offer the MLP as a recompute module).
//
// Keeps: everything, except inside MLP stages the 4x-wide hidden activation (W1 x, its GELU,
// which W2 keeps as its input): the MLP keeps only its input (after the LayerNorm where the
// block normalises first, which the part includes) and its output.
// Recomputes: in backward, each MLP's two products and its GELU (and that LayerNorm).
// Memory: saves about 2 x 4 x hidden x 4 bytes per token per MLP stage in float32, the
// largest activations of a block at sequence lengths below about 8 x hidden / heads.
// Compute: one extra MLP forward per MLP stage, about a third of a block's forward FLOPs.
// On models whose stages declare no MLP hidden part (the MLP zoo's blocks are a single Linear
// and its ReLU) it plans exactly like store_all and says so.
#include "core/plan/strategy.h"
#include "strategies/plan_builders.h"

namespace ckpt {
namespace {

absl::StatusOr<Plan> SelectiveMlp(const ModelProfile& profile) {
  return WithPartRecomputed(profile, PartKind::kMlpHidden, "the hidden activation", "MLP",
                            "no MLP hidden parts");
}

const PlannerRegistration registration(
    "selective_mlp", "recompute only the MLP's 4x-wide hidden activation, keeping everything else",
    SelectiveMlp);

}  // namespace
}  // namespace ckpt
