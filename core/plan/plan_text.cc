#include "core/plan/plan_text.h"

#include <cctype>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/printable.h"
#include "core/base/status_macros.h"

namespace ckpt {
namespace {

// --- Printing. ---

// Stage indices, ascending, as ranges: "0-2,5".
std::string Ranges(const std::vector<int>& stages) {
  std::vector<std::string> out;
  for (size_t i = 0; i < stages.size();) {
    size_t j = i;
    while (j + 1 < stages.size() && stages[j + 1] == stages[j] + 1) ++j;
    out.push_back(j == i ? absl::StrCat(stages[i]) : absl::StrCat(stages[i], "-", stages[j]));
    i = j + 1;
  }
  return absl::StrJoin(out, ",");
}

// The plan's policies, each "part=action[:count] @ ranges", in order of their first stage.
std::vector<std::string> PolicyTexts(const Plan& plan, const std::vector<StageInfo>& stages) {
  using Key = std::tuple<std::string, std::string, int>;  // part, action, count
  std::map<Key, std::vector<int>> groups;
  std::vector<Key> order;
  for (size_t i = 0; i < plan.stage_policies.size() && i < stages.size(); ++i) {
    for (size_t k = 0; k < stages[i].parts.size(); ++k) {
      const PartPolicy p = plan.stage_policies[i].Of(static_cast<int>(k));
      if (p.action.IsStore()) continue;
      const Key key{stages[i].parts[k].name, p.action.id(), p.action.Counted() ? p.chunks : 0};
      if (!groups.count(key)) order.push_back(key);
      groups[key].push_back(static_cast<int>(i));
    }
  }
  std::vector<std::string> out;
  for (const Key& key : order) {
    const auto& [part, action, count] = key;
    out.push_back(absl::StrCat(part, "=", action, count > 0 ? absl::StrCat(":", count) : "", " @ ",
                               Ranges(groups[key])));
  }
  return out;
}

void AppendTree(std::string* out, const std::vector<Segment>& segments,
                const std::vector<StageInfo>& stages, int indent) {
  for (const Segment& s : segments) {
    const std::string range =
        s.size() == 1 ? stages[s.begin].name
                      : absl::StrCat(stages[s.begin].name, " .. ", stages[s.end - 1].name);
    absl::StrAppend(out, std::string(2 * indent, ' '), "[", s.begin, ",", s.end, ") ",
                    SegmentModeName(s.mode), ": ", range, "\n");
    if (!HasInnerPlan(s.mode)) continue;
    if (s.inner.empty()) {
      absl::StrAppend(out, std::string(2 * indent + 2, ' '), "rerun stored\n");
    } else {
      AppendTree(out, s.inner, stages, indent + 1);
    }
  }
}

// --- Reading. ---

// A token as a message quotes it: its first 40 bytes and "...", where it is longer (a number of
// a million digits is one token).
std::string Shortened(const std::string& token) {
  constexpr size_t kShown = 40;
  return token.size() <= kShown ? token : absl::StrCat(token.substr(0, kShown), "...");
}

struct Token {
  enum Kind { kEnd, kInt, kWord, kPunct } kind = kEnd;
  std::string text;
  TextPosition position;
};

class Parser {
 public:
  Parser(absl::string_view text, const std::vector<StageInfo>& stages)
      : text_(text), stages_(stages) {
    Advance();
  }

  absl::StatusOr<Plan> Run(std::string strategy) {
    Plan plan;
    plan.strategy = std::move(strategy);
    ASSIGN_OR_RETURN(plan.segments, Segments());
    while (Accept(";")) {
      if (token_.kind == Token::kEnd) break;
      RETURN_IF_ERROR(Policy(plan));
    }
    if (token_.kind != Token::kEnd) return Expected("';' before a policy, or the end of the plan");
    RETURN_IF_ERROR(ValidatePlan(plan, stages_));
    return plan;
  }

 private:
  // --- Tokens. ---
  void Advance() {
    while (at_ < text_.size()) {
      const char c = text_[at_];
      if (c == '#') {
        while (at_ < text_.size() && text_[at_] != '\n') Step();
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        Step();
      } else {
        break;
      }
    }
    token_ = Token{Token::kEnd, "", {line_, column_}};
    if (at_ >= text_.size()) return;
    const char c = text_[at_];
    const size_t start = at_;
    if (std::isdigit(static_cast<unsigned char>(c))) {
      while (at_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_]))) Step();
      token_.kind = Token::kInt;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (at_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[at_])) ||
                                    text_[at_] == '_' || text_[at_] == '-')) {
        Step();
      }
      token_.kind = Token::kWord;
    } else {
      // One character: a whole UTF-8 sequence where one starts here, else the byte alone.
      const int length = CharacterLength(text_, at_);
      for (int k = 0; k < length; ++k) Step();
      token_.kind = Token::kPunct;
    }
    token_.text = std::string(text_.substr(start, at_ - start));
  }
  void Step() {
    if (text_[at_] == '\n') {
      ++line_;
      column_ = 1;
    } else {
      ++column_;
    }
    ++at_;
  }
  bool Accept(absl::string_view punct) {
    if (token_.kind != Token::kPunct || token_.text != punct) return false;
    Advance();
    return true;
  }
  // `what` may quote the text read: it is escaped here (core/base/printable.h), once for every
  // message.
  absl::Status Error(const TextPosition& at, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", at.line, ", column ", at.column, ": ", Printable(what)));
  }
  absl::Status Expected(absl::string_view what) const {
    return Error(
        token_.position,
        absl::StrCat("expected ", what, ", found ",
                     token_.kind == Token::kEnd ? "the end of the plan"
                                                : absl::StrCat("'", Shortened(token_.text), "'")));
  }
  absl::Status Expect(absl::string_view punct, absl::string_view what) {
    return Accept(punct) ? absl::OkStatus() : Expected(what);
  }
  absl::StatusOr<int> Int(absl::string_view what) {
    int value = 0;
    if (token_.kind != Token::kInt || !absl::SimpleAtoi(token_.text, &value)) {
      return Expected(what);
    }
    Advance();
    return value;
  }
  // A word longer than any name the grammar has is refused here, so messages quote it short.
  absl::StatusOr<std::string> Word(absl::string_view what) {
    constexpr size_t kLongestName = 64;
    if (token_.kind != Token::kWord || token_.text.size() > kLongestName) return Expected(what);
    std::string word = token_.text;
    Advance();
    return word;
  }

  // --- The grammar. ---
  // `depth`: how many segments' braces enclose these (0 for the plan's own).
  absl::StatusOr<std::vector<Segment>> Segments(int depth = 0) {
    std::vector<Segment> segments;
    do {
      ASSIGN_OR_RETURN(Segment s, OneSegment(depth));
      segments.push_back(std::move(s));
    } while (Accept(","));
    return segments;
  }

  absl::StatusOr<Segment> OneSegment(int depth) {
    Segment s;
    s.position = token_.position;
    RETURN_IF_ERROR(Expect("[", "a segment, '[' BEGIN ',' END ')' MODE"));
    ASSIGN_OR_RETURN(s.begin, Int("the segment's first stage, an integer"));
    RETURN_IF_ERROR(Expect(",", "',' between the segment's first stage and its end"));
    ASSIGN_OR_RETURN(s.end, Int("the segment's end, an integer"));
    RETURN_IF_ERROR(Expect(")", "')' after the segment's end"));
    std::vector<std::string> modes;
    for (const SegmentMode mode : kSegmentModes) modes.emplace_back(SegmentModeName(mode));
    const std::string accepted = absl::StrCat("a mode (", absl::StrJoin(modes, ", "), ")");
    const TextPosition mode_at = token_.position;
    ASSIGN_OR_RETURN(const std::string mode, Word(accepted));
    bool known = false;
    for (const SegmentMode m : kSegmentModes) {
      if (SegmentModeName(m) == mode) {
        s.mode = m;
        known = true;
      }
    }
    if (!known) {
      return Error(mode_at, absl::StrCat("expected ", accepted, ", found '", Shortened(mode), "'"));
    }
    const TextPosition brace_at = token_.position;
    if (Accept("{")) {
      if (depth + 1 > kMaxPlanTextDepth) {
        return Error(brace_at, absl::StrCat("inner plans nested deeper than ", kMaxPlanTextDepth,
                                            " levels; accepted: at most ", kMaxPlanTextDepth));
      }
      ASSIGN_OR_RETURN(s.inner, Segments(depth + 1));
      RETURN_IF_ERROR(Expect("}", "'}' after the inner plan, or ',' before another segment"));
    }
    return s;
  }

  absl::Status Policy(Plan& plan) {
    const TextPosition at = token_.position;
    ASSIGN_OR_RETURN(const std::string part, Word("a policy, PART '=' ACTION '@' STAGES"));
    RETURN_IF_ERROR(Expect("=", "'=' after the part's name"));
    const TextPosition action_at = token_.position;
    ASSIGN_OR_RETURN(const std::string action, Word("an action (store, recompute, chunk:N)"));
    std::optional<int> count;
    if (Accept(":")) {
      ASSIGN_OR_RETURN(count, Int("a count after ':', an integer"));
    }
    RETURN_IF_ERROR(Expect("@", "'@' and the stages the policy applies to"));
    std::vector<int> listed;
    do {
      ASSIGN_OR_RETURN(const int first, Int("a stage, an integer, or a range FIRST-LAST"));
      int last = first;
      if (Accept("-")) {
        ASSIGN_OR_RETURN(last, Int("the range's last stage, an integer"));
      }
      if (last < first) return Error(at, absl::StrCat("range ", first, "-", last, " is empty"));
      const int n = static_cast<int>(stages_.size());
      if (last >= n) {
        return Error(at, absl::StrCat("stage ", last, " is past the chain's last (", n,
                                      " stages, 0..", n - 1, ")"));
      }
      for (int i = first; i <= last; ++i) listed.push_back(i);
    } while (Accept(","));
    const int n = static_cast<int>(stages_.size());
    if (plan.stage_policies.empty()) plan.stage_policies.resize(n);
    for (const int i : listed) {
      const StageInfo& stage = stages_[i];
      int k = 0;
      while (k < static_cast<int>(stage.parts.size()) && stage.parts[k].name != part) ++k;
      if (k == static_cast<int>(stage.parts.size())) {
        std::vector<std::string> names;
        for (const PartInfo& p : stage.parts) names.push_back(p.name);
        return Error(at, absl::StrCat("stage ", i, " (", stage.name, ") has no part '", part,
                                      "'; its parts: ",
                                      names.empty() ? "none" : absl::StrJoin(names, ", ")));
      }
      const PartInfo& info = stage.parts[k];
      const std::optional<PartAction> found = PartAction::Find(action, info.kind);
      if (!found.has_value()) {
        std::vector<std::string> accepted = {"store"};
        for (const PartAction a : ActionsFor(info)) {
          accepted.push_back(a.Counted() ? a.id() + ":N" : a.id());
        }
        return Error(action_at, absl::StrCat("'", action, "' does not apply to part '", part, "' (",
                                             PartKindName(info.kind), ") of stage ", i,
                                             "; accepted: ", absl::StrJoin(accepted, ", ")));
      }
      if (found->Counted() != count.has_value()) {
        return Error(action_at, found->Counted()
                                    ? absl::StrCat("'", action, "' takes a count: ", action, ":N")
                                    : absl::StrCat("'", action, "' takes no count"));
      }
      StagePolicy& policy = plan.stage_policies[i];
      policy.parts.resize(stage.parts.size());
      if (policy.parts[k].position.line > 0) {
        const TextPosition& before = policy.parts[k].position;
        return Error(
            at, absl::StrCat("stage ", i, "'s part '", part, "' has a policy already, at line ",
                             before.line, ", column ", before.column));
      }
      policy.parts[k] = PartPolicy{*found, count.value_or(1), at};
    }
    return absl::OkStatus();
  }

  absl::string_view text_;
  const std::vector<StageInfo>& stages_;
  size_t at_ = 0;
  int line_ = 1, column_ = 1;
  Token token_;
};

}  // namespace

std::string SegmentsToText(const std::vector<Segment>& segments) {
  return absl::StrJoin(segments, ", ", [](std::string* out, const Segment& s) {
    absl::StrAppend(out, "[", s.begin, ",", s.end, ") ", SegmentModeName(s.mode));
    if (!s.inner.empty()) absl::StrAppend(out, " {", SegmentsToText(s.inner), "}");
  });
}

std::string PlanToText(const Plan& plan, const std::vector<StageInfo>& stages) {
  std::string out = SegmentsToText(plan.segments);
  for (const std::string& policy : PolicyTexts(plan, stages)) absl::StrAppend(&out, "; ", policy);
  return out;
}

std::string PlanToTree(const Plan& plan, const std::vector<StageInfo>& stages) {
  std::string out;
  AppendTree(&out, plan.segments, stages, 0);
  for (const std::string& policy : PolicyTexts(plan, stages)) {
    absl::StrAppend(&out, "policy ", policy, "\n");
  }
  return out;
}

absl::StatusOr<Plan> ParsePlan(absl::string_view text, const std::vector<StageInfo>& stages,
                               std::string strategy) {
  return Parser(text, stages).Run(std::move(strategy));
}

}  // namespace ckpt
