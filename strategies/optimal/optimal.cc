#include "strategies/optimal/optimal.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "core/plan/memory_model.h"
#include "core/plan/schedule.h"
#include "core/plan/spec.h"
#include "core/plan/time_model.h"
#include "strategies/optimal/chain_solver.h"
#include "strategies/uniform/uniform.h"

namespace ckpt {
namespace {
const StrategyRegistration<Optimal> registration;

// The solver's grid: at most this many steps, and about 5e7 inner-loop steps of work, for
// `contexts` tables per range (chain_solver.h).
int GridSteps(int stages, int options, int contexts) {
  const double work = static_cast<double>(stages) * stages * (stages + options) * contexts;
  return static_cast<int>(std::clamp(5e7 / std::max(work, 1.0), 100.0, 2000.0));
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
}  // namespace

std::vector<ParamDef> Optimal::Params() {
  return {BytesParam("budget", "auto",
                     "peak bytes above the baseline its plan must fit; auto = uniform's default "
                     "plan's predicted peak")
              .AllowAuto(),
          ChoiceParam("offload", {"yes", "no"}, "yes",
                      "yes: checkpoints may also keep their inputs in host memory where that is "
                      "faster (planned where the profile knows the copy rates: measured, or "
                      "--link_bandwidth); no: keep or recompute only"),
          ChoiceParam("chunks_under_amp", {"no", "yes"}, "no",
                      "under autocast (--amp), whether stages may run in chunks, whose partial "
                      "weight gradients are rounded to the autocast dtype apart (gradients move "
                      "further than autocast's own); no: not under autocast")};
}

namespace {
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
}  // namespace

absl::StatusOr<std::unique_ptr<Strategy>> Optimal::Create(const ParamValues& params) {
  std::optional<int64_t> budget;
  if (!params.IsAuto("budget")) budget = params.Bytes("budget");
  return std::make_unique<Optimal>(budget, params.Text("offload") == "yes",
                                   params.Text("chunks_under_amp") == "yes");
}

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
    // uniform's default (sqrt(L) segments), made directly rather than through a spec.
    ASSIGN_OR_RETURN(Plan uniform, Uniform(std::nullopt, std::nullopt).MakePlan(profile));
    ASSIGN_OR_RETURN(MemoryPrediction predicted, PredictMemory(profile, uniform));
    budget = predicted.peak_bytes + kBudgetSlackBytes;  // so that uniform's plan itself fits
    budget_text = absl::StrCat("auto (", DescribeBytes(budget), ", uniform's predicted peak)");
  }
  chain::Chain chain = chain::FromProfile(profile);
  chain.offload = chain.offload && offload_;
  // The candidates: the solver's plan at every budget of its grid (distinct ones), without
  // offload and with it (both, so that offload never makes the answer slower or its least peak
  // higher: the grids differ); and uniform's with every segment count its budget search tries
  // (Uniform::SegmentCounts), so that the answer is never slower than uniform at the same
  // budget, nor than the heuristic where the chain model misjudges a plan the memory model would
  // fit.
  chain::Chain without = chain;
  without.offload = false;
  ASSIGN_OR_RETURN(std::vector<Plan> candidates, SolverPlans(profile, without));
  if (chain.offload) {
    ASSIGN_OR_RETURN(std::vector<Plan> solved, SolverPlans(profile, chain));
    for (Plan& plan : solved) candidates.push_back(std::move(plan));
  }
  for (const int k : Uniform::SegmentCounts(profile.num_stages())) {
    candidates.push_back(Uniform::PlanWith(k, profile.num_stages()));
    if (chain.offload) candidates.push_back(Uniform::PlanWith(k, profile.num_stages(), true));
  }
  // The fastest candidate the memory model fits in the budget (the first of equals).
  int64_t least = 0;
  ASSIGN_OR_RETURN(std::optional<BudgetChoice> best,
                   FastestWithinBudget(profile, std::move(candidates), budget, &least));
  if (best.has_value()) {
    Plan& plan = best->plan;
    const MemoryPrediction& best_predicted = best->predicted;
    const double best_ms = best->ms;
    plan.shown = {{"budget", budget_.has_value() ? budget_text : "auto"}};
    if (!offload_) plan.shown.emplace_back("offload", "no");
    if (chunks_under_amp_) plan.shown.emplace_back("chunks_under_amp", "yes");
    const int offloaded = Compile(plan, profile.stages).num_host;  // the copies it makes
    plan.summary = absl::StrCat(
        "the fastest plan the planner finds within ", budget_text, ": predicted peak ",
        DescribeBytes(best_predicted.peak_bytes), ", ",
        RecomputedStages(plan, profile.num_stages()), " stage forwards rerun, checkpoints nested ",
        plan.Depth(), " deep",
        offloaded > 0 ? absl::StrCat(", ", offloaded, " of them offloaded (",
                                     DescribeBytes(best_predicted.offloaded_bytes), " to the host)")
                      : std::string(),
        offload_ && !chain.offload ? " (offload not planned: the profile has no copy rates)"
                                   : std::string(),
        profile.timed ? absl::StrFormat(", predicted step %.2f ms", best_ms) : std::string(),
        chain.stages.size() < static_cast<size_t>(profile.num_stages())
            ? absl::StrCat(" (planned over ", chain.stages.size(), " groups of stages)")
            : std::string());
    return std::move(plan);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "optimal: budget=", budget_text, " is below the least peak the planner reaches on ",
      profile.model, ", ", DescribeBytes(least), "; accepted: a budget of at least that"));
}

}  // namespace ckpt
