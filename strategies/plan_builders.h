// What several strategy plugins build alike, so that no plugin depends on another: the stored
// chain, part recomputation over it, uniform's even split and the counts a budget search tries,
// and the choice of the fastest plan within a budget.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/plan/memory_model.h"
#include "core/plan/plan.h"
#include "core/plan/profile.h"
#include "core/plan/spec.h"

namespace ckpt {

// Every stage in one stored segment (no segment for an empty chain): store_all's plan.
Plan AllStored(int num_stages);

// AllStored, with part `kind` recomputed in backward in every stage that declares it. Its summary
// names the stages ("the hidden activation of the 4 MLP stages", from `part` and `stages`), or
// says it planned like store_all where no stage declares the part (`none`: "no MLP hidden parts").
Plan WithPartRecomputed(const ModelProfile& profile, PartKind kind, absl::string_view part,
                        absl::string_view stages, absl::string_view none);

// `num_stages` in k contiguous segments (1 <= k <= num_stages) whose sizes differ by at most
// one, the first ones longer; all but the last checkpointed (offloaded if `offload`), the last
// stored: checkpoint_sequential's plan. Plan::shown holds segments=k (and offload=yes).
Plan EvenSegments(int k, int num_stages, bool offload = false);

// The segment counts a budget search tries on a chain of `num_stages`, ascending: 1..128, then
// each at least 3% above the one before, with ceil(sqrt(L)) and L: O(log L) beyond 128 (the peak
// is not monotone in the count, so none may be skipped by bisection).
std::vector<int> SegmentCounts(int num_stages);

// ceil(sqrt(n)), exact for every int n >= 0.
int CeilSqrt(int n);

// A count parameter (`count_param`, "auto" when not given, at least 1, described by
// `count_help`) and budget=SIZE ("none" when not given), which choose the same thing (`what`:
// "segment count") two ways. CountOrBudgetParams declares the two; ReadCountOrBudget reads those
// given, or is InvalidArgument "`id`: COUNT_PARAM=K and budget=B both choose the `what`; accepted:
// one of them".
std::vector<ParamDef> CountOrBudgetParams(const std::string& count_param,
                                          const std::string& count_help, absl::string_view what);
struct CountOrBudget {
  std::optional<int> count;
  std::optional<int64_t> budget;
};
absl::StatusOr<CountOrBudget> ReadCountOrBudget(const ParamValues& params, absl::string_view id,
                                                const std::string& count_param,
                                                absl::string_view what);

// The fastest of `candidates` within `budget` (FastestWithinBudget), its Plan::shown set to
// {budget=`budget_text`}. None fits: InvalidArgument "`id`: budget=`budget_text` is below the
// least peak `what` reaches on MODEL, PEAK; accepted: a budget of at least PEAK + 64 bytes ...".
absl::StatusOr<BudgetChoice> FastestOrLeastPeak(const ModelProfile& profile,
                                                std::vector<Plan> candidates, int64_t budget,
                                                absl::string_view budget_text, absl::string_view id,
                                                absl::string_view what);

}  // namespace ckpt
