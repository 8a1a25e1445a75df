// A plan: what a strategy decides for a model, which the executor runs and the memory model
// predicts.
//
// A model is an ordered chain of stages; stage i consumes the tensors stage i-1 produced. A
// plan cuts the chain into contiguous segments and says, per segment, whether its activations
// are stored for backward (as usual) or checkpointed: only the segment's inputs are kept, and
// backward reruns the segment before backpropagating through it. A checkpointed segment holds
// the plan of that rerun, over its own stages, which may checkpoint sub-segments in turn, to
// any depth: the plan is a tree, and every schedule of the persistent kind (Chen's O(log n),
// Griewank's binomial one, Rotor's) is such a tree.
//
//   [0,8) checkpointed              forward: stages 0..7 without a graph, keeping x0
//     [0,4) checkpointed            backward: rerun 0..7 as this inner plan says, i.e. 0..3
//       [0,4) stored                  without a graph keeping x0, 4..7 stored; backprop 7..4;
//     [4,8) stored                    rerun 0..3 stored; backprop 3..0
//
// Besides the segments, a plan holds a policy for each stage's named parts (core/plan/stage.h).
// Needs no LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/plan/stage.h"

namespace ckpt {

enum class SegmentMode {
  kStored,        // run with autograd recording, activations kept until backward
  kCheckpointed,  // run without a graph keeping only inputs; rerun in backward as `inner` says
  // Keep only the segment's input. In backward, for each stage from last to first, rerun the
  // segment from its input up to that stage without a graph, then the stage with one, and
  // backpropagate through it: O(1) stored activations, O(n^2) stage forwards.
  kRecomputeAll,
  // Checkpointed, with its kept input on the host: moved to the host pool after the forward
  // that reads it, and back to the device before its rerun (DeepSpeed's cpu_checkpointing). The
  // device holds neither its activations nor, unless something else holds it, its input.
  kOffloaded,
};

// Every mode, for the plan text's grammar (core/plan/plan_text.h): a new mode is added here, with
// its name in SegmentModeName and its rule in Compile (core/plan/schedule.h).
inline constexpr SegmentMode kSegmentModes[] = {SegmentMode::kStored, SegmentMode::kCheckpointed,
                                                SegmentMode::kRecomputeAll,
                                                SegmentMode::kOffloaded};
absl::string_view SegmentModeName(SegmentMode mode);
// Whether a segment of this mode is rerun in backward under a plan of its own (`inner`):
// checkpointed and offloaded ones.
inline bool HasInnerPlan(SegmentMode mode) {
  return mode == SegmentMode::kCheckpointed || mode == SegmentMode::kOffloaded;
}

// Stages [begin, end) of the chain.
struct Segment {
  int begin = 0;
  int end = 0;
  SegmentMode mode = SegmentMode::kStored;
  // Modes with HasInnerPlan only: the plan of its rerun in backward, segments covering
  // [begin, end) in order. Empty: the rerun stores every stage.
  std::vector<Segment> inner = {};
  TextPosition position = {};

  int size() const { return end - begin; }
  friend bool operator==(const Segment& a, const Segment& b) {
    return a.begin == b.begin && a.end == b.end && a.mode == b.mode && a.inner == b.inner;
  }
  friend bool operator!=(const Segment& a, const Segment& b) { return !(a == b); }
};

struct Plan {
  // Who made the plan: a strategy's label, its id and `shown` ("uniform:segments=4"), stamped
  // by BoundStrategy::PlanFor; a plan from elsewhere (a test, a file's text) names itself.
  std::string strategy;
  // The parameters a strategy's label shows, as (key, value): those it resolved (auto, to what
  // it chose) and those given that say how it planned. Declared keys only, in any order.
  std::vector<std::pair<std::string, std::string>> shown;
  std::vector<Segment> segments;            // contiguous, in order, covering every stage
  std::vector<StagePolicy> stage_policies;  // empty (every part stored) or one per stage
  std::string summary;                      // one sentence from the strategy: why this plan

  const StagePolicy& PolicyOf(int stage) const;
  // Whether its sums may be ordered otherwise than store_all's: a stage runs in chunks (BLAS
  // may block a chunk's rows differently), or a part by a fused kernel.
  bool Reassociates() const;
  // Levels of checkpoints inside checkpoints: 0 without checkpoints, 1 for one level.
  int Depth() const;
  // The same plan with every offloaded segment, at any depth, checkpointed instead: what the
  // plan does without its copies (same arithmetic, same reruns), to time them against.
  Plan WithoutOffload() const;
  // (Plans as text, both ways: core/plan/plan_text.h.)
};

// A plan is valid for a chain with these stages when its segments, and every checkpointed
// segment's inner segments within it, are non-empty, contiguous, in order and cover their
// range exactly; only checkpointed and offloaded segments have inner plans; and its policies are
// for parts the stages declare, with actions that apply to them and chunk counts their axes allow.
// InvalidArgument naming the element (with its line and column when plan text wrote it) and
// what was expected. Plans are validated once, where they enter: a strategy's
// (BoundStrategy::PlanFor), a file's (ParsePlan).
absl::Status ValidatePlan(const Plan& plan, const std::vector<StageInfo>& stages);

}  // namespace ckpt
