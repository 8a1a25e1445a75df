#include "strategies/revolve/revolve.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/plan/memory_model.h"
#include "core/plan/schedule.h"
#include "core/plan/spec.h"
#include "core/plan/time_model.h"

namespace ckpt {
namespace {
const StrategyRegistration<Revolve> registration;
constexpr int kMaxBudgetCounts = 64;

// C(n, k), for the small values the closed form asks for (C(c + r, r) stops at the chain's
// length times c + 1).
int64_t Choose(int64_t n, int64_t k) {
  if (k < 0 || k > n) return 0;
  double c = 1;
  for (int64_t i = 1; i <= k; ++i) c = c * static_cast<double>(n - k + i) / static_cast<double>(i);
  return static_cast<int64_t>(std::llround(c));
}

// R(l, s) of the header, from the closed form (R(l, s) = t(l, s + 1)), and the first j that
// achieves it, found by trying every j against the closed form: O(l r) for a split.
class Binomial {
 public:
  static int64_t R(int64_t l, int64_t s) {
    if (l <= 1) return 0;
    if (s <= 0) return l * (l - 1) / 2;
    return Revolve::BinomialRecomputations(l, s + 1);
  }
  int Split(int l, int s) {
    auto it = memo_.find({l, s});
    if (it != memo_.end()) return it->second;
    const int64_t target = R(l, s);
    int best = 1;
    for (int j = 1; j < l; ++j) {
      if (j + R(l - j, s - 1) + R(j, s) == target) {
        best = j;
        break;
      }
    }
    memo_.emplace(std::make_pair(l, s), best);
    return best;
  }

 private:
  std::map<std::pair<int, int>, int> memo_;
};

// The list over [a, a + l) with s checkpoints besides its input.
std::vector<Segment> Build(Binomial& binomial, int a, int l, int s) {
  std::vector<Segment> list;
  while (l > 1) {
    if (s <= 0) {
      // Stages a..a+l-2 checkpointed, their rerun again without checkpoints; the last stored.
      Segment first{a, a + l - 1, SegmentMode::kCheckpointed, Build(binomial, a, l - 1, 0)};
      if (first.inner.size() == 1 && first.inner.front().mode == SegmentMode::kStored) {
        first.inner.clear();
      }
      list.push_back(std::move(first));
      a += l - 1;
      l = 1;
      break;
    }
    const int j = binomial.Split(l, s);
    Segment first{a, a + j, SegmentMode::kCheckpointed, Build(binomial, a, j, s)};
    if (first.inner.size() == 1 && first.inner.front().mode == SegmentMode::kStored) {
      first.inner.clear();
    }
    list.push_back(std::move(first));
    a += j;
    l -= j;
    s -= 1;
  }
  if (l == 1) {
    if (!list.empty() && list.back().mode == SegmentMode::kStored && list.back().end == a) {
      list.back().end = a + 1;
    } else {
      list.push_back({a, a + 1, SegmentMode::kStored, {}});
    }
  }
  return list;
}

}  // namespace

std::vector<ParamDef> Revolve::Params() {
  return {IntParam("snapshots", "auto",
                   "checkpoints, the chain's input included, 1..L; auto = ceil(sqrt(L)) + 1")
              .Min(1)
              .AllowAuto(),
          BytesParam("budget", "none",
                     "peak bytes above the baseline: the fastest snapshot count whose predicted "
                     "peak fits (instead of snapshots)")
              .AllowNone()};
}

absl::StatusOr<std::unique_ptr<Strategy>> Revolve::Create(const ParamValues& params) {
  std::optional<int> snapshots;
  std::optional<int64_t> budget;
  if (!params.IsAuto("snapshots")) snapshots = static_cast<int>(params.Int("snapshots"));
  if (!params.IsNone("budget")) budget = params.Bytes("budget");
  if (snapshots.has_value() && budget.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("revolve: snapshots=", *snapshots, " and budget=", params.Text("budget"),
                     " both choose the checkpoint count; accepted: one of them"));
  }
  return std::make_unique<Revolve>(snapshots, budget);
}

int64_t Revolve::BinomialRecomputations(int64_t l, int64_t c) {
  int64_t r = 0;
  while (Choose(c + r, r) < l) ++r;
  return r * l - Choose(c + r, r - 1);
}

Plan Revolve::PlanWith(int n, int c) {
  Binomial binomial;
  Plan plan;
  plan.shown = {{"snapshots", absl::StrCat(c)}};
  plan.segments = Build(binomial, 0, n, c - 1);
  plan.summary = absl::StrCat("binomial schedule with ", c, " checkpoints: ", binomial.R(n, c - 1),
                              " stage forwards rerun");
  return plan;
}

absl::StatusOr<Plan> Revolve::MakePlan(const ModelProfile& profile) const {
  const int n = profile.num_stages();
  if (n == 0) return PlanWith(0, 1);
  if (budget_.has_value()) {
    std::vector<Plan> candidates;
    for (int c = 1; c <= n; ++c) {
      // Counts past kMaxBudgetCounts: only the last, where every stage is its own checkpoint.
      if (c > kMaxBudgetCounts && c < n) continue;
      candidates.push_back(PlanWith(n, c));
    }
    int64_t least = 0;
    ASSIGN_OR_RETURN(std::optional<BudgetChoice> best,
                     FastestWithinBudget(profile, std::move(candidates), *budget_, &least));
    if (!best.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("revolve: budget=", FormatByteSize(*budget_),
                                                     " is below the least peak any "
                                                     "checkpoint count reaches on ",
                                                     profile.model, ", ", DescribeBytes(least),
                                                     "; accepted: a budget of at least that"));
    }
    Plan& plan = best->plan;
    absl::StrAppend(&plan.summary, "; the fastest count that fits ", FormatByteSize(*budget_));
    plan.shown = {{"budget", FormatByteSize(*budget_)}};
    return std::move(plan);
  }
  int c = snapshots_.value_or(static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n)))) + 1);
  if (!snapshots_.has_value()) c = std::min(c, n);
  if (c > n) {
    return absl::InvalidArgumentError(absl::StrCat("revolve: snapshots=", c, " is more than the ",
                                                   n, " stages of ", profile.model,
                                                   "; accepted: 1..", n, " or auto"));
  }
  return PlanWith(n, c);
}

}  // namespace ckpt
