#include "core/plan/plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"

namespace ckpt {
namespace {

int DepthOf(const std::vector<Segment>& segments) {
  int depth = 0;
  for (const Segment& s : segments) {
    if (s.mode != SegmentMode::kStored) depth = std::max(depth, 1 + DepthOf(s.inner));
  }
  return depth;
}

// "line 3, column 7: " where plan text placed the element, else "".
std::string At(const TextPosition& position) {
  return position.line > 0
             ? absl::StrCat("line ", position.line, ", column ", position.column, ": ")
             : "";
}

absl::Status Invalid(const Plan& plan, const TextPosition& position, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(At(position), "plan of ", plan.strategy, " is invalid: ", what));
}

absl::Status ValidateSegments(const Plan& plan, const std::vector<Segment>& segments, int begin,
                              int end, const std::string& where) {
  int next = begin;
  for (const Segment& s : segments) {
    if (s.begin != next || s.end <= s.begin || s.end > end) {
      return Invalid(plan, s.position,
                     absl::StrCat(where, "segment [", s.begin, ",", s.end,
                                  "); expected a non-empty segment starting at ", next,
                                  " and ending by ", end));
    }
    if (!s.inner.empty()) {
      if (!HasInnerPlan(s.mode)) {
        return Invalid(
            plan, s.position,
            absl::StrCat(where, "segment [", s.begin, ",", s.end, ") is ", SegmentModeName(s.mode),
                         " but holds an inner plan; only checkpointed and offloaded "
                         "segments do"));
      }
      RETURN_IF_ERROR(ValidateSegments(plan, s.inner, s.begin, s.end,
                                       absl::StrCat(where, "inside [", s.begin, ",", s.end, ") ")));
    }
    next = s.end;
  }
  if (next != end) {
    return Invalid(
        plan, segments.empty() ? TextPosition() : segments.back().position,
        absl::StrCat(where, "segments cover [", begin, ",", next, ") of [", begin, ",", end, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view SegmentModeName(SegmentMode mode) {
  switch (mode) {
    case SegmentMode::kStored:
      return "stored";
    case SegmentMode::kCheckpointed:
      return "checkpointed";
    case SegmentMode::kRecomputeAll:
      return "recompute-all";
    case SegmentMode::kOffloaded:
      return "offloaded";
  }
  return "unknown";
}

const StagePolicy& Plan::PolicyOf(int stage) const {
  static const StagePolicy kDefault;
  return stage_policies.empty() ? kDefault : stage_policies[stage];
}

bool Plan::Reassociates() const {
  return std::any_of(stage_policies.begin(), stage_policies.end(),
                     [](const StagePolicy& p) { return p.Chunks() > 1 || p.RunsFused(); });
}

int Plan::Depth() const { return DepthOf(segments); }

Plan Plan::WithoutOffload() const {
  Plan twin = *this;
  std::function<void(std::vector<Segment>&)> checkpoint = [&](std::vector<Segment>& list) {
    for (Segment& s : list) {
      if (s.mode == SegmentMode::kOffloaded) s.mode = SegmentMode::kCheckpointed;
      checkpoint(s.inner);
    }
  };
  checkpoint(twin.segments);
  return twin;
}

absl::Status ValidatePlan(const Plan& plan, const std::vector<StageInfo>& stages) {
  const int num_stages = static_cast<int>(stages.size());
  RETURN_IF_ERROR(ValidateSegments(plan, plan.segments, 0, num_stages, ""));
  if (!plan.stage_policies.empty() && static_cast<int>(plan.stage_policies.size()) != num_stages) {
    return Invalid(plan, {},
                   absl::StrCat("it has policies for ", plan.stage_policies.size(), " stages, not ",
                                num_stages));
  }
  for (size_t i = 0; i < plan.stage_policies.size(); ++i) {
    const StagePolicy& policy = plan.stage_policies[i];
    const StageInfo& info = stages[i];
    if (!policy.parts.empty() && policy.parts.size() != info.parts.size()) {
      return Invalid(plan, {},
                     absl::StrCat("stage ", i, " (", info.name, ") has policies for ",
                                  policy.parts.size(), " parts; it declares ", info.parts.size()));
    }
    int counted = 0;
    for (size_t k = 0; k < policy.parts.size(); ++k) {
      const PartPolicy& p = policy.parts[k];
      const PartInfo& part = info.parts[k];
      const std::string asked =
          absl::StrCat("stage ", i, " (", info.name, ")'s part '", part.name, "' (",
                       PartKindName(part.kind), ") is to be ", p.action.def().done,
                       p.action.Counted() ? absl::StrCat(" into ", p.chunks) : "");
      if (!p.action.AppliesTo(part.kind)) {
        std::vector<std::string> accepted = {"store"};
        for (const PartAction a : ActionsFor(part)) accepted.push_back(a.id());
        return Invalid(plan, p.position,
                       absl::StrCat(asked, "; accepted for it: ", absl::StrJoin(accepted, ", ")));
      }
      if (p.action.def().mechanism == PartMechanism::kFused && !part.unfusable.empty()) {
        return Invalid(plan, p.position, absl::StrCat(asked, "; it cannot be: ", part.unfusable));
      }
      if (!p.action.Counted()) continue;
      if (part.extent == 1) {  // one position: no two chunks to cut it into
        return Invalid(plan, p.position,
                       absl::StrCat(asked,
                                    " chunks; its axis has 1 position, so it cannot be "
                                    "chunked; accepted for it: store"));
      }
      if (p.chunks < 2 || (part.extent > 0 && p.chunks > part.extent)) {
        return Invalid(plan, p.position,
                       absl::StrCat(asked, " chunks; accepted: 2..",
                                    part.extent > 0 ? absl::StrCat(part.extent) : "any",
                                    part.extent > 0 ? absl::StrCat(" (its axis has ", part.extent,
                                                                   " positions)")
                                                    : ""));
      }
      ++counted;
    }
    if (counted > 1) {
      return Invalid(plan, {},
                     absl::StrCat("stage ", i, " (", info.name, ") is chunked along ", counted,
                                  " parts; a stage runs in chunks along one axis"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ckpt
