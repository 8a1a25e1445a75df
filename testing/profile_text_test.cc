// Profiles as text (core/plan/profile_text.h), on generated profiles whose names, operators and
// keys hold any bytes:
//   - read back, a profile writes the same text, its stages are the same, and (on chains of up
//     to 12 stages) every registered strategy plans on it the same plan, bytes and time;
//   - any text, and any edit of a valid one, is a profile or an error, never a crash; a profile
//     read from an edited text still plans and predicts; a digit edited is refused (the entry's
//     digest) unless it reads the same;
//   - an error names the line and the token, escaped.
#include "core/plan/profile_text.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/plan/memory_model.h"
#include "core/plan/plan_text.h"
#include "core/plan/strategy.h"
#include "core/plan/time_model.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"
#include "testing/generated_profile.h"

namespace ckpt {
namespace {

using ::ckpt::testing::GeneratedProfile;

// A generated profile with what real ones hold besides: names and keys of any bytes, operators
// autocast left in float32, counted work, the samples it was extrapolated from, storages shared
// between a stage's input and output, sharded gradients, gradients summed in place, times of any
// magnitude.
rc::Gen<ModelProfile> RichProfile() {
  return rc::gen::exec([] {
    ModelProfile p = *GeneratedProfile(30);
    p.model = *rc::gen::arbitrary<std::string>();
    p.autocast = *rc::gen::element<std::string>("", "BFloat16", "Half");
    p.input_storage_bytes = {p.input_bytes / 2, p.input_bytes - p.input_bytes / 2};
    p.loss.kept_inputs = {0};
    p.loss.backward_net_bytes = -*rc::gen::inRange<int64_t>(0, 1 << 20);
    p.loss.backward_work.matmul_flops = *rc::gen::inRange<int64_t>(0, int64_t{1} << 50);
    p.extrapolated = *rc::gen::element<std::string>("", "seq=16..28 in steps of 4");
    for (size_t i = 0; i < p.stages.size(); ++i) {
      StageInfo& stage = p.stages[i];
      if (*rc::gen::arbitrary<bool>()) stage.name = *rc::gen::arbitrary<std::string>();
      stage.forward_flops = *rc::gen::inRange(0, 1 << 30) * 1e6;
      stage.repeat_key = *rc::gen::element<std::string>("", "block", "a \"key\" 100%");
      for (StageProfile& s : p.measured[i]) {
        s.outputs = {BoundaryStorage{s.output_bytes, -1}, BoundaryStorage{0, 0}};
        s.param_grad_sums_in_place.assign(s.param_grads.size(), *rc::gen::arbitrary<bool>());
        if (!p.autocast.empty()) s.float32_ops = {"layer_norm", *rc::gen::arbitrary<std::string>()};
        for (OpWork* w : {&s.forward_work, &s.nograd_work, &s.backward_work}) {
          w->matmul_flops = *rc::gen::inRange<int64_t>(0, int64_t{1} << 50);
          w->bytes = *rc::gen::inRange<int64_t>(0, int64_t{1} << 40);
          w->ops = *rc::gen::inRange<int64_t>(0, 5000);
        }
      }
    }
    if (*rc::gen::arbitrary<bool>()) p.kept_gradient_bytes[0] = 4096;
    return p;
  });
}

// What a reader of the profile gets from it: each default strategy's plan, bytes and time.
std::string Outcomes(const ModelProfile& profile) {
  std::string out;
  for (const std::string& id : DefaultStrategies()) {
    absl::StatusOr<Plan> plan = PlanFor(id, profile);
    if (!plan.ok()) {
      absl::StrAppend(&out, id, ": ", plan.status().ToString(), "\n");
      continue;
    }
    absl::StatusOr<MemoryPrediction> memory = PredictMemory(profile, *plan);
    absl::StatusOr<double> ms = PredictStepMs(profile, *plan);
    absl::StrAppend(&out, id, ": ", PlanToText(*plan, profile.stages), " ",
                    memory.ok() ? absl::StrCat(memory->peak_bytes, " ", memory->activation_bytes)
                                : memory.status().ToString(),
                    " ", ms.ok() ? absl::StrCat(*ms) : ms.status().ToString(), "\n");
  }
  return out;
}

RC_GTEST_PROP(ProfileText, ReadBackAProfilePlansAndPredictsAlike, ()) {
  const std::vector<KeyedProfile> entries =
      *rc::gen::container<std::vector<KeyedProfile>>(
           *rc::gen::inRange(1, 3), rc::gen::pair(rc::gen::arbitrary<std::string>(), RichProfile()))
           .as("entries");
  const std::string text = ProfilesToText(entries);
  const absl::StatusOr<std::vector<KeyedProfile>> back = ProfilesFromText(text);
  RC_ASSERT(back.ok());
  RC_ASSERT(ProfilesToText(*back) == text);
  RC_ASSERT(back->size() == entries.size());
  for (size_t k = 0; k < entries.size(); ++k) {
    RC_ASSERT((*back)[k].first == entries[k].first);
    RC_ASSERT(StagesToText((*back)[k].second.stages) == StagesToText(entries[k].second.stages));
  }
  // Planning every strategy twice is the slow part, and grows with the chain: on short ones.
  if (entries.front().second.num_stages() <= 12) {
    RC_ASSERT(Outcomes(back->front().second) == Outcomes(entries.front().second));
  }
}

RC_GTEST_PROP(ProfileText, AnyTextIsAProfileOrAnError, (const std::string& text)) {
  const absl::StatusOr<std::vector<KeyedProfile>> read = ProfilesFromText(text);
  RC_ASSERT(read.ok() || read.status().code() == absl::StatusCode::kInvalidArgument);
}

// A token a careless or hostile edit might put anywhere.
rc::Gen<std::string> OddToken() {
  return rc::gen::oneOf(
      rc::gen::element<std::string>(
          "-1", "0", "1", "2", "64", "1073741824", "17592186044417", "9223372036854775808",
          "-9223372036854775809", "1e400", "nan", "inf", "-0", "+3", "\"\"", "\"%\"", "\"%ZZ\"",
          "\"a\"b\"", "\"%0", "stored", "chunk", "recompute", "policy", "measured", "stage"),
      rc::gen::arbitrary<std::string>());
}

RC_GTEST_PROP(ProfileText, AnyEditOfAProfileIsAProfileOrAnError, ()) {
  const ModelProfile profile = *RichProfile();
  std::vector<std::string> tokens =
      absl::StrSplit(ProfilesToText({{"key", profile}}), absl::ByAnyChar(" \n"), absl::SkipEmpty());
  const int edits = *rc::gen::inRange(1, 4);
  for (int e = 0; e < edits && !tokens.empty(); ++e) {
    const size_t at = *rc::gen::inRange<size_t>(0, tokens.size());
    switch (*rc::gen::inRange(0, 4)) {
      case 0:
        tokens[at] = *OddToken();
        break;
      case 1:
        tokens.erase(tokens.begin() + at);
        break;
      case 2:
        tokens.insert(tokens.begin() + at, tokens[*rc::gen::inRange<size_t>(0, tokens.size())]);
        break;
      default:
        tokens.resize(at);
    }
  }
  const std::string text = absl::StrJoin(tokens, " ");
  const absl::StatusOr<std::vector<KeyedProfile>> read = ProfilesFromText(text);
  if (!read.ok()) {
    RC_ASSERT(read.status().code() == absl::StatusCode::kInvalidArgument);
    RC_ASSERT(absl::StartsWith(read.status().message(), "profile text "));
    return;
  }
  // Whatever it read is a profile the planners and models take, and it reads back the same.
  RC_ASSERT(ProfilesFromText(ProfilesToText(*read)).ok());
  for (const auto& [key, read_profile] : *read) Outcomes(read_profile);
}

// A kept profile is what made it: any digit changed in its text (a hand edit) is refused, unless
// the value it wrote reads the same (the last digit of a real that rounds back), and then the
// text reads back as it was.
RC_GTEST_PROP(ProfileText, AnEditedDigitIsRefusedOrChangesNothing, ()) {
  const std::string text = ProfilesToText({{*rc::gen::arbitrary<std::string>(), *RichProfile()}});
  std::vector<size_t> digits;
  for (size_t i = 0; i < text.size(); ++i) {
    if (absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) digits.push_back(i);
  }
  const size_t at = *rc::gen::elementOf(digits).as("position");
  std::string edited = text;
  edited[at] = static_cast<char>('0' + (edited[at] - '0' + *rc::gen::inRange(1, 10)) % 10);
  const absl::StatusOr<std::vector<KeyedProfile>> read = ProfilesFromText(edited);
  if (read.ok()) {
    RC_ASSERT(ProfilesToText(*read) == text);
  } else {
    RC_ASSERT(read.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

// The text of a one-stage profile, tokens apart by blanks, for the error cases.
std::string OneStage() {
  ModelProfile p;
  p.model = "mlp:depth=1";
  StageInfo stage;
  stage.name = "layer0";
  stage.parts = {SequencePart(8)};
  p.stages = {stage};
  p.measured = {{StageProfile{}}};
  return ProfilesToText({{"key", p}});
}

TEST(ProfileText, ErrorsNameTheLineAndTheTokenEscaped) {
  std::string text = OneStage();
  ASSERT_TRUE(ProfilesFromText(text).ok()) << ProfilesFromText(text).status();
  EXPECT_EQ(ProfilesFromText(
                absl::StrCat("ckptlab-profiles ", kProfileFormat + 1, text.substr(text.find('\n'))))
                .status()
                .message(),
            absl::StrCat("profile text line 1: expected format ", kProfileFormat,
                         " (this version's), not '", kProfileFormat + 1, "'"));
  std::string edited = text;
  edited.replace(edited.find("input_bytes"), 11, "input\x1b[2J");
  EXPECT_EQ(ProfilesFromText(edited).status().message(),
            "profile text line 4: expected input_bytes, not 'input\\x1b[2J'");
  EXPECT_EQ(ProfilesFromText(absl::StrCat(text, "extra")).status().message(),
            absl::StrCat("profile text line ", 1 + std::count(text.begin(), text.end(), '\n'),
                         ": expected the end of the text, not 'extra'"));
  // The last value cut off.
  const std::string cut = text.substr(0, text.find_last_not_of(" \n0123456789") + 1);
  EXPECT_EQ(ProfilesFromText(cut).status().message(),
            "profile text ends early: expected a whole number from 0 to 17592186044416");
  // A list longer than the tokens left could fill is refused before anything is allocated.
  EXPECT_EQ(ProfilesFromText(absl::StrCat("ckptlab-profiles ", kProfileFormat,
                                          " entries 1000000000 ", std::string(100, 'x')))
                .status()
                .message(),
            "profile text line 1: expected a whole number from 0 to 0, not '1000000000'");
  // A value changed after the entry was written: its digest no longer holds.
  edited = text;
  edited.replace(edited.find("input_bytes 0"), 13, "input_bytes 1");
  EXPECT_EQ(ProfilesFromText(edited).status().message(),
            "profile text line 2: the entry was changed since it was written (its text does not "
            "give its digest)");
  // A policy the stage's parts do not allow, and one with an impossible count.
  for (const char* policy : {"policy 1 \"fused\" 1", "policy 1 \"chunk\" 1", "policy 1 \"store\" 3",
                             "policy 2 \"\" 1 \"\" 1"}) {
    edited = text;
    edited.replace(edited.find("policy 0"), 8, policy);
    EXPECT_FALSE(ProfilesFromText(edited).ok()) << policy;
  }
}

}  // namespace
}  // namespace ckpt
