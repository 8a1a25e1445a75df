// recompute_all: keep only the chain's input; recompute everything else, stage by stage.
//
// Keeps: the chain's input (and an RNG snapshot if any stage is stochastic).
// Recomputes: for each stage k from last to first, the forward from the chain's input up to
// stage k's input without a graph, then stage k with one, and backpropagates through it.
// Memory: O(1) stored activations in L (one boundary and one stage's graph at a time).
// Compute: L(L+1)/2 stage forwards in backward (L(L-1)/2 without a graph plus L with), so
// O(L^2): the extreme end of the trade-off (Chen et al. 2016, section 4, the "no memory"
// baseline; Griewank and Walther's treatment of reversal without checkpoints).
#include "absl/strings/str_cat.h"
#include "core/plan/strategy.h"

namespace ckpt {
namespace {

absl::StatusOr<Plan> RecomputeAll(const ModelProfile& profile) {
  const int n = profile.num_stages();
  Plan plan;
  if (n > 0) plan.segments.push_back({0, n, SegmentMode::kRecomputeAll});
  plan.summary = absl::StrCat("only the input of the ", n, " stages is kept; backward reruns ",
                              n * (n + 1) / 2, " stage forwards");
  return plan;
}

const PlannerRegistration registration(
    "recompute_all",
    "keep only the chain's input; backward recomputes each stage's input from it (O(L^2))",
    RecomputeAll);

}  // namespace
}  // namespace ckpt
