// plan: a plan written down, read from a file (core/plan/plan_text.h; docs/plans.md): a schedule
// from a paper, another tool's, or one a researcher tries by hand, without writing a strategy.
//
//   --strategies=plan:file=my_schedule.txt
//
// Keeps and recomputes what the plan says. The file is read when the strategy is made (a file
// that is missing, not a regular file or over 1 MiB is refused then), and while a
// PlanFileSnapshots is alive only the first time: a run holds one, so that a file changed
// mid-run changes no later model's plan. It is checked against each
// model's stages before anything runs (CheckStages): a plan that does not fit (ranges, parts a
// stage does not declare, actions a part does not allow, chunk counts past an axis) is an error
// naming the file, the line and the column, and what was expected there.
#include "strategies/plan_file.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/digest.h"
#include "core/base/files.h"
#include "core/plan/plan_text.h"
#include "core/plan/strategy.h"

namespace ckpt {
namespace {

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

constexpr char kId[] = "plan";

class PlanFile : public Strategy {
 public:
  static std::vector<ParamDef> Params() {
    return {TextParam("file", "", "the path of a file holding one plan (docs/plans.md)")};
  }

  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params) {
    const std::string& path = params.Text("file");
    absl::StatusOr<std::string> text = ReadPlanFile(path);
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("plan:file=", path, ": ",
                                                     text.status().message(),
                                                     "; accepted: a plan file (docs/plans.md)"));
    }
    return std::make_unique<PlanFile>(path, *std::move(text));
  }

  PlanFile(std::string path, std::string text) : path_(std::move(path)), text_(std::move(text)) {}

  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override {
    return Parse(profile.stages);
  }
  absl::Status CheckStages(const std::vector<StageInfo>& stages) const override {
    return Parse(stages).status();
  }

 private:
  absl::StatusOr<Plan> Parse(const std::vector<StageInfo>& stages) const {
    absl::StatusOr<Plan> plan = ParsePlan(text_, stages, absl::StrCat(kId, ":file=", path_));
    if (!plan.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan file ", path_, ": ", plan.status().message()));
    }
    plan->summary = absl::StrCat("the plan written in ", path_);
    plan->shown = {{"file", path_}};
    return plan;
  }

  std::string path_;
  std::string text_;
};

const StrategyRegistration<PlanFile> registration(
    kId, "a plan read from a file: segments and part policies as docs/plans.md writes them");

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

}  // namespace ckpt
