// optimal: the fastest plan whose peak fits a memory budget, from the measured stage costs:
// Rotor's persistent dynamic programme (Beaumont et al., Inria RR-9302) with a policy per stage
// as Rockmate extends it; docs/chain-solver.md documents the recurrence and its discretisation.
//
// Contract:
// - The plan is a tree: segments stored, checkpointed (nested where that is faster),
//   offloaded where the profile knows the copy rates and offload=yes; host bytes do not count.
// - Its predicted peak (core/plan/memory_model.h) is at most `budget` above the baseline less
//   kBudgetSlackBytes; a budget below every candidate's peak is an error naming the least one.
// - Its predicted step (core/plan/time_model.h) is the least among the candidates that fit:
//   the solver's plan at every budget of its grid, uniform's at every segment count (with its
//   offloading variant), and every other strategy's default plan. So it is never slower than
//   any of them, and, the candidates depending on the model alone, never slower at a larger
//   budget.
// - Under autocast no stage is chunked unless chunks_under_amp=yes: chunks' partial weight
//   gradients would be rounded to the autocast dtype before they are summed (docs/testing.md).
// - budget=auto is uniform's default plan's predicted peak plus the slack: the two compared at
//   equal memory.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/bytes.h"
#include "core/base/status_macros.h"
#include "core/plan/memory_model.h"
#include "core/plan/schedule.h"
#include "core/plan/spec.h"
#include "core/plan/strategy.h"
#include "core/plan/time_model.h"
#include "strategies/chain_solver.h"
#include "strategies/plan_builders.h"

namespace ckpt {
namespace {

constexpr char kId[] = "optimal";

// About the most inner-loop steps one piece of planning work may take.
constexpr double kWork = 5e7;

// The solver's grid: at most this many steps, and about kWork inner-loop steps of work, for
// `contexts` tables per range (chain_solver.h).
int GridSteps(int stages, int options, int contexts) {
  const double work = static_cast<double>(stages) * stages * (stages + options) * contexts;
  return static_cast<int>(std::clamp(kWork / std::max(work, 1.0), 100.0, 2000.0));
}

// The other strategies' default plans (every registered strategy but this one that plans
// without a required parameter: store_all, recompute_all, revolve, the selective and chunked
// ones) that the profile measures every stage of (under autocast it leaves chunks out), except
// those whose replay would take more than about kWork stage forwards (recompute_all reruns
// quadratically many).
absl::StatusOr<std::vector<Plan>> DefaultPlans(const ModelProfile& profile) {
  std::vector<Plan> plans;
  for (const std::string& id : DefaultStrategies()) {
    if (id == kId) continue;
    absl::StatusOr<Plan> plan = PlanFor(id, profile);
    if (!plan.ok()) continue;
    if (!profile.MeasuredUnder(*plan).ok() ||
        RecomputedStages(*plan, profile.num_stages()) > kWork) {
      continue;
    }
    plans.push_back(*std::move(plan));
  }
  return plans;
}

// The solver's plan at every budget of its grid over `chain`, distinct ones.
absl::StatusOr<std::vector<Plan>> SolverPlans(const ModelProfile& profile,
                                              const chain::Chain& chain) {
  int options = 1;
  for (const chain::Stage& s : chain.stages) options = std::max<int>(options, s.options.size());
  ASSIGN_OR_RETURN(chain::Cost all_stored, chain::Evaluate(chain, chain::AllStored(chain)));
  const int steps =
      GridSteps(static_cast<int>(chain.stages.size()), options, chain::Contexts(chain));
  const int64_t unit = std::max<int64_t>(1, (all_stored.peak + steps - 1) / steps);
  const chain::Chain quantized = chain::Quantize(chain, unit);
  // The grid's top: every stage stored, as the rounded chain sees it.
  ASSIGN_OR_RETURN(chain::Cost top, chain::Evaluate(quantized, chain::AllStored(quantized)));
  const chain::Solver solver(quantized, static_cast<int>(std::max<int64_t>(top.peak, steps)));
  std::vector<Plan> plans;
  for (int m = solver.max_units(); m >= 0 && solver.Feasible(m); --m) {
    Plan plan = chain::ToPlan(profile, chain, solver.ScheduleAt(m));
    if (!plans.empty() && plan.segments == plans.back().segments &&
        plan.stage_policies == plans.back().stage_policies) {
      continue;
    }
    plans.push_back(std::move(plan));
  }
  return plans;
}
// `profile` without its chunking policies (every stage's other policies kept): what a plan may
// choose from where chunking is not allowed.
ModelProfile WithoutChunks(const ModelProfile& profile) {
  ModelProfile out = profile;
  for (std::vector<StageProfile>& menu : out.measured) {
    menu.erase(std::remove_if(menu.begin() + 1, menu.end(),
                              [](const StageProfile& p) { return p.policy.Chunks() > 1; }),
               menu.end());
  }
  return out;
}

class Optimal : public Strategy {
 public:
  static std::vector<ParamDef> Params() {
    return {BytesParam("budget", "auto",
                       "peak bytes above the baseline its plan must fit; auto = uniform's "
                       "default plan's predicted peak")
                .AllowAuto(),
            ChoiceParam("offload", {"yes", "no"}, "yes",
                        "yes: checkpoints may also keep their inputs in host memory where that "
                        "is faster (planned where the profile knows the copy rates: measured, "
                        "or --link_bandwidth); no: keep or recompute only"),
            ChoiceParam("chunks_under_amp", {"no", "yes"}, "no",
                        "under autocast (--amp), whether stages may run in chunks, whose partial "
                        "weight gradients are rounded to the autocast dtype apart (gradients "
                        "move further than autocast's own); no: not under autocast")};
  }

  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params) {
    auto optimal = std::make_unique<Optimal>();
    if (!params.IsAuto("budget")) optimal->budget_ = params.Bytes("budget");
    optimal->offload_ = params.Text("offload") == "yes";
    optimal->chunks_under_amp_ = params.Text("chunks_under_amp") == "yes";
    return optimal;
  }

  absl::StatusOr<Plan> MakePlan(const ModelProfile& measured) const override;

 private:
  std::optional<int64_t> budget_;  // empty: auto
  bool offload_ = true;            // offloaded segments may be planned (given copy rates)
  bool chunks_under_amp_ = false;  // stages may be chunked under autocast too
};

const StrategyRegistration<Optimal> registration(
    kId,
    "the fastest plan tree within a peak budget, from measured stage costs (Rotor's dynamic "
    "programme with per-stage policies)",
    StrategyTraits{/*budget_param=*/"budget", /*budget_chooses=*/""});

absl::StatusOr<Plan> Optimal::MakePlan(const ModelProfile& measured) const {
  const bool no_chunks = !measured.autocast.empty() && !chunks_under_amp_;
  const ModelProfile unchunked = no_chunks ? WithoutChunks(measured) : ModelProfile();
  const ModelProfile& profile = no_chunks ? unchunked : measured;
  int64_t budget = 0;
  std::string budget_text;
  if (budget_.has_value()) {
    budget = *budget_;
    budget_text = FormatByteSize(budget);
  } else {
    // uniform's default plan: ceil(sqrt(L)) even segments.
    const int n = profile.num_stages();
    ASSIGN_OR_RETURN(MemoryPrediction predicted,
                     PredictMemory(profile, EvenSegments(CeilSqrt(n), n)));
    budget = predicted.peak_bytes + kBudgetSlackBytes;  // so that uniform's plan itself fits
    budget_text = absl::StrCat("auto (", DescribeBytes(budget), ", uniform's predicted peak)");
  }
  chain::Chain chain = chain::FromProfile(profile);
  chain.offload = chain.offload && offload_;
  // The candidates: the solver's plan at every budget of its grid (distinct ones), without
  // offload and with it (both, so that offload never makes the answer slower or its least peak
  // higher: the grids differ); and uniform's with every segment count its budget search tries
  // (SegmentCounts), so that the answer is never slower than uniform at the same
  // budget, nor than the heuristic where the chain model misjudges a plan the memory model would
  // fit.
  chain::Chain without = chain;
  without.offload = false;
  ASSIGN_OR_RETURN(std::vector<Plan> candidates, SolverPlans(profile, without));
  if (chain.offload) {
    ASSIGN_OR_RETURN(std::vector<Plan> solved, SolverPlans(profile, chain));
    for (Plan& plan : solved) candidates.push_back(std::move(plan));
  }
  for (const int k : SegmentCounts(profile.num_stages())) {
    candidates.push_back(EvenSegments(k, profile.num_stages()));
    if (chain.offload) candidates.push_back(EvenSegments(k, profile.num_stages(), true));
  }
  // And the other strategies' default plans, so that where the solver's chain model misjudges
  // one, no strategy reaches a peak this one does not, nor is faster within it.
  ASSIGN_OR_RETURN(std::vector<Plan> others, DefaultPlans(profile));
  for (Plan& plan : others) candidates.push_back(std::move(plan));
  // The fastest candidate the memory model fits in the budget (the first of equals).
  ASSIGN_OR_RETURN(BudgetChoice best, FastestOrLeastPeak(profile, std::move(candidates), budget,
                                                         budget_text, kId, "the planner"));
  Plan& plan = best.plan;
  plan.shown = {{"budget", budget_.has_value() ? budget_text : "auto"}};
  if (!offload_) plan.shown.emplace_back("offload", "no");
  if (chunks_under_amp_) plan.shown.emplace_back("chunks_under_amp", "yes");
  const int offloaded = Compile(plan, profile.stages).num_host;  // the copies it makes
  plan.summary = absl::StrCat(
      "the fastest plan the planner finds within ", budget_text, ": predicted peak ",
      DescribeBytes(best.predicted.peak_bytes), ", ", RecomputedStages(plan, profile.num_stages()),
      " stage forwards rerun, checkpoints nested ", plan.Depth(), " deep",
      offloaded > 0 ? absl::StrCat(", ", offloaded, " of them offloaded (",
                                   DescribeBytes(best.predicted.offloaded_bytes), " to the host)")
                    : std::string(),
      offload_ && !chain.offload ? " (offload not planned: the profile has no copy rates)"
                                 : std::string(),
      profile.timed ? absl::StrFormat(", predicted step %.2f ms", best.ms) : std::string(),
      chain.stages.size() < static_cast<size_t>(profile.num_stages())
          ? absl::StrCat(" (planned over ", chain.stages.size(), " groups of stages)")
          : std::string());
  return std::move(plan);
}

}  // namespace
}  // namespace ckpt
