#include "strategies/plan/plan.h"

#include "absl/strings/str_cat.h"
#include "core/files.h"
#include "core/plan_text.h"
#include "core/status_macros.h"

namespace ckpt {
namespace {
const StrategyRegistration<PlanFile> registration;

constexpr int64_t kMaxPlanBytes = int64_t{1} << 20;
}  // namespace

std::vector<ParamDef> PlanFile::Params() {
  return {TextParam("file", "", "the path of a file holding one plan (docs/plans.md)")};
}

absl::StatusOr<std::unique_ptr<Strategy>> PlanFile::Create(const ParamValues& params) {
  const std::string& path = params.Text("file");
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxPlanBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("plan:file=", path, ": ",
                                                   text.status().message(),
                                                   "; accepted: a plan file (docs/plans.md)"));
  }
  return std::make_unique<PlanFile>(path, *std::move(text));
}

absl::StatusOr<Plan> PlanFile::Parse(const std::vector<StageInfo>& stages) const {
  absl::StatusOr<Plan> plan = ParsePlan(text_, stages, absl::StrCat(kId, ":file=", path_));
  if (!plan.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan file ", path_, ": ", plan.status().message()));
  }
  plan->summary = absl::StrCat("the plan written in ", path_);
  return plan;
}

absl::StatusOr<Plan> PlanFile::MakePlan(const ModelProfile& profile) const {
  return Parse(profile.stages);
}

absl::Status PlanFile::CheckStages(const std::vector<StageInfo>& stages) const {
  return Parse(stages).status();
}

}  // namespace ckpt
