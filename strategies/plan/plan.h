// plan: a plan written down, read from a file (core/plan_text.h; docs/plans.md): a schedule from
// a paper, another tool's, or one a researcher tries by hand, without writing a strategy.
//
//   --strategies=plan:file=my_schedule.txt
//
// Keeps and recomputes what the plan says. The file is read when the strategy is made (a file
// that is missing, not a regular file or over 1 MiB is refused then) and checked against each
// model's stages before anything runs (CheckStages): a plan that does not fit (ranges, parts a
// stage does not declare, actions a part does not allow, chunk counts past an axis) is an error
// naming the file, the line and the column, and what was expected there.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/strategy.h"

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

}  // namespace ckpt
