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
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/bytes.h"
#include "core/base/status_macros.h"
#include "core/plan/spec.h"
#include "core/plan/strategy.h"
#include "strategies/plan_builders.h"

namespace ckpt {
namespace {

constexpr int kMaxBudgetCounts = 64;

// C(n, k), for the small values the closed form asks for (C(c + r, r) stops at the chain's
// length times c + 1).
int64_t Choose(int64_t n, int64_t k) {
  if (k < 0 || k > n) return 0;
  double c = 1;
  for (int64_t i = 1; i <= k; ++i) c = c * static_cast<double>(n - k + i) / static_cast<double>(i);
  return static_cast<int64_t>(std::llround(c));
}

// t(l, c) above, from the closed form (c >= 1).
int64_t BinomialRecomputations(int64_t l, int64_t c) {
  int64_t r = 0;
  while (Choose(c + r, r) < l) ++r;
  return r * l - Choose(c + r, r - 1);
}

// R(l, s) above, from the closed form (R(l, s) = t(l, s + 1)), and the first j that
// achieves it, found by trying every j against the closed form: O(l r) for a split.
class Binomial {
 public:
  static int64_t R(int64_t l, int64_t s) {
    if (l <= 1) return 0;
    if (s <= 0) return l * (l - 1) / 2;
    return BinomialRecomputations(l, s + 1);
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

// The binomial plan for `n` stages with `c` >= 1 checkpoints (the input included).
Plan BinomialPlan(int n, int c) {
  Binomial binomial;
  Plan plan;
  plan.shown = {{"snapshots", absl::StrCat(c)}};
  plan.segments = Build(binomial, 0, n, c - 1);
  plan.summary = absl::StrCat("binomial schedule with ", c, " checkpoints: ", binomial.R(n, c - 1),
                              " stage forwards rerun");
  return plan;
}

constexpr char kId[] = "revolve";

class Revolve : public Strategy {
 public:
  static std::vector<ParamDef> Params() {
    return CountOrBudgetParams(
        "snapshots", "checkpoints, the chain's input included, 1..L; auto = ceil(sqrt(L)) + 1",
        "snapshot count");
  }

  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params) {
    ASSIGN_OR_RETURN(CountOrBudget read,
                     ReadCountOrBudget(params, kId, "snapshots", "snapshot count"));
    auto revolve = std::make_unique<Revolve>();
    revolve->snapshots_ = read.count;
    revolve->budget_ = read.budget;
    return revolve;
  }

  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override {
    const int n = profile.num_stages();
    if (n == 0) return BinomialPlan(0, 1);
    if (budget_.has_value()) {
      std::vector<Plan> candidates;
      for (int c = 1; c <= n; ++c) {
        // Counts past kMaxBudgetCounts: only the last, where every stage is its own checkpoint.
        if (c > kMaxBudgetCounts && c < n) continue;
        candidates.push_back(BinomialPlan(n, c));
      }
      const std::string budget = FormatByteSize(*budget_);
      ASSIGN_OR_RETURN(BudgetChoice best,
                       FastestOrLeastPeak(profile, std::move(candidates), *budget_, budget, kId,
                                          "any snapshot count"));
      absl::StrAppend(&best.plan.summary, "; the fastest count that fits ", budget);
      return std::move(best.plan);
    }
    int c = snapshots_.value_or(std::min(CeilSqrt(n) + 1, n));
    if (c > n) {
      return absl::InvalidArgumentError(absl::StrCat("revolve: snapshots=", c, " is more than the ",
                                                     n, " stages of ", profile.model,
                                                     "; accepted: 1..", n, " or auto"));
    }
    return BinomialPlan(n, c);
  }

 private:
  std::optional<int> snapshots_;
  std::optional<int64_t> budget_;
};

const StrategyRegistration<Revolve> registration(
    kId,
    "binomial checkpointing (Griewank's Revolve): the fewest recomputations with c "
    "checkpoints on a chain of equal stages",
    StrategyTraits{/*budget_param=*/"budget", /*budget_chooses=*/"snapshots"});

}  // namespace
}  // namespace ckpt
