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

// One stage, profiled: the info plus what running it stored (no checkpointing) cost.
struct StageProfile {
  StageInfo info;
  // Increase of live bytes from running the stage with autograd recording: what its graph
  // keeps for backward plus its outputs, minus its inputs if they were freed.
  int64_t activation_bytes = 0;
  int64_t output_bytes = 0;     // bytes of the tensors it returns
  int64_t transient_bytes = 0;  // highest live bytes during the stage above those at its end
  double forward_ms = 0;        // median time of the stage's forward
};

struct ModelProfile {
  std::string model;            // canonical model spec
  std::vector<StageProfile> stages;
  int64_t input_bytes = 0;      // bytes of the chain's inputs
};

enum class SegmentMode {
  kStored,        // run with autograd recording, activations kept until backward
  kCheckpointed,  // run without a graph keeping only inputs; recomputed in backward
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
  std::string summary;    // one sentence from the strategy: why this plan

  // Stage forwards that backward re-runs: the sizes of the checkpointed segments.
  int64_t RecomputedStages() const;
  // "3 segments: [0,4) checkpointed, [4,8) checkpointed, [8,10) stored"
  std::string Describe() const;
};

// A plan is valid for a chain of `num_stages` stages when its segments are non-empty,
// contiguous, in order and cover [0, num_stages) exactly.
absl::Status ValidatePlan(const Plan& plan, int num_stages);

}  // namespace ckpt
