// The spec grammar and parameter binding, including every error path.
#include "core/plan/spec.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/bytes.h"
#include "core/base/printable.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::vector<ParamDef> MlpParams() {
  return {IntParam("depth", "20", "blocks").Min(1), IntParam("hidden", "4096", "width").Min(1),
          ChoiceParam("act", {"relu", "gelu"}, "relu", "activation"),
          IntParam("segments", "auto", "segments").Min(1).AllowAuto()};
}

TEST(ParseSpec, NameOnly) {
  absl::StatusOr<Spec> spec = ParseSpec("store_all");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "store_all");
  EXPECT_TRUE(spec->params.empty());
}

TEST(ParseSpec, KeysInOrder) {
  absl::StatusOr<Spec> spec = ParseSpec(" heavy_mlp:depth=40:hidden=4096:batch=64 ");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "heavy_mlp");
  EXPECT_THAT(spec->params,
              ElementsAre(Pair("depth", "40"), Pair("hidden", "4096"), Pair("batch", "64")));
}

TEST(ParseSpec, Errors) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"", "the name ''"},
           {"Uniform", "the name 'Uniform'"},
           {"uniform:segments", "'segments' is not key=value"},
           {"uniform:=4", "'=4' is not key=value"},
           {"uniform:segments=", "'segments=' is not key=value"},
           {"uniform:Seg=4", "'Seg=4' is not key=value"},
           {"uniform::segments=4", "'' is not key=value"},
           {"uniform:segments=4:segments=5", "key 'segments' is given twice"},
       }) {
    absl::StatusOr<Spec> spec = ParseSpec(c.text);
    ASSERT_FALSE(spec.ok()) << c.text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(c.message)) << c.text;
  }
}

TEST(ParseSpecList, SplitsOnCommas) {
  absl::StatusOr<std::vector<Spec>> specs = ParseSpecList("store_all,uniform:segments=4");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[1].name, "uniform");
  EXPECT_FALSE(ParseSpecList("store_all,,uniform").ok());
}

TEST(BindParams, FillsDefaultsInDeclarationOrder) {
  absl::StatusOr<ParamValues> v = BindParams(*ParseSpec("mlp:hidden=64:depth=3"), MlpParams());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->Int("depth"), 3);
  EXPECT_EQ(v->Int("hidden"), 64);
  EXPECT_EQ(v->Text("act"), "relu");
  EXPECT_TRUE(v->IsAuto("segments"));
  EXPECT_EQ(v->Canonical(), "mlp:depth=3:hidden=64:act=relu:segments=auto");
}

TEST(BindParams, AutoOrInteger) {
  absl::StatusOr<ParamValues> v = BindParams(*ParseSpec("mlp:segments=7"), MlpParams());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->IsAuto("segments"));
  EXPECT_EQ(v->Int("segments"), 7);
}

TEST(BindParams, UnknownKeyNamesItAndTheAcceptedOnes) {
  absl::StatusOr<ParamValues> v = BindParams(*ParseSpec("mlp:width=3"), MlpParams());
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v.status().message(),
            "mlp: unknown parameter 'width'; accepted: depth, hidden, act, segments");
}

TEST(BindParams, NoParametersAccepted) {
  absl::StatusOr<ParamValues> v = BindParams(*ParseSpec("store_all:x=1"), {});
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("it takes no parameters"));
}

TEST(BindParams, BadValuesNameTheKeyTheValueAndTheRange) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"mlp:depth=0", "depth='0' is not accepted; depth is an integer >= 1"},
           {"mlp:depth=-3", "depth='-3' is not accepted"},
           {"mlp:depth=abc", "depth='abc' is not accepted"},
           {"mlp:depth=2.5", "depth='2.5' is not accepted"},
           {"mlp:depth=auto", "depth='auto' is not accepted"},
           {"mlp:depth=99999999999999999999", "is not accepted"},
           {"mlp:segments=0", "segments is an integer >= 1 or auto"},
           {"mlp:act=tanh", "act='tanh' is not accepted; act is one of: relu, gelu"},
       }) {
    absl::StatusOr<ParamValues> v = BindParams(*ParseSpec(c.text), MlpParams());
    ASSERT_FALSE(v.ok()) << c.text;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(v.status().message()), HasSubstr(c.message)) << c.text;
  }
}

TEST(BindParams, BadDefaultIsCaughtToo) {
  // A plugin author's typo in a default surfaces at bind time, naming the key.
  absl::StatusOr<ParamValues> v =
      BindParams(*ParseSpec("mlp"), {IntParam("depth", "twenty", "blocks")});
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("depth='twenty'"));
}

TEST(ParamValuesDeathTest, UndeclaredKeyIsAProgrammingError) {
  absl::StatusOr<ParamValues> v = BindParams(*ParseSpec("mlp"), MlpParams());
  ASSERT_TRUE(v.ok());
  EXPECT_DEATH(v->Int("width"), "mlp has no declared parameter 'width'");
  EXPECT_DEATH(v->Int("segments"), "parameter 'segments' is not an integer here");
}

// Text near the grammar, and bytes.
rc::Gen<std::string> SpecishText() {
  return rc::gen::map(
      rc::gen::container<std::vector<std::string>>(rc::gen::oneOf(
          rc::gen::element<std::string>(
              "heavy_mlp", "uniform", ":", "=", ",", " ", "depth", "hidden", "act", "segments",
              "relu", "auto", "0", "1", "-1", "+4", "1.5", "1e308", "nan", "inf", "0x1p-3",
              "99999999999999999999", "9223372036854775807", "GiB", "MiB", "kB", "B", "/s", "\x1b",
              std::string(1, '\0'), "\n", "\xc2\x9b", "\xff", "\xe2\x82"),
          rc::gen::map(rc::gen::arbitrary<std::vector<unsigned char>>(),
                       [](const std::vector<unsigned char>& b) {
                         return std::string(b.begin(), b.end());
                       }))),
      [](const std::vector<std::string>& pieces) { return absl::StrJoin(pieces, ""); });
}

// Every text is a spec, a size and bound parameters, or an error whose message is printable:
// no crash, no overflow to a negative size.
RC_GTEST_PROP(Spec, AnyTextIsAValueOrAnError, ()) {
  const std::string text = *SpecishText();
  absl::StatusOr<Spec> spec = ParseSpec(text);
  if (!spec.ok()) {
    RC_ASSERT(FindUnprintable(spec.status().message()) == -1);
  } else {
    RC_ASSERT(FindUnprintable(spec->name) == -1);
    absl::StatusOr<ParamValues> bound = BindParams(*spec, MlpParams());
    if (!bound.ok()) RC_ASSERT(FindUnprintable(bound.status().message()) == -1);
  }
  absl::StatusOr<int64_t> bytes = ParseByteSize(text);
  if (bytes.ok()) {
    RC_ASSERT(*bytes >= 0);
  } else {
    RC_ASSERT(FindUnprintable(bytes.status().message()) == -1);
  }
}

// FormatByteSize writes what ParseByteSize reads back exactly, in the largest unit that divides.
RC_GTEST_PROP(ByteSize, FormattedReadsBackExactly, ()) {
  const int64_t small = *rc::gen::inRange<int64_t>(0, int64_t{1} << 24);
  const int64_t bytes = *rc::gen::arbitrary<bool>()
                            ? small << *rc::gen::element(0, 10, 20, 30)
                            : *rc::gen::inRange<int64_t>(0, std::numeric_limits<int64_t>::max());
  const std::string text = FormatByteSize(bytes);
  absl::StatusOr<int64_t> back = ParseByteSize(text);
  RC_ASSERT(back.ok());
  RC_ASSERT(*back == bytes);
  RC_ASSERT(DescribeBytes(bytes).rfind(absl::StrCat(bytes, " bytes ("), 0) == 0);
}

// Digits, one point and a unit: exact, rounded down; any other writing is refused by name.
TEST(ByteSize, ReadsDecimalsExactlyAndNothingElse) {
  const std::vector<std::pair<std::string, int64_t>> read = {
      {"0", 0},
      {"7B", 7},
      {"1.5GiB", int64_t{3} << 29},
      {"0.1KiB", 102},
      {"25GB", 25000000000},
      {"1.000000000000000001GiB", int64_t{1} << 30},
      {"9223372036854775807", std::numeric_limits<int64_t>::max()},
      {"7.999999999999999999GiB", (int64_t{8} << 30) - 1}};
  for (const auto& [text, bytes] : read) {
    absl::StatusOr<int64_t> got = ParseByteSize(text);
    ASSERT_TRUE(got.ok()) << text << ": " << got.status();
    EXPECT_EQ(*got, bytes) << text;
  }
  for (const std::string text : {"0x10", "1e3", "1.5", "1.5B", "5.GiB", ".5GiB", "+5", " 5", "5 ",
                                 "-0", "inf", "nanGiB", "1,5GiB", "16gib", "", "GiB"}) {
    absl::StatusOr<int64_t> got = ParseByteSize(text);
    ASSERT_FALSE(got.ok()) << text << " read as " << *got;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("is not a size")) << text;
  }
  for (const std::string text : {"9223372036854775808", "8589934592GiB", "99999999999GiB"}) {
    EXPECT_THAT(std::string(ParseByteSize(text).status().message()), HasSubstr("(too large)"))
        << text;
  }
  EXPECT_THAT(std::string(ParseByteSize("1.0000000000000000001GiB").status().message()),
              HasSubstr("more than 18 digits"));
}

TEST(ByteSize, TablesPrintMibAndGibRounded) {
  EXPECT_EQ(FormatByteSize(1536 << 20), "1536MiB");
  EXPECT_EQ(FormatByteSize(1000), "1000");
  EXPECT_EQ(FormatMib(31135616, 2), "29.69");
  EXPECT_EQ(FormatGib(int64_t{3} << 29, 1), "1.5");
  EXPECT_EQ(DescribeBytes(31135616), "31135616 bytes (29.69 MiB)");
  EXPECT_EQ(FormatSize(1000), "1000 bytes");
  EXPECT_EQ(FormatSize(1536), "1.50 KiB");
  EXPECT_EQ(FormatSize(31135616), "29.69 MiB");
  EXPECT_EQ(FormatSize(int64_t{24} << 30), "24.00 GiB");
}

}  // namespace
}  // namespace ckpt
