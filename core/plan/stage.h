// What a model declares about its stages before anything runs, and the policies a plan can
// choose for each stage's named parts.
//
// A stage may name parts of its work that a plan can treat apart from the rest of the stage, as
// JAX's checkpoint_name and PyTorch's selective-checkpoint policies name values inside a
// function: the attention core (its seq^2 scores and probabilities, or a fused kernel), the MLP's
// widened hidden activation, a pre-norm block's normalisation, the axis along which the stage is
// position-wise (which can be chunked). A model declares each part's kind; what may be done to a
// part of a kind is PartActionTable's; a strategy chooses by kind:
//
//   StageInfo attention{"block0.attention", StageKind::kAttention, /*stochastic=*/true,
//                       {AttentionCorePart(FusedAttentionUnavailable(true)), SequencePart(seq)}};
//   StagePolicy p = PolicyFor(attention, PartKind::kAttentionCore,
//                             {PartAction::Recompute(PartKind::kAttentionCore)});
//
// and the model runs the part through core/run/parts.h, which applies the chosen policy. Needs no
// LibTorch.
#pragma once

#include <cstdint>
#include <optional>
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
  kNorm,           // a normalisation whose output only the stage's own layers read (pre-norm)
};
absl::string_view PartKindName(PartKind kind);

// How the core runs a part under an action (core/run/parts.h). A new action that one of these runs
// is a line in PartActionTable; a new mechanism is a change to StageParts.
enum class PartMechanism {
  kPlain,       // a plain call: autograd keeps what it saves
  kCheckpoint,  // under the checkpoint primitive: the part's inputs kept, the part rerun in
                // backward
  kDropOutput,  // as kCheckpoint, and the part's output, which the layers reading it saved, is
                // dropped once they have run and refilled by a rerun when backward reaches them
                // (Megatron-Core's recompute of layernorm)
  kChunks,      // the stage's work in chunks along the part's axis, each under the checkpoint
                // primitive, so one chunk's intermediates are alive at a time
  kFused,       // a plain call of the part's fused kernel (scaled_dot_product_attention), which
                // keeps what it saves itself instead of the part's intermediates; only for a part
                // the model can fuse (PartInfo::unfusable empty)
};

// One thing a plan may do with a part.
struct PartActionDef {
  std::string id;    // its word in plan text: "recompute"
  std::string done;  // in descriptions: "recomputed" (a counted action: "in N chunks")
  PartMechanism mechanism = PartMechanism::kPlain;
  std::vector<PartKind> kinds;  // the parts it applies to
};

// Every part action, in a fixed order: storing first (it applies to every part), then a line
// each. An id may stand twice, for different kinds of parts run differently (a norm's
// "recompute" drops its output too). The profile's menus, the planners, plan text and the
// descriptions all take actions from here.
const std::vector<PartActionDef>& PartActionTable();

// A row of PartActionTable: what a plan chose to do with a part.
class PartAction {
 public:
  PartAction() = default;  // storing
  // The row of `id` for parts of `kind`; nullopt when there is none.
  static std::optional<PartAction> Find(absl::string_view id, PartKind kind);
  // The built-in actions by their ids (storing, "recompute", "chunk", "fused"), for parts of
  // `kind`.
  static PartAction Store() { return PartAction(); }
  static PartAction Recompute(PartKind kind);
  static PartAction Chunk();
  static PartAction Fused();  // an attention core's

  const PartActionDef& def() const { return PartActionTable()[index_]; }
  const std::string& id() const { return def().id; }
  bool IsStore() const { return index_ == 0; }
  bool Counted() const { return def().mechanism == PartMechanism::kChunks; }
  bool AppliesTo(PartKind kind) const;

  friend bool operator==(PartAction a, PartAction b) { return a.index_ == b.index_; }
  friend bool operator!=(PartAction a, PartAction b) { return a.index_ != b.index_; }
  friend bool operator<(PartAction a, PartAction b) { return a.index_ < b.index_; }

 private:
  explicit PartAction(int index) : index_(index) {}
  int index_ = 0;
};

struct PartInfo {
  std::string name;  // unique within its stage, e.g. "core", "hidden", "sequence"
  PartKind kind = PartKind::kSequence;
  // For a part chunked along an axis: its length (positions, rows), the most chunks it can
  // run in. 0 when unknown.
  int64_t extent = 0;
  // Why the model cannot run the part by a fused kernel (kFused), empty when it can: every part
  // but an attention core has none; an attention core has none where the LibTorch in use lacks
  // one, or where it draws dropout (models/layers.h, FusedAttentionUnavailable).
  std::string unfusable = "it has no fused kernel";
};

// The actions other than storing that apply to `part`, in table order: fusing only where the
// part can be fused.
std::vector<PartAction> ActionsFor(const PartInfo& part);

// The parts the zoo's models declare.
// "core"; `unfusable`: why the model cannot run it fused, empty when it can.
PartInfo AttentionCorePart(std::string unfusable);
PartInfo MlpHiddenPart();  // "hidden"
PartInfo NormPart(std::string name = "norm");
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
  // Its training forward updates module state (BatchNorm's running statistics and batch
  // counter): on a step's first run only, never on a rerun (InRerun in core/run/checkpoint.h).
  // Profiling a model with such stages leaves its state as it found it.
  bool updates_state = false;
  // The bytes of the buffers the stage holds (BatchNorm's statistics and counter, a mask
  // registered as a buffer), each storage once (a buffer two stages read, for the first): the
  // model's memory besides its parameters, which a training step's total counts.
  int64_t buffer_bytes = 0;

  // The index of the stage's part of `kind`, or -1.
  int FindPart(PartKind kind) const;
};

// The stages' matrix-product FLOPs of one forward, summed (0: none declared them).
double ForwardFlops(const std::vector<StageInfo>& stages);
// The bytes of the stages' buffers, summed: the model's memory besides its parameters.
int64_t BufferBytes(const std::vector<StageInfo>& stages);

// Where plan text wrote something (a plan file), for its errors; line 0 when it came from no
// text. Plans compare without it.
struct TextPosition {
  int line = 0;
  int column = 0;
};

// What a plan chose for one part.
struct PartPolicy {
  PartAction action;
  int chunks = 1;  // a counted action (chunking): into how many chunks (>= 2)
  TextPosition position = {};

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
  // Whether it runs a part by a fused kernel (PartMechanism::kFused).
  bool RunsFused() const;
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
