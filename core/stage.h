// What a model declares about its stages before anything runs, and the policies a plan can
// choose for each stage's named parts.
//
// A stage may name parts of its work that a plan can treat apart from the rest of the stage, as
// JAX's checkpoint_name and PyTorch's selective-checkpoint policies name values inside a
// function: the attention core (its seq^2 scores and probabilities), the MLP's widened hidden
// activation, the axis along which the stage is position-wise (which can be chunked). A model
// declares each part's kind and what may be done to it; a strategy chooses by kind:
//
//   StageInfo attention{"block0.attention", StageKind::kAttention, /*stochastic=*/true,
//                       {AttentionCorePart(), SequencePart(seq)}};
//   StagePolicy p = PolicyFor(attention, PartKind::kAttentionCore, {PartAction::kRecompute});
//
// and the model runs the part through core/parts.h, which applies the chosen policy. Needs no
// LibTorch.
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/string_view.h"

namespace ckpt {

enum class StageKind { kEmbedding, kAttention, kMlp, kNorm, kHead, kOther };
absl::string_view StageKindName(StageKind kind);

enum class PartKind {
  kAttentionCore,  // softmax(q k^T) with dropout, times v: the seq^2 scores and probabilities
  kMlpHidden,      // the MLP's widened hidden activation (W1 x, its nonlinearity, W2 of it)
  kSequence,       // the axis along which the stage is position-wise (an MLP's batch rows)
};
absl::string_view PartKindName(PartKind kind);

enum class PartAction {
  kStore,      // run with the stage, keeping what autograd saves (always allowed; the default)
  kRecompute,  // keep only the part's inputs and rerun it in backward
  kChunk,      // run the stage in chunks along the part's axis, each under a checkpoint, so one
               // chunk's intermediates are alive at a time; each chunk is rerun in backward
};
absl::string_view PartActionName(PartAction action);

struct PartInfo {
  std::string name;  // unique within its stage, e.g. "core", "hidden", "sequence"
  PartKind kind = PartKind::kSequence;
  std::vector<PartAction> actions;  // what may be done to it besides kStore
  // kChunk: the length of the axis it is chunked along (positions, rows), the most chunks it
  // can run in. 0 when unknown.
  int64_t extent = 0;
};

// The parts the zoo's models declare.
PartInfo AttentionCorePart();  // "core": recompute
PartInfo MlpHiddenPart();      // "hidden": recompute
// Chunkable along an axis of `extent` positions (a sequence's tokens, a batch's rows).
PartInfo SequencePart(int64_t extent, std::string name = "sequence");

struct StageInfo {
  std::string name;  // e.g. "block3.attention"
  StageKind kind = StageKind::kOther;
  bool stochastic = false;      // draws random numbers in training mode (dropout)
  std::vector<PartInfo> parts;  // the named parts a plan may treat apart
  // Matrix-product FLOPs of one forward of the stage (0: none, or not declared). Its backward
  // does twice that (the products for the input's and the weights' gradients), so a training
  // step of the whole model costs three times the sum.
  double forward_flops = 0;
  // Stages of one model with the same non-empty key run the same code with parameters of the
  // same shapes (a transformer's blocks): on inputs of the same shapes they cost the same, so
  // the profiler measures one of them and gives its measurements to the others. Empty: the
  // stage is measured on its own.
  std::string repeat_key;

  // The index of the stage's part of `kind`, or -1.
  int FindPart(PartKind kind) const;
};

// The stages' matrix-product FLOPs of one forward, summed (0: none declared them).
double ForwardFlops(const std::vector<StageInfo>& stages);

// What a plan chose for one part.
struct PartPolicy {
  PartAction action = PartAction::kStore;
  int chunks = 1;  // kChunk: into how many chunks (>= 2)

  friend bool operator==(const PartPolicy& a, const PartPolicy& b) {
    return a.action == b.action && a.chunks == b.chunks;
  }
  friend bool operator<(const PartPolicy& a, const PartPolicy& b) {
    return std::tie(a.action, a.chunks) < std::tie(b.action, b.chunks);
  }
};

// What a plan chose for every part of one stage: one policy per declared part, in the stage's
// order, or none at all, which means every part stored.
struct StagePolicy {
  std::vector<PartPolicy> parts;

  bool IsDefault() const;
  // The chunk count of the stage's chunked part (1 when none is chunked).
  int Chunks() const;
  // The policy of part `index` (kStore when the policy is empty).
  PartPolicy Of(int index) const;

  // Policies compare by what they do: an empty one equals one that stores every part.
  friend bool operator==(const StagePolicy& a, const StagePolicy& b);
  friend bool operator!=(const StagePolicy& a, const StagePolicy& b) { return !(a == b); }
  friend bool operator<(const StagePolicy& a, const StagePolicy& b);
};

// `policy` with the part of `kind` set to `part` (unchanged if the stage has no such part, or
// `part` is not an action the part allows).
StagePolicy WithPart(const StageInfo& stage, StagePolicy policy, PartKind kind, PartPolicy part);

// The policy that applies `part` to the stage's part of `kind` and stores everything else (the
// default policy when the stage has no such part): how strategies choose by kind.
inline StagePolicy PolicyFor(const StageInfo& stage, PartKind kind, PartPolicy part) {
  return WithPart(stage, StagePolicy(), kind, part);
}

// "stored", "core recomputed", "sequence in 4 chunks", "core recomputed, sequence in 4 chunks".
std::string DescribePolicy(const StageInfo& stage, const StagePolicy& policy);

// The policies a profile measures for a stage so that planners can choose among them: every
// part stored first, then each part's other actions alone (chunking into `chunks`, or into the
// part's extent where that is smaller; no chunking where it is below 2).
std::vector<StagePolicy> PolicyMenu(const StageInfo& stage, int chunks);

}  // namespace ckpt
