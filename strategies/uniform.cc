// uniform: cut the chain into `segments` contiguous segments of near-equal stage counts and
// checkpoint each, as PyTorch's checkpoint_sequential and Chen et al. 2016 ("Training Deep
// Nets with Sublinear Memory Cost", arXiv:1604.06174) do.
//
// Keeps: the input of every segment, plus the stored activations of the last segment (backward
// starts with it, so checkpointing it would rerun it right after the forward that dropped it).
// Recomputes: every stage of the checkpointed segments, once, during backward.
// Memory: about k segment inputs + L/k stages' activations at the backward peak, least at
// k = sqrt(L) (the default, ceil(sqrt(L))). Compute: one extra forward of the first L - L/k stages.
//
// With budget=SIZE instead of a segment count: the fastest count of SegmentCounts(L)
// (strategies/plan_builders.h) whose predicted peak fits SIZE above the baseline, chosen as every
// budget planner chooses; a budget no count fits is an error naming the least peak any reaches.
// With offload=yes the checkpoints are offloaded segments: their inputs wait in host memory
// (DeepSpeed's cpu_checkpointing), except the first's, the batch, which the caller holds.
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/bytes.h"
#include "core/base/status_macros.h"
#include "core/plan/spec.h"
#include "core/plan/strategy.h"
#include "strategies/plan_builders.h"

namespace ckpt {
namespace {

constexpr char kId[] = "uniform";

class Uniform : public Strategy {
 public:
  static std::vector<ParamDef> Params() {
    std::vector<ParamDef> params = CountOrBudgetParams(
        "segments", "number of segments, 1..L; auto = ceil(sqrt(L)); 1 = no checkpointing",
        "segment count");
    params.push_back(ChoiceParam("offload", {"no", "yes"}, "no",
                                 "yes: the checkpoints keep their inputs in host memory, all but "
                                 "the first (the batch), as DeepSpeed's cpu_checkpointing "
                                 "(docs/offload.md)"));
    return params;
  }

  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params) {
    ASSIGN_OR_RETURN(CountOrBudget read,
                     ReadCountOrBudget(params, kId, "segments", "segment count"));
    auto uniform = std::make_unique<Uniform>();
    uniform->segments_ = read.count;
    uniform->budget_ = read.budget;
    uniform->offload_ = params.Text("offload") == "yes";
    return uniform;
  }

  // InvalidArgument if segments > L (naming both), or if no count fits the budget.
  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override {
    const int n = profile.num_stages();
    if (budget_.has_value()) {
      std::vector<Plan> candidates;
      for (const int k : SegmentCounts(n)) candidates.push_back(EvenSegments(k, n, offload_));
      ASSIGN_OR_RETURN(BudgetChoice best,
                       FastestOrLeastPeak(profile, std::move(candidates), *budget_,
                                          FormatByteSize(*budget_), kId, "any segment count"));
      if (offload_) best.plan.shown.emplace_back("offload", "yes");
      absl::StrAppend(&best.plan.summary, " (the fastest count whose predicted peak, ",
                      DescribeBytes(best.predicted.peak_bytes), ", fits)");
      return std::move(best.plan);
    }
    const int k = segments_.value_or(CeilSqrt(n));
    if (k > n) {
      return absl::InvalidArgumentError(absl::StrCat("uniform: segments=", k, " is more than the ",
                                                     n, " stages of ", profile.model,
                                                     "; accepted: 1..", n, " or auto"));
    }
    Plan plan = EvenSegments(k, n, offload_);
    if (!segments_.has_value()) absl::StrAppend(&plan.summary, " (k = ceil(sqrt(", n, ")))");
    return plan;
  }

 private:
  std::optional<int> segments_;  // empty: ceil(sqrt(L)), unless budget_ is given
  std::optional<int64_t> budget_;
  bool offload_ = false;
};

const StrategyRegistration<Uniform> registration(
    kId,
    "checkpoint sequential: k near-equal segments keep only their inputs (default k = "
    "ceil(sqrt(L)))",
    StrategyTraits{/*budget_param=*/"budget", /*budget_chooses=*/"segments"});

}  // namespace
}  // namespace ckpt
