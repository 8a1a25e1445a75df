// experiments/gnuplot: whatever text a name holds, gnuplot reads it as data. Each generated
// string (backquoted commands, quotes of both kinds, line breaks, system(), $(...)) goes
// through GpLiteral, GpTitle and GpDataLabel into a script that gnuplot runs; gnuplot must print
// the text back (control characters as '?') and no command may have run.
#include "experiments/output/gnuplot.h"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/base/files.h"
#include "core/base/printable.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

bool HaveGnuplot() {
  absl::StatusOr<ProgramResult> run = RunProgram({"gnuplot", "--version"}, ".");
  return run.ok() && run->exit_code == 0;
}

// Text built from the pieces an attacker would use.
rc::Gen<std::string> HostileText() {
  return rc::gen::map(
      rc::gen::container<std::vector<std::string>>(rc::gen::element<std::string>(
          "`touch PWNED`", "'", "''", "\"", "\\", "\n", "system('touch PWNED')", "$(touch PWNED)",
          ";", "#", ":", "a", "heavy_mlp:depth=4", std::string(1, '\0'), "\x1b[2J", "\xc3\xa9",
          "\xc2\x9b", "\xff")),
      [](const std::vector<std::string>& pieces) { return absl::StrJoin(pieces, ""); });
}

// `text` as the functions promise gnuplot reads it back: control characters and bytes that are
// not UTF-8 as visible escapes.
std::string Cleaned(const std::string& text) { return Printable(text); }

// Runs `script` with gnuplot in a fresh folder and returns what it printed to printed.txt.
std::string RunScript(const std::string& script, const std::string& data = "") {
  const std::string dir = ::testing::TempDir() + "/gnuplot_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  RC_ASSERT(WriteFileAtomically(dir + "/script.gp", script).ok());
  if (!data.empty()) RC_ASSERT(WriteFileAtomically(dir + "/data.dat", data).ok());
  absl::StatusOr<ProgramResult> run = RunProgram({"gnuplot", "script.gp"}, dir);
  RC_ASSERT(run.ok());
  RC_LOG() << script << "\n" << run->stderr_text << "\n";
  RC_ASSERT(run->exit_code == 0);
  RC_ASSERT(!std::filesystem::exists(dir + "/PWNED"));
  absl::StatusOr<std::string> printed = ReadRegularFile(dir + "/printed.txt", 1 << 20);
  RC_ASSERT(printed.ok());
  return *printed;
}

// A program is started without a shell: its exit status and stderr come back, and one that is
// not installed is NotFound, as is a folder that is not there.
TEST(RunProgram, ReportsTheExitStatusAndWhatCouldNotStart) {
  absl::StatusOr<ProgramResult> failed = RunProgram({"false"}, ".");
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->exit_code, 1);
  absl::StatusOr<ProgramResult> listed = RunProgram({"ls", "ckptlab-no-such-file"}, ".");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_NE(listed->exit_code, 0);
  EXPECT_NE(listed->stderr_text.find("ckptlab-no-such-file"), std::string::npos);
  for (const auto& [argv, dir] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"ckptlab-no-such-program"}, "."}, {{"true"}, "ckptlab-no-such-folder"}}) {
    absl::StatusOr<ProgramResult> run = RunProgram(argv, dir);
    EXPECT_EQ(run.status().code(), absl::StatusCode::kNotFound) << run.status();
  }
}

TEST(Gnuplot, LiteralsTitlesAndLabelsAreReadAsData) {
  if (!HaveGnuplot()) GTEST_SKIP() << "gnuplot is not installed";
  EXPECT_TRUE(rc::check("a literal prints back as its text", [] {
    const std::string text = *HostileText();
    const std::string printed =
        RunScript(absl::StrCat("set print 'printed.txt'\nprint ", GpLiteral(text), "\n"));
    RC_ASSERT(printed == Cleaned(text) + "\n");
  }));
  EXPECT_TRUE(rc::check("a title prints back as its text, broken into lines after ':'", [] {
    const std::string text = *HostileText();
    const std::string printed = RunScript(
        absl::StrCat("set print 'printed.txt'\nprint ", GpTitle(text, /*width=*/8), "\n"));
    // print's own line break last; the title's fall after ':' only, so taking them out gives
    // the text back.
    RC_ASSERT(!printed.empty() && printed.back() == '\n');
    const std::string title = printed.substr(0, printed.size() - 1);
    RC_ASSERT(absl::StrReplaceAll(title, {{":\n", ":"}}) ==
              absl::StrReplaceAll(Cleaned(text), {{":\n", ":"}}));
  }));
  EXPECT_TRUE(rc::check("a data label is read as one field", [] {
    const std::string text = *HostileText();
    const std::string table =
        RunScript("set table 'printed.txt'\nplot 'data.dat' using 1:2:3 with labels\nunset table\n",
                  absl::StrCat("1 2 ", GpDataLabel(text), "\n"));
    std::string expected = Cleaned(text);
    for (char& c : expected) {
      if (c == '"' || c == '\\') c = '?';
    }
    RC_ASSERT(table.find(absl::StrCat(" 1  2 \"", expected, "\"\n")) != std::string::npos);
  }));
}

TEST(Gnuplot, DrawPanelsKeepsTheOldPictureWhenGnuplotFails) {
  if (!HaveGnuplot()) GTEST_SKIP() << "gnuplot is not installed";
  const std::string dir = ::testing::TempDir() + "/gnuplot_render";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string good = PanelsPreamble("plot", 1, 2, 200, 100, "'a line'") +
                           Panel("model:depth=2", {"'plot.dat' using 1:2 title 'x'"});
  ASSERT_TRUE(DrawPanels(dir, "plot", "1 2\n2 3\n", good).ok());
  const std::string before = *ReadRegularFile(dir + "/plot.png", 1 << 24);
  EXPECT_EQ(before.compare(1, 3, "PNG"), 0);
  const absl::Status failed = DrawPanels(dir, "plot", "1 2\n", good + "this is not gnuplot\n");
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_NE(std::string(failed.message()).find("gnuplot failed on"), std::string::npos);
  EXPECT_EQ(*ReadRegularFile(dir + "/plot.png", 1 << 24), before);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename().string().find(".plot.png.tmp."), std::string::npos)
        << "a temporary was left: " << entry.path();
  }
}

}  // namespace
}  // namespace ckpt
