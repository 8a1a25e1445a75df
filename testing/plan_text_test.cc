// Plans as text (core/plan/plan_text.h): printing then parsing gives the plan back, on generated
// chains, trees and part policies; every way a plan file can be wrong is an error that names
// the line, the column and what was expected. No tensors.
#include "core/plan/plan_text.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/printable.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

using ::testing::HasSubstr;

// A chain of generated stages, each with some of the parts the zoo declares.
rc::Gen<std::vector<StageInfo>> GeneratedStages() {
  return rc::gen::exec([] {
    const int n = *rc::gen::inRange(1, 40).as("stages");
    std::vector<StageInfo> stages(n);
    for (int i = 0; i < n; ++i) {
      stages[i].name = absl::StrCat("stage", i);
      if (*rc::gen::arbitrary<bool>()) {
        // Fusable or not: plans fuse only the cores that can be.
        stages[i].parts.push_back(
            AttentionCorePart(*rc::gen::arbitrary<bool>() ? "" : "it cannot, here"));
      }
      if (*rc::gen::arbitrary<bool>()) stages[i].parts.push_back(MlpHiddenPart());
      if (*rc::gen::arbitrary<bool>()) stages[i].parts.push_back(NormPart());
      if (*rc::gen::arbitrary<bool>()) {
        stages[i].parts.push_back(SequencePart(*rc::gen::inRange<int64_t>(1, 9)));
      }
    }
    return stages;
  });
}

std::vector<Segment> Segments(int begin, int end, int depth) {
  std::vector<Segment> out;
  for (int at = begin; at < end;) {
    const int next = *rc::gen::inRange(at + 1, end + 1);
    Segment s{at, next,
              *rc::gen::element(SegmentMode::kStored, SegmentMode::kCheckpointed,
                                SegmentMode::kRecomputeAll, SegmentMode::kOffloaded)};
    if (HasInnerPlan(s.mode) && depth > 0 && *rc::gen::arbitrary<bool>()) {
      s.inner = Segments(at, next, depth - 1);
    }
    out.push_back(std::move(s));
    at = next;
  }
  return out;
}

// A valid plan over `stages`: a tree to depth 3, each part given an action that applies to it
// (chunk counts within its extent, one chunked part a stage).
Plan GeneratedPlan(const std::vector<StageInfo>& stages) {
  Plan plan;
  plan.strategy = "generated";
  plan.segments = Segments(0, static_cast<int>(stages.size()), 3);
  if (*rc::gen::arbitrary<bool>()) return plan;  // every part stored
  for (const StageInfo& stage : stages) {
    StagePolicy policy;
    bool chunked = false;
    for (const PartInfo& part : stage.parts) {
      std::vector<PartAction> actions = {PartAction::Store()};
      for (const PartAction a : ActionsFor(part)) {
        if (!a.Counted() || (part.extent >= 2 && !chunked)) actions.push_back(a);
      }
      const PartAction action = *rc::gen::elementOf(actions);
      const int chunks =
          action.Counted() ? *rc::gen::inRange(2, static_cast<int>(part.extent) + 1) : 1;
      chunked |= action.Counted();
      policy.parts.push_back({action, chunks});
    }
    plan.stage_policies.push_back(policy);
  }
  return plan;
}

RC_GTEST_PROP(PlanText, PrintThenParseIsTheIdentity, ()) {
  const std::vector<StageInfo> stages = *GeneratedStages();
  const Plan plan = GeneratedPlan(stages);
  RC_ASSERT(ValidatePlan(plan, stages).ok());
  const std::string text = PlanToText(plan, stages);
  RC_LOG() << text << "\n";
  absl::StatusOr<Plan> back = ParsePlan(text, stages, "plan:file=x");
  RC_ASSERT(back.ok());
  RC_ASSERT(back->segments == plan.segments);
  for (int i = 0; i < static_cast<int>(stages.size()); ++i) {
    RC_ASSERT(back->PolicyOf(i) == plan.PolicyOf(i));
  }
  RC_ASSERT(PlanToText(*back, stages) == text);
  RC_ASSERT(back->strategy == "plan:file=x");
}

// Every list of segments in a tree: the top one, then each inner plan.
void Lists(std::vector<Segment>& segments, std::vector<std::vector<Segment>*>& out) {
  out.push_back(&segments);
  for (Segment& s : segments) {
    if (!s.inner.empty()) Lists(s.inner, out);
  }
}

// A valid tree with one rule broken at a generated place (a segment emptied, reversed, begun or
// ended one stage early or late, or a rerun plan given to a segment that has none): the
// validator refuses the plan, and the reader refuses its text (python_plan_test.py breaks the
// same rules for python/ckptlab's reader).
RC_GTEST_PROP(PlanText, EveryBrokenRuleIsRefusedByTheValidatorAndTheReader, ()) {
  const int n = *rc::gen::inRange(1, 12).as("stages");
  std::vector<StageInfo> stages(n);
  for (int i = 0; i < n; ++i) stages[i].name = absl::StrCat("s", i);
  Plan plan;
  plan.segments = Segments(0, n, 3);
  RC_ASSERT(ValidatePlan(plan, stages).ok());
  std::vector<std::vector<Segment>*> lists;
  Lists(plan.segments, lists);
  std::vector<Segment>& list = **rc::gen::elementOf(lists);
  Segment& s = list[*rc::gen::inRange<size_t>(0, list.size())];
  switch (*rc::gen::element(0, 1, 2, 3, 4, 5, 6).as("rule")) {
    case 0:
      s.end = s.begin;
      RC_TAG("empty");
      break;
    case 1:
      std::swap(s.begin, s.end);
      RC_TAG("reversed");
      break;
    case 2:
      ++s.begin;
      RC_TAG("begins late");
      break;
    case 3:
      --s.begin;
      RC_TAG("begins early");
      break;
    case 4:
      ++s.end;
      RC_TAG("ends late");
      break;
    case 5:
      --s.end;
      RC_TAG("ends early");
      break;
    default:
      if (s.inner.empty()) s.inner = {Segment{s.begin, s.end, SegmentMode::kStored}};
      s.mode = *rc::gen::element(SegmentMode::kStored, SegmentMode::kRecomputeAll);
      RC_TAG("a rerun plan where there is no rerun");
  }
  const std::string text = SegmentsToText(plan.segments);
  RC_LOG() << text << "\n";
  RC_ASSERT(!ValidatePlan(plan, stages).ok());
  RC_ASSERT(!ParsePlan(text, stages, "plan").ok());
}

// Four stages: two attention stages (core, sequence of 4 positions, norm) and two MLP ones. The
// second block's attention core can be fused, the first's cannot.
std::vector<StageInfo> Chain() {
  std::vector<StageInfo> stages;
  for (int b = 0; b < 2; ++b) {
    stages.push_back(
        {absl::StrCat("block", b, ".attention"),
         StageKind::kAttention,
         false,
         {AttentionCorePart(b == 0 ? "no kernel for it" : ""), SequencePart(4), NormPart()},
         0,
         ""});
    stages.push_back({absl::StrCat("block", b, ".mlp"),
                      StageKind::kMlp,
                      false,
                      {MlpHiddenPart(), SequencePart(4)},
                      0,
                      ""});
  }
  return stages;
}

TEST(PlanText, ReadsWhatItWritesWithCommentsAndLineBreaks) {
  const std::string text =
      "# the schedule of Figure 3\n"
      "[0,2) checkpointed {[0,1) checkpointed, [1,2) stored},\n"
      "[2,4) stored;   # then the policies\n"
      "core=recompute @ 0; core=fused @ 2; sequence=chunk:2 @ 1-3;\n";
  absl::StatusOr<Plan> plan = ParsePlan(text, Chain(), "plan:file=fig3.txt");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(PlanToText(*plan, Chain()),
            "[0,2) checkpointed {[0,1) checkpointed, [1,2) stored}, [2,4) stored; "
            "core=recompute @ 0; sequence=chunk:2 @ 1-3; core=fused @ 2");
  EXPECT_EQ(plan->PolicyOf(3).Chunks(), 2);
  EXPECT_EQ(PlanToTree(*plan, Chain()),
            "[0,2) checkpointed: block0.attention .. block0.mlp\n"
            "  [0,1) checkpointed: block0.attention\n"
            "    rerun stored\n"
            "  [1,2) stored: block0.mlp\n"
            "[2,4) stored: block1.attention .. block1.mlp\n"
            "policy core=recompute @ 0\n"
            "policy sequence=chunk:2 @ 1-3\n"
            "policy core=fused @ 2\n");
}

TEST(PlanText, EveryErrorNamesWhereAndWhatWasExpected) {
  const std::vector<StageInfo> stages = Chain();
  auto error = [&](const std::string& text) {
    absl::StatusOr<Plan> plan = ParsePlan(text, stages, "plan:file=p.txt");
    EXPECT_FALSE(plan.ok()) << text;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(plan.status().message());
  };
  // Syntax.
  EXPECT_EQ(error("[0,4 stored"),
            "line 1, column 6: expected ')' after the segment's end, found 'stored'");
  EXPECT_EQ(error("[0,4) kept"),
            "line 1, column 7: expected a mode (stored, checkpointed, recompute-all, offloaded), "
            "found 'kept'");
  EXPECT_EQ(error("[0,4) stored x"),
            "line 1, column 14: expected ';' before a policy, or the end of the plan, found 'x'");
  EXPECT_EQ(error(""),
            "line 1, column 1: expected a segment, '[' BEGIN ',' END ')' MODE, found "
            "the end of the plan");
  EXPECT_EQ(error("[0,4) checkpointed {[0,2) stored,\n  [2,4) stored"),
            "line 2, column 15: expected '}' after the inner plan, or ',' before another "
            "segment, found the end of the plan");
  // Ranges that do not fit the chain (ValidatePlan's, at the segment's position).
  EXPECT_THAT(error("[0,2) stored, [3,4) stored"),
              HasSubstr("line 1, column 15: plan of plan:file=p.txt is invalid: segment [3,4); "
                        "expected a non-empty segment starting at 2 and ending by 4"));
  EXPECT_THAT(error("[0,2) stored"), HasSubstr("segments cover [0,2) of [0,4)"));
  EXPECT_THAT(
      error("[0,4) stored {[0,4) stored}"),
      HasSubstr("is stored but holds an inner plan; only checkpointed and offloaded segments do"));
  EXPECT_THAT(error("[0,4) checkpointed {[0,2) stored,\n [2,5) stored}"),
              HasSubstr("line 2, column 2: plan of plan:file=p.txt is invalid: inside [0,4) "
                        "segment [2,5)"));
  // Parts and actions.
  EXPECT_EQ(error("[0,4) stored; norm=recompute @ 1"),
            "line 1, column 15: stage 1 (block0.mlp) has no part 'norm'; its parts: hidden, "
            "sequence");
  EXPECT_EQ(error("[0,4) stored; core=chunk:2 @ 0"),
            "line 1, column 20: 'chunk' does not apply to part 'core' (attention core) of stage "
            "0; accepted: store, recompute");
  EXPECT_THAT(error("[0,4) stored; core=fused @ 0"),
              HasSubstr("line 1, column 15: plan of plan:file=p.txt is invalid: stage 0 "
                        "(block0.attention)'s part 'core' (attention core) is to be fused; it "
                        "cannot be: no kernel for it"));
  EXPECT_EQ(error("[0,4) stored; sequence=chunk @ 0"),
            "line 1, column 24: 'chunk' takes a count: chunk:N");
  EXPECT_EQ(error("[0,4) stored; core=recompute:3 @ 0"),
            "line 1, column 20: 'recompute' takes no count");
  EXPECT_THAT(error("[0,4) stored; sequence=chunk:9 @ 0"),
              HasSubstr("line 1, column 15: plan of plan:file=p.txt is invalid: stage 0 "
                        "(block0.attention)'s part 'sequence' (sequence) is to be chunked into 9 "
                        "chunks; accepted: 2..4 (its axis has 4 positions)"));
  EXPECT_EQ(error("[0,4) stored; core=recompute @ 0; core=store @ 0"),
            "line 1, column 35: stage 0's part 'core' has a policy already, at line 1, column "
            "15");
  EXPECT_EQ(error("[0,4) stored; core=recompute @ 0-9"),
            "line 1, column 15: stage 9 is past the chain's last (4 stages, 0..3)");
  EXPECT_EQ(error("[0,4) stored; core=recompute @ 2-0"), "line 1, column 15: range 2-0 is empty");
}

// `depth` checkpointed segments, each the inner plan of the one before, over stage 0 of the chain.
std::string Nested(int depth) {
  std::string text;
  for (int i = 0; i < depth; ++i) absl::StrAppend(&text, i == 0 ? "" : " {", "[0,1) checkpointed");
  text.append(std::max(depth - 1, 0), '}');
  return absl::StrCat(text, ", [1,4) stored");
}

TEST(PlanText, NestingIsBoundedNotACrash) {
  const std::vector<StageInfo> stages = Chain();
  // kMaxPlanTextDepth braces within one another read; one more is refused where it opens.
  absl::StatusOr<Plan> deepest = ParsePlan(Nested(kMaxPlanTextDepth + 1), stages, "p");
  ASSERT_TRUE(deepest.ok()) << deepest.status();
  EXPECT_EQ(deepest->Depth(), kMaxPlanTextDepth + 1);
  absl::StatusOr<Plan> deeper = ParsePlan(Nested(kMaxPlanTextDepth + 2), stages, "p");
  EXPECT_EQ(deeper.status().message(),
            absl::StrCat("line 1, column ", 20 * (kMaxPlanTextDepth + 1),
                         ": inner plans nested deeper than ", kMaxPlanTextDepth,
                         " levels; accepted: at most ", kMaxPlanTextDepth));
  // A million braces (what overflowed the stack of the recursive reader): the same error.
  std::string braces = "[0,1) checkpointed";
  for (int i = 0; i < 1000000 / 20; ++i) braces.append(" {[0,1) checkpointed");
  EXPECT_THAT(std::string(ParsePlan(braces, stages, "p").status().message()),
              HasSubstr("nested deeper than"));
}

TEST(PlanText, ErrorsQuoteTheTextEscapedAndShort) {
  const std::vector<StageInfo> stages = Chain();
  auto message = [&](const std::string& text) {
    return std::string(ParsePlan(text, stages, "p").status().message());
  };
  EXPECT_EQ(message("[0,4) stored \x1b"),
            "line 1, column 14: expected ';' before a policy, or the end of the plan, found "
            "'\\x1b'");
  EXPECT_EQ(message(std::string("[0,4) stored \0", 15)),
            "line 1, column 14: expected ';' before a policy, or the end of the plan, found "
            "'\\x00'");
  // A C1 character (CSI, U+009B) is one character, escaped whole; é is printable as it is.
  EXPECT_EQ(message("[0,4) stored \xc2\x9b"),
            "line 1, column 14: expected ';' before a policy, or the end of the plan, found "
            "'\\u009b'");
  EXPECT_EQ(message("[0,4) stored \xc3\xa9"),
            "line 1, column 14: expected ';' before a policy, or the end of the plan, found "
            "'\xc3\xa9'");
  EXPECT_EQ(message(absl::StrCat("[0,4) ", std::string(100, 'k'))),
            absl::StrCat("line 1, column 7: expected a mode (stored, checkpointed, recompute-all, "
                         "offloaded), found '",
                         std::string(40, 'k'), "...'"));
  EXPECT_EQ(message(absl::StrCat("[", std::string(100, '9'))),
            absl::StrCat("line 1, column 2: expected the segment's first stage, an integer, "
                         "found '",
                         std::string(40, '9'), "...'"));
}

// Text near the grammar, and bytes: every input gives a plan or an InvalidArgument error whose
// message is printable, never a crash or a hang.
rc::Gen<std::string> PlanishText() {
  return rc::gen::map(
      rc::gen::container<std::vector<std::string>>(rc::gen::oneOf(
          rc::gen::element<std::string>(
              "[", "]", "(", ")", "{", "}", ",", ";", "@", "=", "-", ":", "#", "\n", " ", "0", "1",
              "2", "4", "99999999999", "-1", "stored", "checkpointed", "offloaded", "recompute-all",
              "core", "hidden", "norm", "sequence", "recompute", "chunk", "fused", "store", "\x1b",
              std::string(1, '\0'), "\xc2\x9b", "\xff", "\xe2\x82"),
          rc::gen::map(rc::gen::arbitrary<std::vector<unsigned char>>(),
                       [](const std::vector<unsigned char>& b) {
                         return std::string(b.begin(), b.end());
                       }))),
      [](const std::vector<std::string>& pieces) { return absl::StrJoin(pieces, ""); });
}

RC_GTEST_PROP(PlanText, AnyTextIsAPlanOrAnError, ()) {
  const std::vector<StageInfo> stages = *GeneratedStages();
  // Half the cases: a valid plan's text with a few bytes changed, inserted or cut.
  std::string text;
  if (*rc::gen::arbitrary<bool>()) {
    text = *PlanishText();
  } else {
    text = PlanToText(GeneratedPlan(stages), stages);
    const int edits = *rc::gen::inRange(1, 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = *rc::gen::inRange<size_t>(0, text.size());
      const std::string piece = *PlanishText();
      switch (*rc::gen::inRange(0, 3)) {
        case 0:
          text.replace(at, 1, piece);
          break;
        case 1:
          text.insert(at, piece);
          break;
        default:
          text.erase(at, *rc::gen::inRange<size_t>(1, text.size() - at + 1));
      }
    }
  }
  absl::StatusOr<Plan> plan = ParsePlan(text, stages, "plan:file=fuzz");
  if (plan.ok()) {
    RC_ASSERT(ValidatePlan(*plan, stages).ok());
  } else {
    RC_ASSERT(plan.status().code() == absl::StatusCode::kInvalidArgument);
    RC_ASSERT(FindUnprintable(plan.status().message()) == -1);
  }
}

// The corpus both readers of the grammar are held to (python_plan_test.py reads it too): each
// text is an error where it says so, else the plan it writes, on a chain of that many stages.
constexpr char kCorpus[] =
#include "testing/plan_corpus.inc"
    ;

// A corpus case's text: \\, \t, \n and \xHH as the bytes they write.
std::string Unescaped(absl::string_view escaped) {
  std::string out;
  for (size_t k = 0; k < escaped.size(); ++k) {
    if (escaped[k] != '\\') {
      out += escaped[k];
    } else if (escaped[++k] == 'x') {
      int byte = 0;
      EXPECT_TRUE(absl::SimpleHexAtoi(escaped.substr(k + 1, 2), &byte)) << escaped;
      out += static_cast<char>(byte);
      k += 2;
    } else {
      out += escaped[k] == 't' ? '\t' : escaped[k] == 'n' ? '\n' : escaped[k];
    }
  }
  return out;
}

TEST(PlanText, TheSharedCorpusReadsAsItSays) {
  int cases = 0;
  for (absl::string_view line : absl::StrSplit(kCorpus, '\n', absl::SkipEmpty())) {
    const std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    ASSERT_EQ(fields.size(), 3u) << line;
    int n = 0;
    ASSERT_TRUE(absl::SimpleAtoi(fields[0], &n)) << line;
    std::vector<StageInfo> stages(n);
    for (int i = 0; i < n; ++i) stages[i].name = absl::StrCat("s", i);
    const std::string text = Unescaped(fields[2]);
    const absl::StatusOr<Plan> plan = ParsePlan(text, stages, "plan");
    const std::string shown(fields[2].substr(0, 80));
    if (fields[1] == "error") {
      EXPECT_FALSE(plan.ok()) << shown << " read as " << SegmentsToText(plan->segments);
    } else {
      ASSERT_TRUE(plan.ok()) << shown << ": " << plan.status();
      EXPECT_EQ(SegmentsToText(plan->segments), fields[1]) << shown;
    }
    ++cases;
  }
  EXPECT_GT(cases, 60);
}

}  // namespace
}  // namespace ckpt
