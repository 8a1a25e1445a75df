#include "strategies/plan/plan.h"

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/digest.h"
#include "core/base/files.h"
#include "core/base/status_macros.h"
#include "core/plan/plan_text.h"

namespace ckpt {
namespace {
const StrategyRegistration<PlanFile> registration;

constexpr int64_t kMaxPlanBytes = int64_t{1} << 20;

// The texts of the live PlanFileSnapshots, by path as given; null while none is alive.
std::mutex snapshots_mutex;
std::map<std::string, std::string>* snapshots = nullptr;

// The text of `path`: while a snapshot is alive, as its first read there.
absl::StatusOr<std::string> ReadPlanFile(const std::string& path) {
  std::lock_guard<std::mutex> lock(snapshots_mutex);
  if (snapshots != nullptr) {
    auto it = snapshots->find(path);
    if (it != snapshots->end()) return it->second;
  }
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxPlanBytes);
  if (text.ok() && snapshots != nullptr) snapshots->emplace(path, *text);
  return text;
}
}  // namespace

PlanFileSnapshots::PlanFileSnapshots() {
  std::lock_guard<std::mutex> lock(snapshots_mutex);
  if (snapshots == nullptr) {
    snapshots = new std::map<std::string, std::string>;
    outermost_ = true;
  }
}

PlanFileSnapshots::~PlanFileSnapshots() {
  std::lock_guard<std::mutex> lock(snapshots_mutex);
  if (!outermost_) return;
  delete snapshots;
  snapshots = nullptr;
}

std::vector<std::string> PlanFileSnapshots::Digests() const {
  std::lock_guard<std::mutex> lock(snapshots_mutex);
  std::vector<std::string> out;
  if (snapshots == nullptr) return out;
  for (const auto& [path, text] : *snapshots) {
    out.push_back(absl::StrFormat("%s=%016x", path, Fnv1a64(text)));
  }
  return out;
}

std::vector<ParamDef> PlanFile::Params() {
  return {TextParam("file", "", "the path of a file holding one plan (docs/plans.md)")};
}

absl::StatusOr<std::unique_ptr<Strategy>> PlanFile::Create(const ParamValues& params) {
  const std::string& path = params.Text("file");
  absl::StatusOr<std::string> text = ReadPlanFile(path);
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
  plan->shown = {{"file", path_}};
  return plan;
}

absl::StatusOr<Plan> PlanFile::MakePlan(const ModelProfile& profile) const {
  return Parse(profile.stages);
}

absl::Status PlanFile::CheckStages(const std::vector<StageInfo>& stages) const {
  return Parse(stages).status();
}

}  // namespace ckpt
