#include "strategies/plan_builders.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/base/bytes.h"
#include "core/base/status_macros.h"
#include "core/plan/spec.h"

namespace ckpt {

Plan AllStored(int n) {
  Plan plan;
  if (n > 0) plan.segments.push_back({0, n, SegmentMode::kStored});
  return plan;
}

Plan WithPartRecomputed(const ModelProfile& profile, PartKind kind, absl::string_view part,
                        absl::string_view stages, absl::string_view none) {
  Plan plan = AllStored(profile.num_stages());
  int recomputed = 0;
  for (const StageInfo& stage : profile.stages) {
    plan.stage_policies.push_back(PolicyFor(stage, kind, {PartAction::Recompute(kind)}));
    if (!plan.stage_policies.back().IsDefault()) ++recomputed;
  }
  plan.summary =
      recomputed == 0
          ? absl::StrCat(none, ": planned like store_all (every stage stored, nothing recomputed)")
          : absl::StrCat("every stage stored, but ", part, " of the ", recomputed, " ", stages,
                         " stages is recomputed in backward");
  return plan;
}

int CeilSqrt(int n) {
  int r = static_cast<int>(std::sqrt(static_cast<double>(n)));
  while (r * r > n) --r;
  while (r * r < n) ++r;
  return r;
}

Plan EvenSegments(int k, int n, bool offload) {
  Plan plan;
  plan.shown = {{"segments", absl::StrCat(k)}};
  if (offload) plan.shown.emplace_back("offload", "yes");
  const SegmentMode kept = offload ? SegmentMode::kOffloaded : SegmentMode::kCheckpointed;
  int begin = 0;
  for (int s = 0; s < k; ++s) {
    const int size = n / k + (s < n % k ? 1 : 0);
    plan.segments.push_back({begin, begin + size, s == k - 1 ? SegmentMode::kStored : kept});
    begin += size;
  }
  plan.summary = absl::StrCat(k, " segments of ", n / k, n % k ? "-" : "",
                              n % k ? absl::StrCat(n / k + 1) : "",
                              " stages; all but the last keep only their input",
                              offload ? ", in host memory but the first's (the batch)" : "");
  return plan;
}

std::vector<int> SegmentCounts(int n) {
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

std::vector<ParamDef> CountOrBudgetParams(const std::string& count_param,
                                          const std::string& count_help, absl::string_view what) {
  return {IntParam(count_param, "auto", count_help).Min(1).AllowAuto(),
          BytesParam("budget", "none",
                     absl::StrCat("peak bytes above the baseline: the fastest ", what,
                                  " whose predicted peak fits (instead of ", count_param, ")"))
              .AllowNone()};
}

absl::StatusOr<CountOrBudget> ReadCountOrBudget(const ParamValues& params, absl::string_view id,
                                                const std::string& count_param,
                                                absl::string_view what) {
  CountOrBudget read;
  if (!params.IsAuto(count_param)) read.count = static_cast<int>(params.Int(count_param));
  if (!params.IsNone("budget")) read.budget = params.Bytes("budget");
  if (read.count.has_value() && read.budget.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(id, ": ", count_param, "=", *read.count, " and budget=", params.Text("budget"),
                     " both choose the ", what, "; accepted: one of them"));
  }
  return read;
}

absl::StatusOr<BudgetChoice> FastestOrLeastPeak(const ModelProfile& profile,
                                                std::vector<Plan> candidates, int64_t budget,
                                                absl::string_view budget_text, absl::string_view id,
                                                absl::string_view what) {
  int64_t least = 0;
  ASSIGN_OR_RETURN(std::optional<BudgetChoice> best,
                   FastestWithinBudget(profile, std::move(candidates), budget, &least));
  if (!best.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(id, ": budget=", budget_text, " is below the least peak ", what,
                     " reaches on ", profile.model, ", ", DescribeBytes(least - kBudgetSlackBytes),
                     "; accepted: a budget of at least ", least, " bytes (that peak and the ",
                     kBudgetSlackBytes, " bytes a budgeted plan leaves free)"));
  }
  best->plan.shown = {{"budget", std::string(budget_text)}};
  return *std::move(best);
}

}  // namespace ckpt
