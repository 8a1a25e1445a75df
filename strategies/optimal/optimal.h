// optimal: the fastest plan whose peak fits a memory budget, from the measured stage costs:
// Rotor's persistent dynamic programme (Beaumont et al., Inria RR-9302 / ACM TOMS), with a
// choice of policy per stage as Rockmate extends it (store, recompute the attention core,
// recompute the MLP's hidden activation, chunk the sequence: each stage's menu in the
// profile). The recurrence, its chain model and its discretisation are documented in
// strategies/optimal/chain_solver.h.
//
// Keeps, recomputes and offloads: whatever the fastest plan within the budget does; its result is
// a plan tree, checkpoints nested in checkpoints where that is faster than recomputing more, some
// offloaded (their inputs in host memory until their reruns) where the profile knows the copy
// rates (measured, or a link assumed: core/plan/profile.h) and that is faster still; offload=no
// plans keep-or-recompute alone. Host bytes do not count against the budget.
// Memory: its peak, as the memory model predicts it, is within `budget` bytes above the
// baseline (parameters, batch), less kBudgetSlackBytes (core/plan/memory_model.h). Compute: the
// least predicted step time (core/plan/time_model.h, the solver's objective, so that its error is
// this strategy's error) among the candidates that fit: the solver's plan at every budget of
// its grid, and uniform's plan with every segment count (so that where the chain model
// misjudges a plan's peak, the answer is still never slower than that heuristic's; with
// offload, its offloading variant too).
//
// Precision: under autocast (a profile taken under it, the sweep's --amp) no stage is chunked
// unless chunks_under_amp=yes: a chunk's partial weight gradient is rounded to the autocast
// dtype before the chunks are summed (bfloat16 keeps 8 bits), which moved a tiny model's
// gradients 23 times as far as autocast itself moves store_all's (docs/testing.md). Every other
// policy computes what store_all computes, in the same dtype.
//
// budget=auto: the predicted peak of uniform's default plan (ceil(sqrt(L)) segments), plus the
// slack, so that a sweep compares the two at equal memory. A budget below every candidate's
// peak is an error that names the least peak among them.
//
// The candidates depend on the model, not on the budget (the grid is the chain model's peak
// with every stage stored, in at most 2000 steps), so a larger budget can only widen those that
// fit: the predicted step time never grows with the budget.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/plan/strategy.h"

namespace ckpt {

class Optimal : public Strategy {
 public:
  static constexpr char kId[] = "optimal";
  static constexpr char kSummary[] =
      "the fastest plan tree within a peak budget, from measured stage costs (Rotor's dynamic "
      "programme with per-stage policies)";
  static constexpr char kBudgetParam[] = "budget";
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params);

  // No budget: auto. `offload`: offloaded segments may be planned (where the profile knows the
  // copy rates). `chunks_under_amp`: stages may be chunked under autocast too.
  Optimal(std::optional<int64_t> budget, bool offload, bool chunks_under_amp = false)
      : budget_(budget), offload_(offload), chunks_under_amp_(chunks_under_amp) {}
  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override;

 private:
  std::optional<int64_t> budget_;
  bool offload_ = true;
  bool chunks_under_amp_ = false;
};

}  // namespace ckpt
