#include "core/plan.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ckpt {
namespace {

int DepthOf(const std::vector<Segment>& segments) {
  int depth = 0;
  for (const Segment& s : segments) {
    if (s.mode != SegmentMode::kStored) depth = std::max(depth, 1 + DepthOf(s.inner));
  }
  return depth;
}

void AppendSegments(std::string* out, const std::vector<Segment>& segments) {
  absl::StrAppend(out, absl::StrJoin(segments, ", ", [](std::string* o, const Segment& s) {
                    absl::StrAppend(o, "[", s.begin, ",", s.end, ") ", SegmentModeName(s.mode));
                    if (!s.inner.empty()) {
                      absl::StrAppend(o, " {");
                      AppendSegments(o, s.inner);
                      absl::StrAppend(o, "}");
                    }
                  }));
}

void AppendTree(std::string* out, const std::vector<Segment>& segments,
                const std::vector<StageInfo>& stages, int indent) {
  for (const Segment& s : segments) {
    const std::string range =
        s.size() == 1 ? stages[s.begin].name
                      : absl::StrCat(stages[s.begin].name, " .. ", stages[s.end - 1].name);
    absl::StrAppend(out, std::string(2 * indent, ' '), "[", s.begin, ",", s.end, ") ",
                    SegmentModeName(s.mode), ": ", range, "\n");
    if (s.mode == SegmentMode::kCheckpointed) {
      if (s.inner.empty()) {
        absl::StrAppend(out, std::string(2 * indent + 2, ' '), "rerun stored\n");
      } else {
        AppendTree(out, s.inner, stages, indent + 1);
      }
    }
  }
}

// The stages' non-default policies grouped by what they do: "core recomputed in stages 1,3".
std::vector<std::string> PolicyGroups(const Plan& plan, const std::vector<StageInfo>& stages) {
  std::map<std::string, std::vector<int>> groups;
  std::vector<std::string> order;
  for (size_t i = 0; i < plan.stage_policies.size() && i < stages.size(); ++i) {
    const StagePolicy& p = plan.stage_policies[i];
    if (p.IsDefault()) continue;
    const std::string what = DescribePolicy(stages[i], p);
    if (!groups.count(what)) order.push_back(what);
    groups[what].push_back(static_cast<int>(i));
  }
  std::vector<std::string> out;
  for (const std::string& what : order) {
    out.push_back(absl::StrCat(what, " in stage", groups[what].size() == 1 ? " " : "s ",
                               absl::StrJoin(groups[what], ",")));
  }
  return out;
}

absl::Status ValidateSegments(const Plan& plan, const std::vector<Segment>& segments, int begin,
                              int end, const std::string& where) {
  int next = begin;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    if (s.begin != next || s.end <= s.begin || s.end > end) {
      return absl::InternalError(
          absl::StrCat("plan of ", plan.strategy, " is invalid: ", where, "segment ", i, " is [",
                       s.begin, ",", s.end, "), expected a non-empty segment starting at ", next,
                       " and ending by ", end, " (", plan.DescribeSegments(), ")"));
    }
    if (!s.inner.empty()) {
      if (s.mode != SegmentMode::kCheckpointed) {
        return absl::InternalError(
            absl::StrCat("plan of ", plan.strategy, " is invalid: ", where, "segment [", s.begin,
                         ",", s.end, ") is ", SegmentModeName(s.mode),
                         " but holds an inner plan; only checkpointed segments do (",
                         plan.DescribeSegments(), ")"));
      }
      if (absl::Status st =
              ValidateSegments(plan, s.inner, s.begin, s.end,
                               absl::StrCat(where, "inside [", s.begin, ",", s.end, ") "));
          !st.ok()) {
        return st;
      }
    }
    next = s.end;
  }
  if (next != end) {
    return absl::InternalError(absl::StrCat("plan of ", plan.strategy, " is invalid: ", where,
                                            "segments cover [", begin, ",", next, ") of [", begin,
                                            ",", end, ") (", plan.DescribeSegments(), ")"));
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
  }
  return "unknown";
}

const StagePolicy& Plan::PolicyOf(int stage) const {
  static const StagePolicy kDefault;
  return stage_policies.empty() ? kDefault : stage_policies[stage];
}

bool Plan::ChunksSequence() const {
  return std::any_of(stage_policies.begin(), stage_policies.end(),
                     [](const StagePolicy& p) { return p.Chunks() > 1; });
}

int Plan::Depth() const { return DepthOf(segments); }

std::string Plan::DescribeSegments() const {
  std::string out =
      absl::StrCat(segments.size(), " segment", segments.size() == 1 ? "" : "s", ": ");
  AppendSegments(&out, segments);
  return out;
}

std::string Plan::Describe(const std::vector<StageInfo>& stages) const {
  std::string out = DescribeSegments();
  for (const std::string& group : PolicyGroups(*this, stages)) absl::StrAppend(&out, "; ", group);
  return out;
}

std::string Plan::DescribeTree(const std::vector<StageInfo>& stages) const {
  std::string out;
  AppendTree(&out, segments, stages, 0);
  for (const std::string& group : PolicyGroups(*this, stages)) {
    absl::StrAppend(&out, "policy: ", group, "\n");
  }
  return out;
}

absl::Status ValidatePlan(const Plan& plan, const std::vector<StageInfo>& stages) {
  const int num_stages = static_cast<int>(stages.size());
  if (absl::Status s = ValidateSegments(plan, plan.segments, 0, num_stages, ""); !s.ok()) {
    return s;
  }
  if (!plan.stage_policies.empty() && static_cast<int>(plan.stage_policies.size()) != num_stages) {
    return absl::InternalError(absl::StrCat("plan of ", plan.strategy, " has policies for ",
                                            plan.stage_policies.size(), " stages, not ",
                                            num_stages));
  }
  for (size_t i = 0; i < plan.stage_policies.size(); ++i) {
    const StagePolicy& policy = plan.stage_policies[i];
    const StageInfo& info = stages[i];
    if (!policy.parts.empty() && policy.parts.size() != info.parts.size()) {
      return absl::InternalError(absl::StrCat("plan of ", plan.strategy, " gives stage ", i, " (",
                                              info.name, ") policies for ", policy.parts.size(),
                                              " parts; it declares ", info.parts.size()));
    }
    int chunked = 0;
    for (size_t k = 0; k < policy.parts.size(); ++k) {
      const PartPolicy& p = policy.parts[k];
      const PartInfo& part = info.parts[k];
      if (p.action == PartAction::kStore) continue;
      const bool allowed =
          std::find(part.actions.begin(), part.actions.end(), p.action) != part.actions.end();
      const bool too_many =
          p.action == PartAction::kChunk && part.extent > 0 && p.chunks > part.extent;
      if (!allowed || (p.action == PartAction::kChunk && p.chunks < 2) || too_many) {
        return absl::InternalError(absl::StrCat(
            "plan of ", plan.strategy, " asks stage ", i, " (", info.name, ") to have its part '",
            part.name, "' (", PartKindName(part.kind), ") ", PartActionName(p.action),
            p.action == PartAction::kChunk ? absl::StrCat(" into ", p.chunks, " chunks") : "",
            !allowed   ? "; the part does not allow it"
            : too_many ? absl::StrCat("; accepted: 2..", part.extent, " chunks (its axis has ",
                                      part.extent, " positions)")
                       : "; accepted: at least 2 chunks"));
      }
      if (p.action == PartAction::kChunk) ++chunked;
    }
    if (chunked > 1) {
      return absl::InternalError(absl::StrCat("plan of ", plan.strategy, " chunks ", chunked,
                                              " parts of stage ", i, " (", info.name,
                                              "); a stage runs in chunks along one axis"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ckpt
