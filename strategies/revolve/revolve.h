// revolve: binomial checkpointing (Griewank 1992; Griewank and Walther, "Algorithm 799:
// Revolve", ACM TOMS 2000), the schedule that reverses a chain of equal stages with `c`
// checkpoints in the fewest forward steps, written as a plan tree.
//
// With c checkpoints (the chain's input among them) the fewest stage forwards rerun in
// backward are t(l, c) = r l - C(c + r, r - 1) for l stages, where r is the least integer
// with C(c + r, r) >= l: for a list over l stages with s = c - 1 checkpoints besides its
// input, R(l, s) = min over j of [ j + R(l - j, s - 1) + R(j, s) ], R(1, s) = 0,
// R(l, 0) = l (l - 1) / 2. The plan: the first j stages checkpointed (their rerun a revolve of
// j stages with s checkpoints), then a revolve of the remaining l - j with s - 1, the input of
// stage j being the checkpoint spent. With no checkpoint to spend, every stage's input is
// recomputed from the list's: checkpoints nested l - 1 deep.
//
// It reads only the chain's length: optimal for equal stages, a classic heuristic otherwise.
// snapshots=auto: ceil(sqrt(L)) + 1 (uniform's default count of segment inputs, and the
// input). With budget=SIZE instead: of the counts 1 to 64 and L, the fastest plan (by the time
// model, core/plan/time_model.h) whose peak the memory model predicts within SIZE bytes above the
// baseline, less kBudgetSlackBytes (core/plan/memory_model.h); an error names the least peak any
// count reaches.
// Memory: c checkpointed inputs and one stage's activations at a time. Compute: t(l, c) extra
// stage forwards (the recompute count).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/plan/strategy.h"

namespace ckpt {

class Revolve : public Strategy {
 public:
  static constexpr char kId[] = "revolve";
  static constexpr char kSummary[] =
      "binomial checkpointing (Griewank's Revolve): the fewest recomputations with c "
      "checkpoints on a chain of equal stages";
  static constexpr char kBudgetParam[] = "budget";
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params);

  Revolve(std::optional<int> snapshots, std::optional<int64_t> budget)
      : snapshots_(snapshots), budget_(budget) {}
  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override;

  // The binomial plan for `stages` stages with `checkpoints` >= 1 (the input included).
  static Plan PlanWith(int stages, int checkpoints);
  // t(l, c) from the closed form above (c >= 1).
  static int64_t BinomialRecomputations(int64_t stages, int64_t checkpoints);

 private:
  std::optional<int> snapshots_;
  std::optional<int64_t> budget_;
};

}  // namespace ckpt
