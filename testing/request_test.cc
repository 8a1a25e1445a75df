// The sweep's request (experiments/request.h): its value parsers return a value or an error on
// any input, read back what they accept, and name what they refuse; the modes refuse the flags
// they do not use; bad input keeps its exit status through every layer it travels.
#include "experiments/request.h"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

using ::testing::HasSubstr;

// Any text, weighted towards what the parsers look for.
rc::Gen<std::string> AnyText() {
  return rc::gen::oneOf(
      rc::gen::arbitrary<std::string>(),
      rc::gen::container<std::string>(rc::gen::elementOf(std::string("0123456789,-+ /sBGiMKTe"))));
}

RC_GTEST_PROP(Request, ParsersReturnAValueOrAnErrorNamingTheFlag, ()) {
  const std::string text = *AnyText();
  const absl::StatusOr<std::vector<int>> depths = ParseDepths(text);
  if (!depths.ok()) RC_ASSERT(absl::StrContains(depths.status().message(), "--depths"));
  const absl::StatusOr<int64_t> rate = ParseLinkBandwidth(text);
  if (rate.ok()) {
    RC_ASSERT(*rate >= 0);
    RC_ASSERT((*rate == 0) == text.empty());
  } else {
    RC_ASSERT(absl::StrContains(rate.status().message(), "--link_bandwidth="));
  }
  const absl::StatusOr<std::optional<int64_t>> cap = ParseSize("memory_cap", text);
  if (!cap.ok()) RC_ASSERT(absl::StrContains(cap.status().message(), "--memory_cap="));
  if (cap.ok()) RC_ASSERT(cap->has_value() != text.empty());
  const absl::StatusOr<std::optional<int64_t>> card = ParseSize("device_memory", text, 1);
  if (!card.ok()) RC_ASSERT(absl::StrContains(card.status().message(), "--device_memory="));
  if (card.ok()) RC_ASSERT(!card->has_value() || **card >= 1);
}

RC_GTEST_PROP(Request, DepthsAndRatesReadBackWhatTheyAccept, ()) {
  const std::set<int> distinct = *rc::gen::container<std::set<int>>(rc::gen::inRange(1, 100000));
  const std::vector<int> depths(distinct.begin(), distinct.end());
  const absl::StatusOr<std::vector<int>> parsed = ParseDepths(absl::StrJoin(depths, ", "));
  RC_ASSERT(parsed.ok());
  RC_ASSERT(*parsed == depths);
  const int64_t bytes = *rc::gen::inRange<int64_t>(1, int64_t{1} << 50);
  const absl::StatusOr<int64_t> rate = ParseLinkBandwidth(absl::StrCat(bytes, "B/s"));
  RC_ASSERT(rate.ok());
  RC_ASSERT(*rate == bytes);
}

TEST(Request, DepthsRefuseRepeatsAndNonPositives) {
  EXPECT_THAT(std::string(ParseDepths("4,8,4").status().message()), HasSubstr("lists 4 twice"));
  EXPECT_THAT(std::string(ParseDepths("4,0").status().message()), HasSubstr("'0'"));
  EXPECT_THAT(std::string(ParseLinkBandwidth("25GB").status().message()),
              HasSubstr("accepted: a positive size per second"));
  EXPECT_FALSE(ParseLinkBandwidth("0B/s").ok());
  EXPECT_EQ(*ParseLinkBandwidth("25GB/s"), 25000000000);
}

// Each mode that does less than a sweep refuses every flag it does not use, naming it and the
// flags it accepts; the sweep itself (no mode flag) uses them all.
RC_GTEST_PROP(Request, ModesRefuseTheFlagsTheyDoNotUse, ()) {
  const std::vector<std::string> flags = {
      "preset", "models", "strategies",  "budgets", "device", "seed", "threads",     "out", "steps",
      "warmup", "nproc",  "train_steps", "resume",  "depths", "amp",  "time_limit_s"};
  std::set<std::string> given;
  for (const std::string& flag : flags) {
    if (*rc::gen::arbitrary<bool>()) given.insert(flag);
  }
  RC_ASSERT(CheckFlagsOfMode(given).ok());
  const std::string mode =
      *rc::gen::elementOf(std::vector<std::string>{"list", "predict", "report_only", "explain"});
  given.insert(mode);
  const absl::Status checked = CheckFlagsOfMode(given);
  // Every mode uses none of these: with one given, it is refused by name.
  const bool refused_given = given.count("steps") || given.count("nproc") || given.count("resume");
  if (refused_given) {
    RC_ASSERT(checked.code() == absl::StatusCode::kInvalidArgument);
    RC_ASSERT(absl::StrContains(checked.message(), absl::StrCat("accepted with --", mode)));
  }
  if (given.size() == 1) RC_ASSERT(checked.ok());  // the mode alone
}

// Bad input keeps its mark through copies and StatusOr; any other error is exit status 1.
TEST(Request, BadInputKeepsExitStatus2) {
  EXPECT_EQ(ExitStatusOf(absl::OkStatus()), 0);
  for (const absl::Status& error :
       {absl::InvalidArgumentError("a"), absl::DataLossError("b"), absl::AbortedError("c")}) {
    EXPECT_EQ(ExitStatusOf(error), 1) << error;
    const absl::StatusOr<int> carried = BadInput(error);
    const absl::Status copied = carried.status();
    EXPECT_EQ(ExitStatusOf(copied), 2) << error;
    EXPECT_EQ(copied.message(), error.message());
    EXPECT_EQ(copied.code(), error.code());
  }
}

}  // namespace
}  // namespace ckpt
