// recompute_all: keep only the chain's input; recompute everything else, stage by stage.
//
// Keeps: the chain's input (and an RNG snapshot if any stage is stochastic).
// Recomputes: for each stage k from last to first, the forward from the chain's input up to
// stage k's input without a graph, then stage k with one, and backpropagates through it.
// Memory: O(1) stored activations in L (one boundary and one stage's graph at a time).
// Compute: L(L+1)/2 stage forwards in backward (L(L-1)/2 without a graph plus L with), so
// O(L^2): the extreme end of the trade-off (Chen et al. 2016, section 4, the "no memory"
// baseline; Griewank and Walther's treatment of reversal without checkpoints).
#pragma once

#include <memory>
#include <vector>

#include "core/plan/strategy.h"

namespace ckpt {

class RecomputeAll : public Strategy {
 public:
  static constexpr char kId[] = "recompute_all";
  static constexpr char kSummary[] =
      "keep only the chain's input; backward recomputes each stage's input from it (O(L^2))";
  static std::vector<ParamDef> Params() { return {}; }
  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params);

  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override;
};

}  // namespace ckpt
