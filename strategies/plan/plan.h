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
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/plan/strategy.h"

namespace ckpt {

class PlanFile : public Strategy {
 public:
  static constexpr char kId[] = "plan";
  static constexpr char kSummary[] =
      "a plan read from a file: segments and part policies as docs/plans.md writes them";
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params);

  PlanFile(std::string path, std::string text) : path_(std::move(path)), text_(std::move(text)) {}
  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override;
  absl::Status CheckStages(const std::vector<StageInfo>& stages) const override;

 private:
  absl::StatusOr<Plan> Parse(const std::vector<StageInfo>& stages) const;

  std::string path_;
  std::string text_;
};

// A run's plan files, fixed at its start: while one is alive (the outermost, where they nest),
// each path is read once and every later strategy of that path plans from the same text.
//
//   PlanFileSnapshots snapshots;  // in main, before the strategies are made
//   record.emplace_back("plan_files", absl::StrJoin(snapshots.Digests(), ";"));
class PlanFileSnapshots {
 public:
  PlanFileSnapshots();
  ~PlanFileSnapshots();
  PlanFileSnapshots(const PlanFileSnapshots&) = delete;
  PlanFileSnapshots& operator=(const PlanFileSnapshots&) = delete;

  // Each plan file read so far, as "PATH=DIGEST" (FNV-1a 64 of its text, in hex), sorted by path:
  // what a run's record holds, so that a resume with a changed file is refused.
  std::vector<std::string> Digests() const;

 private:
  bool outermost_ = false;
};

}  // namespace ckpt
