#include "experiments/configurations.h"

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "core/plan/memory_model.h"
#include "core/plan/plan_text.h"

namespace ckpt {
namespace {

// The profile's measured times (and copy rates) replaced by their mean over the ranks, so that
// every rank's planners see the same profile and make the same plans.
absl::Status ShareProfileTimes(const Cohort& cohort, ModelProfile& profile) {
  if (cohort.alone()) return absl::OkStatus();
  std::vector<double*> fields = {&profile.loss.forward_ms, &profile.loss.backward_ms,
                                 &profile.to_host_bytes_per_ms, &profile.from_host_bytes_per_ms};
  std::string shape;  // which policies were measured: the same on every rank, or a bug
  for (size_t i = 0; i < profile.measured.size(); ++i) {
    for (StageProfile& p : profile.measured[i]) {
      absl::StrAppend(&shape, DescribePolicy(profile.stages[i], p.policy), ";");
      for (double* f : {&p.costs.forward_ms, &p.costs.nograd_forward_ms, &p.costs.backward_ms}) {
        fields.push_back(f);
      }
    }
    absl::StrAppend(&shape, "|");
  }
  RETURN_IF_ERROR(cohort.Same(shape, "profiled policies"));
  std::vector<double> values;
  for (const double* f : fields) values.push_back(*f);
  ASSIGN_OR_RETURN(const std::vector<double> mean, cohort.Mean(values));
  for (size_t i = 0; i < fields.size(); ++i) *fields[i] = mean[i];
  return absl::OkStatus();
}

// The profile of `workload`: the one kept for it (loop.kept) where there is one it takes, else
// measured.
absl::StatusOr<const ModelProfile*> ProfileOf(const LoopOptions& loop, Workload& workload,
                                              MemoryMeter& meter, Progress& progress) {
  const std::string& spec = workload.bound_model().spec();
  std::optional<ModelProfile> kept = loop.kept != nullptr ? loop.kept->Find(workload.bound_model())
                                                          : std::optional<ModelProfile>();
  const std::string other =
      loop.kept != nullptr ? loop.kept->OtherSetting(workload.bound_model()) : "";
  if (!kept.has_value() && !other.empty()) {
    progress.Line(absl::StrCat(spec, ": the profile kept in ", loop.kept->path(),
                               " was made under another setting (this run's: ", other,
                               "); measuring"));
  }
  if (kept.has_value()) {
    const absl::Status adopted = workload.AdoptProfile(*std::move(kept));
    progress.Line(adopted.ok()
                      ? absl::StrCat(spec, ": profile kept in ", loop.kept->path(),
                                     " by an earlier run; not measured again")
                      : absl::StrCat(spec, ": the profile kept in ", loop.kept->path(),
                                     " is not taken (", adopted.message(), "); measuring"));
    if (adopted.ok()) return workload.Profile(meter);
  }
  if (loop.extrapolate) {
    progress.Line(absl::StrCat(spec, ": profiling at smaller sizes, to extrapolate"));
    const absl::Status extrapolated = workload.Extrapolate(
        meter, [&](const std::string& sample) { progress.Line(absl::StrCat(spec, ": ", sample)); });
    if (extrapolated.ok()) {
      ASSIGN_OR_RETURN(const ModelProfile* profile, workload.Profile(meter));
      progress.Line(absl::StrCat(spec, ": bytes extrapolated from ", profile->extrapolated,
                                 ", each count checked on the last"));
      return profile;
    }
    if (!absl::IsNotFound(extrapolated) && !absl::IsFailedPrecondition(extrapolated)) {
      return extrapolated;
    }
    progress.Line(absl::StrCat(spec, ": ", extrapolated.message(), "; measuring at full size"));
  }
  return workload.Profile(meter);
}

// Builds and profiles `m.model` (or its stand-in) into `m`: an error in `m.status`, agreed on.
absl::Status Profile(const LoopOptions& loop, MemoryMeter& meter, Progress& progress,
                     PreparedModel& m) {
  absl::StatusOr<BoundModel> built =
      loop.stand_in ? loop.stand_in(*m.model) : absl::StatusOr<BoundModel>(*m.model);
  WorkloadOptions options = loop.workload;
  if (built.ok()) {
    m.built = built->spec();
    options.profile.progress = progress.Profiling(m.built);
  }
  absl::StatusOr<Workload> workload =
      built.ok() ? Workload::Build(*built, options) : absl::StatusOr<Workload>(built.status());
  absl::StatusOr<const ModelProfile*> profiled =
      workload.ok() ? ProfileOf(loop, *workload, meter, progress) : workload.status();
  absl::StatusOr<ModelProfile> planned_on =
      !profiled.ok()    ? absl::StatusOr<ModelProfile>(profiled.status())
      : loop.planned_on ? loop.planned_on(*m.model, **profiled)
                        : **profiled;
  RETURN_IF_ERROR(loop.cohort.AgreeOn(planned_on.status()));
  m.status = planned_on.status();
  if (!m.status.ok()) return absl::OkStatus();
  m.profile = *std::move(planned_on);
  m.workload.emplace(*std::move(workload));
  return ShareProfileTimes(loop.cohort, m.profile);
}

// Prepares `c`'s plan on `m`'s workload (Workload::Prepare), agreed on by the ranks.
absl::Status PrepareOne(const LoopOptions& loop, MemoryMeter& meter, PreparedModel& m,
                        Configuration& c) {
  absl::StatusOr<PlannedRun> run = m.workload->Prepare(c.plan, m.profile, meter);
  RETURN_IF_ERROR(loop.cohort.AgreeOn(run.status()));
  c.status = run.status();
  if (!c.status.ok()) return absl::OkStatus();
  c.run.emplace(*std::move(run));
  return ShareProfileTimes(loop.cohort, m.profile);  // the policies the plan added
}

}  // namespace

absl::Status ForEachModel(const std::vector<BoundModel>& models,
                          const std::vector<BoundStrategy>& strategies, const LoopOptions& loop,
                          MemoryMeter& meter, Progress& progress,
                          const std::function<absl::Status(PreparedModel&)>& visit) {
  const auto start = std::chrono::steady_clock::now();
  bool started_one = false;
  for (size_t i = 0; i < models.size(); ++i) {
    const std::string& spec = models[i].spec();
    if (loop.done && loop.done(models[i])) {
      progress.Line(absl::StrFormat("model %d/%d %s: already in results.csv, skipped", i + 1,
                                    models.size(), spec));
      continue;
    }
    // Every rank stops at the same model: when the time is spent on any of them.
    ASSIGN_OR_RETURN(const bool in_time,
                     loop.cohort.OnEvery(!started_one || loop.time_limit_s <= 0 ||
                                         Elapsed(start) < loop.time_limit_s));
    if (!in_time) {
      progress.Line(absl::StrFormat(
          "time limit of %.0f s reached: models %d..%d not started (--resume continues them)",
          loop.time_limit_s, i + 1, models.size()));
      break;
    }
    started_one = true;
    progress.Line(absl::StrFormat("model %d/%d %s", i + 1, models.size(), spec));
    PreparedModel m;
    m.model = &models[i];
    RETURN_IF_ERROR(Profile(loop, meter, progress, m));
    if (m.status.ok()) {
      // The phase, then each plan where the one before it took seconds (a budget planner on a
      // long chain can). Every strategy plans on the profile as measured; preparing a plan then
      // measures the policies it uses that the profile lacks.
      progress.Line(
          absl::StrFormat("%s: profiled; planning %d strategies", spec, strategies.size()));
      for (size_t k = 0; k < strategies.size(); ++k) {
        Configuration& c = m.configurations.emplace_back();
        c.strategy = &strategies[k];
        progress.Lazily(absl::StrFormat("%s: planning %s (%d of %d)", spec, c.strategy->spec(),
                                        k + 1, strategies.size()));
        absl::StatusOr<Plan> plan = c.strategy->PlanFor(m.profile);
        RETURN_IF_ERROR(loop.cohort.AgreeOn(plan.status()));
        c.status = plan.status();
        if (!plan.ok()) continue;
        c.plan = *std::move(plan);
        RETURN_IF_ERROR(loop.cohort.Same(PlanToText(c.plan, m.profile.stages), "plans"));
      }
      for (Configuration& c : m.configurations) {
        if (!loop.prepare || !c.status.ok()) continue;
        progress.Lazily(absl::StrFormat("%s: preparing %s", spec, c.strategy->spec()));
        RETURN_IF_ERROR(PrepareOne(loop, meter, m, c));
      }
    }
    RETURN_IF_ERROR(visit(m));
  }
  return absl::OkStatus();
}

}  // namespace ckpt
