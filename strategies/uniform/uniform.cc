#include "strategies/uniform/uniform.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/plan/memory_model.h"
#include "core/plan/spec.h"

namespace ckpt {
namespace {
const StrategyRegistration<Uniform> registration;

// ceil(sqrt(n)) in integers, exact for every int.
int CeilSqrt(int n) {
  int r = static_cast<int>(std::sqrt(static_cast<double>(n)));
  while (r * r > n) --r;
  while (r * r < n) ++r;
  return r;
}
}  // namespace

std::vector<ParamDef> Uniform::Params() {
  return {IntParam("segments", "auto",
                   "number of segments, 1..L; auto = ceil(sqrt(L)); 1 = no checkpointing")
              .Min(1)
              .AllowAuto(),
          BytesParam("budget", "none",
                     "peak bytes above the baseline: the fastest segment count whose "
                     "predicted peak fits (instead of segments)")
              .AllowNone(),
          ChoiceParam("offload", {"no", "yes"}, "no",
                      "yes: the checkpoints keep their inputs in host memory, all but the first "
                      "(the batch), as DeepSpeed's cpu_checkpointing (docs/offload.md)")};
}

absl::StatusOr<std::unique_ptr<Strategy>> Uniform::Create(const ParamValues& params) {
  std::optional<int> segments;
  std::optional<int64_t> budget;
  if (!params.IsAuto("segments")) segments = static_cast<int>(params.Int("segments"));
  if (!params.IsNone("budget")) budget = params.Bytes("budget");
  if (segments.has_value() && budget.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("uniform: segments=", *segments, " and budget=", params.Text("budget"),
                     " both choose the segment count; accepted: one of them"));
  }
  return std::make_unique<Uniform>(segments, budget, params.Text("offload") == "yes");
}

Plan Uniform::PlanWith(int k, int n, bool offload) {
  Plan plan;
  plan.shown = {{"segments", absl::StrCat(k)}};
  if (offload) plan.shown.emplace_back("offload", "yes");
  const SegmentMode kept = offload ? SegmentMode::kOffloaded : SegmentMode::kCheckpointed;
  // The first n % k segments get one stage more, so sizes differ by at most one.
  int begin = 0;
  for (int s = 0; s < k; ++s) {
    const int size = n / k + (s < n % k ? 1 : 0);
    const bool last = s == k - 1;
    plan.segments.push_back({begin, begin + size, last ? SegmentMode::kStored : kept});
    begin += size;
  }
  plan.summary = absl::StrCat(k, " segments of ", n / k, n % k ? "-" : "",
                              n % k ? absl::StrCat(n / k + 1) : "",
                              " stages; all but the last keep only their input",
                              offload ? ", in host memory but the first's (the batch)" : "");
  return plan;
}

std::vector<int> Uniform::SegmentCounts(int n) {
  constexpr int kEveryCountUpTo = 128;
  std::vector<int> counts;
  for (int k = 1; k <= n; k = k < kEveryCountUpTo ? k + 1 : std::max(k + 1, k + k / 32)) {
    counts.push_back(k);
  }
  for (const int k : {CeilSqrt(n), n}) {
    if (k >= 1 && std::find(counts.begin(), counts.end(), k) == counts.end()) counts.push_back(k);
  }
  std::sort(counts.begin(), counts.end());
  return counts;
}

absl::StatusOr<Plan> Uniform::MakePlan(const ModelProfile& profile) const {
  const int n = profile.num_stages();
  if (budget_.has_value()) {
    std::vector<Plan> candidates;
    for (const int k : SegmentCounts(n)) candidates.push_back(PlanWith(k, n, offload_));
    int64_t least = 0;
    ASSIGN_OR_RETURN(std::optional<BudgetChoice> best,
                     FastestWithinBudget(profile, std::move(candidates), *budget_, &least));
    if (!best.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("uniform: budget=", FormatByteSize(*budget_),
                       " is below the least peak any segment count reaches on ", profile.model,
                       ", ", DescribeBytes(least), "; accepted: a budget of at least that"));
    }
    Plan& plan = best->plan;
    plan.shown = {{"budget", FormatByteSize(*budget_)}};
    if (offload_) plan.shown.emplace_back("offload", "yes");
    absl::StrAppend(&plan.summary, " (the fastest count whose predicted peak, ",
                    DescribeBytes(best->predicted.peak_bytes), ", fits)");
    return std::move(plan);
  }
  const int k = segments_.value_or(CeilSqrt(n));
  if (k > n) {
    return absl::InvalidArgumentError(absl::StrCat("uniform: segments=", k, " is more than the ", n,
                                                   " stages of ", profile.model, "; accepted: 1..",
                                                   n, " or auto"));
  }
  Plan plan = PlanWith(k, n, offload_);
  if (!segments_.has_value()) absl::StrAppend(&plan.summary, " (k = ceil(sqrt(", n, ")))");
  return plan;
}

}  // namespace ckpt
