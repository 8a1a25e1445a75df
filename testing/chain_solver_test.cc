// The budget planner's dynamic programme against brute force, and the binomial schedule
// against its closed form, on generated chains (no tensors).
//
// Brute force enumerates every schedule of the chain model (stored stages under any option,
// checkpointed segments, and offloaded ones where the chain allows offload, whose reruns are
// schedules in turn; a rerun that is one checkpoint over
// its whole range again is left out: it holds one more tensor for the same work, so it is
// never faster, and without the exclusion the schedules would not be finite) and evaluates
// each with chain::Evaluate. The programme must find the least time of those within the
// budget, and a schedule that evaluates to it within the budget.
#include "strategies/chain_solver.h"

#include <cstdio>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/plan/schedule.h"
#include "core/plan/strategy.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

using chain::Chain;
using chain::Schedule;

rc::Gen<Chain> GeneratedChain(int min_stages, int max_stages, int max_options) {
  return rc::gen::exec([min_stages, max_stages, max_options] {
    const int n = *rc::gen::inRange(min_stages, max_stages + 1).as("stages");
    Chain c;
    std::vector<int64_t> x(n + 1);
    for (int64_t& b : x) b = *rc::gen::inRange<int64_t>(1, 6);
    for (int i = 0; i < n; ++i) {
      chain::Stage s;
      s.first = s.last = i;
      s.input = x[i];
      s.output = x[i + 1];
      s.input_grad = *rc::gen::inRange<int64_t>(0, 2) * x[i];
      s.param_grads = *rc::gen::inRange<int64_t>(0, 4);
      s.grad_sum = *rc::gen::weightedElement<int64_t>({{4, 0}, {1, 2}});
      s.nograd_ms = *rc::gen::inRange(1, 10);
      s.nograd_transient = *rc::gen::inRange<int64_t>(0, 4);
      const int options = *rc::gen::inRange(1, max_options + 1);
      for (int k = 0; k < options; ++k) {
        chain::Option o;
        o.policy_index = k;
        o.forward_ms = *rc::gen::inRange(1, 10);
        o.backward_ms = *rc::gen::inRange(1, 20);
        o.kept = s.output + *rc::gen::inRange<int64_t>(0, 8);
        o.forward_transient = *rc::gen::inRange<int64_t>(0, 4);
        o.backward_transient = *rc::gen::inRange<int64_t>(0, 6);
        o.held_backward_transient = o.backward_transient + *rc::gen::inRange<int64_t>(0, 3);
        s.options.push_back(o);
      }
      c.stages.push_back(s);
    }
    c.loss_kept = *rc::gen::inRange<int64_t>(0, 3);
    c.loss_backward_transient = *rc::gen::inRange<int64_t>(0, 3);
    c.output_grad = x[n];
    c.loss_ms = 1;
    c.offload = *rc::gen::arbitrary<bool>();
    // A copy costs 0 to 0.5 ms per unit each way, overlapped or not.
    c.to_host_ms = *rc::gen::inRange(0, 3) * 0.25;
    c.from_host_ms = *rc::gen::inRange(0, 3) * 0.25;
    c.copies_overlap = *rc::gen::arbitrary<bool>();
    return c;
  });
}

// Every list over [a, b) (a rerun's when `rerun`), each with the stages' options it picks.
struct Partial {
  std::vector<Segment> segments;
  std::vector<std::pair<int, int>> options;  // (stage, option)
};

std::vector<Partial> Lists(const Chain& c, int a, int b, bool rerun, bool whole_rerun) {
  std::vector<Partial> out;
  if (a == b) return {Partial{}};
  // Stage a stored.
  for (int k = 0; k < static_cast<int>(c.stages[a].options.size()); ++k) {
    for (Partial rest : Lists(c, a + 1, b, rerun, false)) {
      rest.segments.insert(rest.segments.begin(), Segment{a, a + 1, SegmentMode::kStored, {}});
      rest.options.emplace_back(a, k);
      out.push_back(std::move(rest));
    }
  }
  // A checkpoint over [a, j), its rerun any list over [a, j); offloaded too where the chain
  // allows it (anywhere: where its input cannot move, it is a checkpoint).
  std::vector<SegmentMode> modes = {SegmentMode::kCheckpointed};
  if (c.offload) modes.push_back(SegmentMode::kOffloaded);
  for (int j = a + 1; c.checkpoints && j <= b; ++j) {
    if (whole_rerun && j == b) continue;
    const std::vector<Partial> inners = Lists(c, a, j, true, true);
    const std::vector<Partial> rests = Lists(c, j, b, rerun, false);
    for (const SegmentMode mode : modes) {
      for (const Partial& inner : inners) {
        for (const Partial& rest : rests) {
          Partial p = rest;
          p.segments.insert(p.segments.begin(), Segment{a, j, mode, inner.segments});
          p.options.insert(p.options.end(), inner.options.begin(), inner.options.end());
          out.push_back(std::move(p));
        }
      }
    }
  }
  return out;
}

Schedule ToSchedule(const Chain& c, const Partial& p) {
  Schedule s;
  s.segments = p.segments;
  s.options.assign(c.stages.size(), 0);
  for (const auto& [stage, option] : p.options) s.options[stage] = option;
  return s;
}

bool Offloads(const std::vector<Segment>& segments) {
  for (const Segment& s : segments) {
    if (s.mode == SegmentMode::kOffloaded || Offloads(s.inner)) return true;
  }
  return false;
}

// The programme's least time at every budget, and a schedule achieving it, against every schedule.
void CheckAgainstBruteForce(const Chain& c) {
  const int n = static_cast<int>(c.stages.size());
  const std::vector<Partial> all = Lists(c, 0, n, /*rerun=*/false, false);
  RC_TAG(all.size() < 100 ? "<100 schedules" : all.size() < 10000 ? "<10^4" : ">=10^4");
  std::vector<chain::Cost> costs;
  int64_t most = 0;
  for (const Partial& p : all) {
    absl::StatusOr<chain::Cost> cost = chain::Evaluate(c, ToSchedule(c, p));
    RC_ASSERT(cost.ok());
    costs.push_back(*cost);
    most = std::max(most, cost->peak);
  }
  const chain::Solver solver(c, static_cast<int>(most));
  bool offloads = false;
  for (int m = 0; m <= most; ++m) {
    double best = std::numeric_limits<double>::infinity();
    for (const chain::Cost& cost : costs) {
      if (cost.peak <= m) best = std::min(best, cost.time_ms);
    }
    RC_ASSERT(solver.Feasible(m) == (best < std::numeric_limits<double>::infinity()));
    if (!solver.Feasible(m)) continue;
    RC_ASSERT(std::abs(solver.Time(m) - best) <= 1e-3 * best);
    const Schedule schedule = solver.ScheduleAt(m);
    offloads = offloads || Offloads(schedule.segments);
    absl::StatusOr<chain::Cost> found = chain::Evaluate(c, schedule);
    RC_ASSERT(found.ok());
    RC_ASSERT(found->peak <= m);
    RC_ASSERT(std::abs(found->time_ms - best) <= 1e-3 * best);
  }
  if (c.offload) RC_TAG(offloads ? "the programme offloads" : "it does not");
}

RC_GTEST_PROP(ChainSolver, FindsTheBruteForceOptimumWithinTheBudget, ()) {
  Chain c = *GeneratedChain(1, 5, 2).as("chain");
  c.offload = false;  // with offload: below (it doubles the schedules per checkpoint)
  CheckAgainstBruteForce(c);
}

// Stages stored under their options only (the blocks path's chains): the least time of every
// choice of options, on chains long enough that the choice is a knapsack with peaks.
RC_GTEST_PROP(ChainSolver, FindsTheBestOptionsWithoutCheckpoints, ()) {
  Chain c = *GeneratedChain(1, 7, 3).as("chain");
  c.checkpoints = false;
  CheckAgainstBruteForce(c);
  const chain::Solver solver(c, 64);
  for (int m = 0; m <= 64; ++m) {
    if (!solver.Feasible(m)) continue;
    for (const Segment& s : solver.ScheduleAt(m).segments) {
      RC_ASSERT(s.mode == SegmentMode::kStored);
    }
  }
}

// Offload pays where a rest is long enough to be the peak: chains of four and five stages.
RC_GTEST_PROP(ChainSolver, FindsTheBruteForceOptimumWithOffload, ()) {
  Chain c = *GeneratedChain(4, 5, 1).as("chain");
  c.offload = true;
  CheckAgainstBruteForce(c);
}

// Longer chains, one option per stage: 48 schedules at 3 stages, 25,216 at 6, 231,168 at 7
// (2,190,848 at 8, too many to enumerate in a unit test), so a fixed handful, not generated.
TEST(ChainSolver, FindsTheBruteForceOptimumOnChainsOfSixAndSevenStages) {
  for (const auto& [stages, seed] : std::vector<std::pair<int, uint64_t>>{{6, 1}, {7, 2}, {7, 3}}) {
    // A generated chain, drawn with a fixed seed.
    Chain c = GeneratedChain(stages, stages, 1)(rc::Random(seed), 50).value();
    c.offload = false;  // offloaded segments multiply the schedules (the property covers them)
    const int n = static_cast<int>(c.stages.size());
    const std::vector<Partial> all = Lists(c, 0, n, /*rerun=*/false, false);
    std::vector<chain::Cost> costs;
    int64_t most = 0;
    for (const Partial& p : all) {
      costs.push_back(*chain::Evaluate(c, ToSchedule(c, p)));
      most = std::max(most, costs.back().peak);
    }
    // The least time at each peak, then at each budget (the least over peaks up to it).
    std::vector<double> best(most + 1, std::numeric_limits<double>::infinity());
    for (const chain::Cost& cost : costs) best[cost.peak] = std::min(best[cost.peak], cost.time_ms);
    for (int m = 1; m <= most; ++m) best[m] = std::min(best[m], best[m - 1]);
    const chain::Solver solver(c, static_cast<int>(most));
    for (int m = 0; m <= most; ++m) {
      ASSERT_EQ(solver.Feasible(m), best[m] < std::numeric_limits<double>::infinity()) << m;
      if (!solver.Feasible(m)) continue;
      EXPECT_NEAR(solver.Time(m), best[m], 1e-3 * best[m]) << n << " stages, budget " << m;
      const chain::Cost found = *chain::Evaluate(c, solver.ScheduleAt(m));
      EXPECT_LE(found.peak, m);
      EXPECT_NEAR(found.time_ms, best[m], 1e-3 * best[m]);
    }
    std::printf("%d stages: %zu schedules, budgets 0..%lld\n", n, all.size(),
                static_cast<long long>(most));
  }
}

// Offload only adds choices: at every budget the programme with it is never slower, and it is
// feasible wherever the programme without it is, on chains too long to enumerate. Their
// boundaries take up to 5 sizes, more than the programme's classes of pending fetch, so its
// values may err on the slow side: the schedule it builds is never slower than its value.
RC_GTEST_PROP(ChainSolver, OffloadNeverSlowsAPlanNorRaisesTheLeastBudget, ()) {
  Chain with = *GeneratedChain(2, 12, 2).as("chain");
  with.offload = true;
  Chain without = with;
  without.offload = false;
  const int most = static_cast<int>(chain::Evaluate(with, chain::AllStored(with))->peak);
  const chain::Solver a(with, most), b(without, most);
  bool lower = false;
  for (int m = 0; m <= most; ++m) {
    if (!b.Feasible(m)) {
      lower = lower || a.Feasible(m);
      continue;
    }
    RC_ASSERT(a.Feasible(m));
    RC_ASSERT(a.Time(m) <= b.Time(m) * (1 + 1e-6));
    const absl::StatusOr<chain::Cost> found = chain::Evaluate(with, a.ScheduleAt(m));
    RC_ASSERT(found.ok());
    RC_ASSERT(found->peak <= m);
    RC_ASSERT(found->time_ms <= a.Time(m) * (1 + 1e-6));
  }
  RC_TAG(lower ? "feasible below the least budget without offload" : "same least budget");
}

// Equal stages as Revolve sees them: a state (a stage's input) is one unit, while running a
// stage with its graph keeps far more (its tape), so that only the stage being reversed is
// ever stored; no transients, no gradients; time counts forwards without a graph (1 each).
Chain EqualChain(int n) {
  Chain c;
  for (int i = 0; i < n; ++i) {
    chain::Stage s;
    s.first = s.last = i;
    s.input = s.output = 1;
    s.nograd_ms = 1;
    s.options.push_back({0, 0, 0, /*kept=*/1000, 0, 0, 0});
    c.stages.push_back(s);
  }
  return c;
}

// The revolve strategy's plan for `l` stages with `c` checkpoints, through the registry.
Plan RevolvePlan(int l, int c) {
  ModelProfile profile;
  profile.model = "chain";
  profile.stages.resize(l);
  absl::StatusOr<Plan> plan = PlanFor(absl::StrCat("revolve:snapshots=", c), profile);
  RC_ASSERT(plan.ok());
  return *plan;
}

// Griewank and Walther's closed form, t(l, c) = r l - C(c + r, r - 1) with r the least integer
// such that C(c + r, r) >= l: the fewest stage forwards rerun reversing l stages with c
// checkpoints, written here apart from the strategy's own.
int64_t BinomialRecomputations(int64_t l, int64_t c) {
  const auto choose = [](int64_t n, int64_t k) -> int64_t {
    if (k < 0 || k > n) return 0;
    int64_t value = 1;
    for (int64_t i = 1; i <= k; ++i) value = value * (n - k + i) / i;  // exact at every step
    return value;
  };
  int64_t r = 0;
  while (choose(c + r, r) < l) ++r;
  return r * l - choose(c + r, r - 1);
}

RC_GTEST_PROP(Revolve, RecomputesTheBinomialMinimum, ()) {
  const int l = *rc::gen::inRange(1, 60).as("stages");
  const int c = *rc::gen::inRange(1, l + 1).as("checkpoints");
  const Plan plan = RevolvePlan(l, c);
  RC_ASSERT(RecomputedStages(plan, l) == BinomialRecomputations(l, c));
}

// On equal stages, at the memory the binomial schedule takes in the chain model, the programme
// never recomputes more than it. It may recompute less: under the reentrant checkpoint each
// level of nesting holds its rerun's output and its incoming gradient while the levels inside
// it run backward, memory Revolve's model (which counts checkpoints alone) does not charge, so
// a deep binomial nest pays for memory in which shallower schedules fit more checkpoints (4
// stages, 1 checkpoint: Revolve's 6 recomputations against 4). Where Revolve nests at most one
// level deep the two agree exactly.
RC_GTEST_PROP(ChainSolver, NeverRecomputesMoreThanTheBinomialScheduleOnEqualStages, ()) {
  const int l = *rc::gen::inRange(1, 25).as("stages");
  const int checkpoints = *rc::gen::inRange(1, l + 1).as("checkpoints");
  const Chain c = EqualChain(l);
  const Plan plan = RevolvePlan(l, checkpoints);
  Schedule revolve;
  revolve.segments = plan.segments;
  revolve.options.assign(l, 0);
  absl::StatusOr<chain::Cost> cost = chain::Evaluate(c, revolve);
  RC_ASSERT(cost.ok());
  RC_ASSERT(cost->time_ms == BinomialRecomputations(l, checkpoints));
  const chain::Solver solver(c, static_cast<int>(cost->peak));
  RC_ASSERT(solver.Feasible(static_cast<int>(cost->peak)));
  const double found = solver.Time(static_cast<int>(cost->peak));
  RC_ASSERT(found <= cost->time_ms);
  if (plan.Depth() <= 1) RC_ASSERT(found == cost->time_ms);
  RC_TAG(found == cost->time_ms ? "equal" : "fewer than Revolve");
}

}  // namespace
}  // namespace ckpt
