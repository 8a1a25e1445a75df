// Plans as text, both ways: the one grammar in which a plan is printed (--explain, report.md,
// results.csv's plan column) and read (a plan file, the strategy `plan:file=`).
//
//   [0,4) checkpointed {[0,2) checkpointed, [2,4) stored}, [4,8) stored; core=recompute @ 1,3
//
// The grammar (docs/plans.md has it with examples):
//
//   plan     := segments { ';' policy } [';']
//   segments := segment { ',' segment }
//   segment  := '[' INT ',' INT ')' MODE [ '{' segments '}' ]   MODE: stored, checkpointed,
//                                                                recompute-all (SegmentModeName)
//   policy   := PART '=' ACTION [ ':' INT ] '@' range { ',' range }
//   range    := INT [ '-' INT ]                                   stages, inclusive
//
// Segments are stages [begin, end); a checkpointed segment's braces hold the plan of its rerun
// (none: every stage stored). A policy gives the part named PART of the listed stages an action
// of PartActionTable (`chunk` takes its count, `sequence=chunk:4`); parts no policy names are
// stored. Blanks and line breaks may stand between tokens; '#' starts a comment to the end of
// its line. Needs no LibTorch.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/plan/plan.h"

namespace ckpt {

// How deep ParsePlan nests inner plans, braces within braces. The planners nest far less (optimal
// at most its 64 solver stages, revolve about its snapshots): the bound keeps a crafted file from
// taking the reader's stack.
inline constexpr int kMaxPlanTextDepth = 1000;

// The segments alone: "[0,4) checkpointed {[0,2) checkpointed, [2,4) stored}, [4,8) stored".
std::string SegmentsToText(const std::vector<Segment>& segments);

// The whole plan, its policies grouped by part and action, stages as ranges, in one line.
std::string PlanToText(const Plan& plan, const std::vector<StageInfo>& stages);

// The plan as an indented tree, a segment a line with its stages' names, then a line per
// policy of the plan's text: for reading at a terminal (--explain).
std::string PlanToTree(const Plan& plan, const std::vector<StageInfo>& stages);

// Reads plan text for a chain of `stages`; the plan's `strategy` is `strategy`. A syntax error,
// a part a stage does not declare, an action that does not apply to it, a stage given two
// policies for one part, or a plan that does not fit the chain (ValidatePlan) is
// InvalidArgument naming the line and column and what was expected there. The plan comes back
// valid.
absl::StatusOr<Plan> ParsePlan(absl::string_view text, const std::vector<StageInfo>& stages,
                               std::string strategy);

}  // namespace ckpt
