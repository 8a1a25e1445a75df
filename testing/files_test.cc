// core/files: outputs are written whole or not at all, and only regular files of bounded size
// are read, without blocking on anything else.
#include "core/files.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

using ::testing::HasSubstr;

// A fresh empty folder for one test.
std::string Folder(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/files_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The names in `dir`, hidden ones included.
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

RC_GTEST_PROP(WriteFileAtomically, LeavesExactlyTheTextAndNothingElse, (const std::string& text)) {
  const std::string dir = Folder("roundtrip");
  const std::string path = dir + "/out.txt";
  RC_ASSERT(WriteFileAtomically(path, "an older version").ok());
  RC_ASSERT(WriteFileAtomically(path, text).ok());
  absl::StatusOr<std::string> back = ReadRegularFile(path, 1 << 20);
  RC_ASSERT(back.ok());
  RC_ASSERT(*back == text);
  RC_ASSERT(Entries(dir) == std::vector<std::string>{"out.txt"});
}

TEST(WriteFileAtomically, AFailureNamesTheFileAndReasonAndLeavesTheOldOneAndNoTemporary) {
  const std::string dir = Folder("failure");
  // The target is a folder: the rename fails; the folder and its contents stay as they were.
  std::filesystem::create_directories(dir + "/report.md/inside");
  const absl::Status s = WriteFileAtomically(dir + "/report.md", "text");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cannot write " + dir + "/report.md: "));
  EXPECT_THAT(std::string(s.message()), HasSubstr("Is a directory"));
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/report.md/inside"));
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"report.md"});
  // No folder to write in: named, with the reason.
  const absl::Status missing = WriteFileAtomically(dir + "/no/such/folder/x", "text");
  EXPECT_THAT(std::string(missing.message()), HasSubstr("No such file or directory"));
}

TEST(TemporaryFiles, CommitMovesIntoPlaceAndDiscardRemoves) {
  const std::string dir = Folder("temporary");
  absl::StatusOr<std::string> temporary = MakeTemporaryBeside(dir + "/plot.png");
  ASSERT_TRUE(temporary.ok()) << temporary.status();
  EXPECT_THAT(*temporary, HasSubstr(dir + "/.plot.png.tmp."));
  std::FILE* f = std::fopen(temporary->c_str(), "w");
  std::fputs("picture", f);
  std::fclose(f);
  ASSERT_TRUE(CommitFile(*temporary, dir + "/plot.png").ok());
  EXPECT_EQ(*ReadRegularFile(dir + "/plot.png", 100), "picture");
  absl::StatusOr<std::string> other = MakeTemporaryBeside(dir + "/plot.png");
  ASSERT_TRUE(other.ok());
  DiscardFile(*other);
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"plot.png"});
}

TEST(ReadRegularFile, RefusesWhatIsNotARegularFileWithoutBlocking) {
  const std::string dir = Folder("read");
  const std::string fifo = dir + "/results.csv";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> from_fifo = ReadRegularFile(fifo, 1 << 20);  // no writer: would hang
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(from_fifo.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(from_fifo.status().message()), HasSubstr("is a FIFO (named pipe)"));
  // /dev/zero never ends: refused as a device, not read until memory runs out.
  absl::StatusOr<std::string> zero = ReadRegularFile("/dev/zero", 1 << 20);
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("/dev/zero is a character device"));
  // Through a symbolic link: what the link points to counts.
  const std::string link = dir + "/link.csv";
  ASSERT_EQ(::symlink("/dev/zero", link.c_str()), 0);
  EXPECT_THAT(std::string(ReadRegularFile(link, 1 << 20).status().message()),
              HasSubstr("is a character device"));
  EXPECT_THAT(std::string(ReadRegularFile(dir, 1 << 20).status().message()),
              HasSubstr("is a directory"));
  EXPECT_EQ(ReadRegularFile(dir + "/missing", 1 << 20).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteFileAtomically(dir + "/big", std::string(101, 'x')).ok());
  EXPECT_THAT(std::string(ReadRegularFile(dir + "/big", 100).status().message()),
              HasSubstr("holds 101 bytes; accepted: at most 100"));
  EXPECT_EQ(*ReadRegularFile(dir + "/big", 101), std::string(101, 'x'));
}

TEST(CheckWritable, NamesWhatIsInTheWay) {
  const std::string dir = Folder("check");
  EXPECT_TRUE(CheckWritableFile(dir + "/absent").ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/file", "x").ok());
  EXPECT_TRUE(CheckWritableFile(dir + "/file", /*in_place=*/true).ok());
  std::filesystem::create_directories(dir + "/report.md");
  EXPECT_THAT(std::string(CheckWritableFile(dir + "/report.md").message()),
              HasSubstr("report.md is a directory, where the sweep writes a file"));
  EXPECT_TRUE(CheckWritableFolder(dir).ok());
  EXPECT_FALSE(CheckWritableFolder(dir + "/absent").ok());
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{"file", "report.md"}));  // no probe left
}

TEST(FindControlCharacter, FindsTheFirstOne) {
  EXPECT_EQ(FindControlCharacter("heavy_mlp:depth=2"), -1);
  EXPECT_EQ(FindControlCharacter("a\nb"), 1);
  EXPECT_EQ(FindControlCharacter(std::string("ab\0", 3)), 2);
  EXPECT_EQ(FindControlCharacter("x\x1b[2J"), 1);
  EXPECT_EQ(FindControlCharacter("\x7f"), 0);
  EXPECT_EQ(FindControlCharacter("caf\xc3\xa9"), -1);  // UTF-8 is text
}

}  // namespace
}  // namespace ckpt
