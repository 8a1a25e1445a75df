// uniform: cut the chain into `segments` contiguous segments of near-equal stage counts and
// checkpoint each, as PyTorch's checkpoint_sequential and Chen et al. 2016 ("Training Deep
// Nets with Sublinear Memory Cost", arXiv:1604.06174) do.
//
// Keeps: the input of every segment, plus the stored activations of the last segment.
// Recomputes: every stage of the checkpointed segments, once, during backward.
// Memory: with k segments of L/k stages, about k segment inputs + L/k stages' activations at
// the backward peak, minimised at k = sqrt(L) (the default, ceil(sqrt(L))): O(sqrt(L)).
// Compute: one extra forward of the first L - L/k stages.
//
// The last segment is not checkpointed (as in checkpoint_sequential): backward starts with
// it, so it would be recomputed right after the forward that just dropped its activations.
// Storing it costs no extra peak memory and saves that recomputation.
//
// With budget=SIZE instead of a segment count: the fastest segment count whose peak the memory
// model predicts within SIZE bytes above the baseline (the heuristic at a memory budget, to
// compare with budget planners), chosen as every budget planner chooses (FastestWithinBudget:
// by predicted step time on a timed profile, else by stages rerun, where fewer segments rerun
// fewer stages). The counts tried are SegmentCounts(L): every count up to 128 and, on longer
// chains, counts about 3% apart up to L, ceil(sqrt(L)) among them (the peak is not monotone in
// the count, so none is skipped by a search; trying every count of a 10,000-stage chain took
// minutes). A budget no count tried fits is an error naming the least peak any reaches.
//
// With offload=yes the checkpoints are offloaded segments: their inputs wait in host memory
// (DeepSpeed's cpu_checkpointing), except the first's, the batch, which the caller holds.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/plan/strategy.h"

namespace ckpt {

class Uniform : public Strategy {
 public:
  static constexpr char kId[] = "uniform";
  static constexpr char kBudgetParam[] = "budget";
  static constexpr char kSummary[] =
      "checkpoint sequential: k near-equal segments keep only their inputs (default k = "
      "ceil(sqrt(L)))";
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params);

  // `segments` empty means ceil(sqrt(L)), unless `budget` is given. `offload`: the checkpoints
  // are offloaded segments (core/plan/plan.h).
  Uniform(std::optional<int> segments, std::optional<int64_t> budget, bool offload = false)
      : segments_(segments), budget_(budget), offload_(offload) {}

  // InvalidArgument if segments > L (naming both), or if no count fits the budget.
  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override;

  // The plan with k segments (1 <= k <= L), its checkpoints offloaded if `offload`.
  static Plan PlanWith(int k, int num_stages, bool offload = false);

  // The segment counts a budget search tries on a chain of `num_stages`, ascending: 1..128,
  // then each at least 3% above the one before, with ceil(sqrt(L)) and L: O(log L) beyond 128.
  static std::vector<int> SegmentCounts(int num_stages);

 private:
  std::optional<int> segments_;
  std::optional<int64_t> budget_;
  bool offload_ = false;
};

}  // namespace ckpt
