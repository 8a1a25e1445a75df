// The planning types: what a strategy sees of a model (a profile) and what it decides (a plan).
//
// A model is an ordered chain of stages; stage i consumes the tensors stage i-1 produced.
// A plan cuts the chain into contiguous segments and says, per segment, whether its
// activations are stored for backward (as usual) or checkpointed: only the segment's inputs
// are kept and the segment is recomputed during backward. Needs no LibTorch, so strategies
// and their tests are pure functions over these types.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"

namespace ckpt {

enum class StageKind { kEmbedding, kAttention, kMlp, kNorm, kHead, kOther };

absl::string_view StageKindName(StageKind kind);

// What a model says about one stage, before anything runs.
struct StageInfo {
  std::string name;  // e.g. "block3.attention"
  StageKind kind = StageKind::kOther;
  bool position_wise = false;  // each sequence position is computed independently
  bool stochastic = false;     // draws random numbers in training mode (dropout)
};

// What running one stage stored (autograd recording) costs in memory and time, measured in
// isolation with the stage's options but as it runs inside the chain: on the input the
// chain gives it, its input and output boundary tensors owned by the chain. The analytical
// memory model (memory_model.h) composes these into a prediction for any plan.
struct StageProfile {
  StageInfo info;
  // Increase of live bytes from running the stage stored inside a store_all chain: what its
  // graph keeps plus its output, minus its input if nothing keeps it. What strategies budget.
  int64_t activation_bytes = 0;
  int64_t input_bytes = 0;     // the tensors it takes (owned by the previous stage)
  int64_t output_bytes = 0;    // the tensors it returns
  int64_t retained_bytes = 0;  // what its graph keeps besides its input and output tensors
  bool keeps_input = false;    // its graph keeps its input tensors alive
  bool keeps_output = false;   // its graph keeps its output tensors alive
  int64_t forward_transient_bytes = 0;    // forward peak above (input + retained + output)
  int64_t nograd_transient_bytes = 0;     // same without grad, above (input + output)
  // The gradients its backward creates: (index in ChainModel::Parameters(), bytes). A
  // parameter used by several stages (a tied embedding) is listed by each.
  std::vector<std::pair<int, int64_t>> param_grads;
  int64_t input_grad_bytes = 0;           // the gradient it passes to its input
  int64_t backward_transient_bytes = 0;   // backward peak above its start (graph + grad in)
  // The same when its input, output and incoming gradient stay referenced for the whole
  // backward, as when a checkpoint reruns it and backpropagates from its outputs.
  int64_t backward_held_transient_bytes = 0;
  int64_t rng_state_bytes = 0;  // a checkpoint's RNG snapshot, for stochastic stages
  double forward_ms = 0;        // median time of the stage's forward
};

// The loss, profiled like a stage (its input is the last stage's output).
struct LossProfile {
  int64_t retained_bytes = 0;  // besides its input and the scalar
  bool keeps_input = false;
  int64_t output_bytes = 0;    // the scalar
  int64_t backward_transient_bytes = 0;  // above its start; includes the input's gradient
  // Live bytes after its backward minus before: its input's gradient and the seed gradient
  // LibTorch allocates, less what its graph retained.
  int64_t backward_net_bytes = 0;
  int64_t input_grad_bytes = 0;
};

struct ModelProfile {
  std::string model;  // canonical model spec
  std::vector<StageProfile> stages;
  LossProfile loss;
  int64_t input_bytes = 0;  // bytes of the chain's inputs (the batch holds them)
};

// How a stage runs besides stored/recomputed. Models honour them on the stages that declare
// support (see StageInfo); ValidatePlan rejects them elsewhere.
struct StageOptions {
  // > 1: the stage runs its sequence (for MLPs without one, its batch rows) in this many
  // chunks, each under the checkpoint primitive, so one chunk's intermediates live at a time.
  // Attention stages chunk the queries; every chunk attends to all keys.
  int sequence_chunks = 1;
  // Attention stages: recompute scores, softmax, attention dropout and probabilities x values
  // in backward instead of storing them (Megatron-LM's selective recomputation).
  bool recompute_attention_core = false;

  bool IsDefault() const { return sequence_chunks == 1 && !recompute_attention_core; }
  friend bool operator==(const StageOptions& a, const StageOptions& b) {
    return a.sequence_chunks == b.sequence_chunks &&
           a.recompute_attention_core == b.recompute_attention_core;
  }
  friend bool operator<(const StageOptions& a, const StageOptions& b) {
    return std::tie(a.sequence_chunks, a.recompute_attention_core) <
           std::tie(b.sequence_chunks, b.recompute_attention_core);
  }
};

enum class SegmentMode {
  kStored,        // run with autograd recording, activations kept until backward
  kCheckpointed,  // run without a graph keeping only inputs; recomputed once in backward
  // Keep only the segment's input. In backward, for each stage from last to first, rerun the
  // segment from its input up to that stage without a graph, then the stage with one, and
  // backpropagate through it: O(1) stored activations, O(n^2) stage forwards.
  kRecomputeAll,
};

absl::string_view SegmentModeName(SegmentMode mode);

// Stages [begin, end) of the chain.
struct Segment {
  int begin = 0;
  int end = 0;
  SegmentMode mode = SegmentMode::kStored;

  int size() const { return end - begin; }
  friend bool operator==(const Segment& a, const Segment& b) {
    return a.begin == b.begin && a.end == b.end && a.mode == b.mode;
  }
};

struct Plan {
  std::string strategy;   // canonical strategy spec, every parameter resolved
  std::vector<Segment> segments;  // contiguous, in order, covering every stage
  std::vector<StageOptions> stage_options;  // empty (all default) or one per stage
  std::string summary;    // one sentence from the strategy: why this plan

  const StageOptions& OptionsOf(int stage) const;
  // Whether any stage runs its sequence in chunks (then recomputation may reassociate sums).
  bool ChunksSequence() const;
  // Stage forwards that backward re-runs: n for a checkpointed segment of n stages,
  // n(n+1)/2 for a recompute-all one (stage k reruns the k stages before it, then itself).
  int64_t RecomputedStages() const;
  // "3 segments: [0,4) checkpointed, [4,8) checkpointed, [8,10) stored; stages 1,3:
  // attention core recomputed"
  std::string Describe() const;
};

// A plan is valid for a chain with these stages when its segments are non-empty, contiguous,
// in order and cover every stage exactly, and its stage options are for stages that support
// them (chunks on position-wise and attention stages, attention-core recomputation on
// attention stages). Internal errors: a strategy bug, named with the plan.
absl::Status ValidatePlan(const Plan& plan, const std::vector<StageInfo>& stages);

}  // namespace ckpt
