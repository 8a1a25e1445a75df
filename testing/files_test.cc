// core/base/files: outputs are written whole or not at all, and only regular files of bounded size
// are read, without blocking on anything else.
#include "core/base/files.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

// What a run creates, it creates where nothing is: a file of the user's, a FIFO, a folder or a
// link (never followed) is named and left as it was.
TEST(CreateNewFile, OnlyWhereNothingIs) {
  const std::string dir = Folder("create");
  ASSERT_TRUE(CreateNewFile(dir + "/store").ok());
  struct stat st {};
  ASSERT_EQ(::lstat((dir + "/store").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(WriteFileAtomically(dir + "/user.txt", "the user's").ok());
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0);
  std::filesystem::create_directories(dir + "/folder");
  ASSERT_EQ(::symlink((dir + "/elsewhere").c_str(), (dir + "/link").c_str()), 0);
  for (const auto& [name, what] :
       std::vector<std::pair<std::string, std::string>>{{"user.txt", "a regular file"},
                                                        {"fifo", "a FIFO (named pipe)"},
                                                        {"folder", "a directory"},
                                                        {"link", "a symbolic link"}}) {
    const absl::Status s = CreateNewFile(dir + "/" + name);
    EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << name;
    EXPECT_THAT(std::string(s.message()), HasSubstr(dir + "/" + name + " exists already (" + what));
  }
  EXPECT_EQ(*ReadRegularFile(dir + "/user.txt", 100), "the user's");
  EXPECT_FALSE(std::filesystem::exists(dir + "/elsewhere"));  // the link was not followed
  EXPECT_EQ(CreateNewFile(dir + "/no/such/folder").code(), absl::StatusCode::kNotFound);
}

// Appending never goes through a link, nor into a FIFO.
TEST(OpenToAppend, ARegularFileOnlyNeverThroughALink) {
  const std::string dir = Folder("append");
  ASSERT_TRUE(WriteFileAtomically(dir + "/results.csv", "a\n").ok());
  absl::StatusOr<int> fd = OpenToAppend(dir + "/results.csv");
  ASSERT_TRUE(fd.ok()) << fd.status();
  ASSERT_EQ(::write(*fd, "b\n", 2), 2);
  ::close(*fd);
  EXPECT_EQ(*ReadRegularFile(dir + "/results.csv", 100), "a\nb\n");
  ASSERT_TRUE(WriteFileAtomically(dir + "/far.csv", "far\n").ok());
  ASSERT_EQ(::symlink((dir + "/far.csv").c_str(), (dir + "/link.csv").c_str()), 0);
  EXPECT_THAT(std::string(OpenToAppend(dir + "/link.csv").status().message()),
              HasSubstr("it is a symbolic link, which is never written through"));
  EXPECT_EQ(*ReadRegularFile(dir + "/far.csv", 100), "far\n");
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0);
  EXPECT_THAT(std::string(OpenToAppend(dir + "/fifo").status().message()),
              HasSubstr("a FIFO (named pipe), not a regular file"));
}

// A scratch folder goes with the files made in it through Path(), and keeps what it did not make.
TEST(ScratchFolder, RemovesWhatItMadeAndNothingElse) {
  const std::string parent = Folder("scratch");
  std::string dir;
  {
    absl::StatusOr<ScratchFolder> scratch = ScratchFolder::Make(parent, "ranks-");
    ASSERT_TRUE(scratch.ok()) << scratch.status();
    dir = scratch->dir();
    EXPECT_THAT(dir, HasSubstr(parent + "/ranks-"));
    ASSERT_TRUE(WriteFileAtomically(scratch->Path("rendezvous.store"), "keys").ok());
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
  {
    absl::StatusOr<ScratchFolder> scratch = ScratchFolder::Make(parent, "ranks-");
    ASSERT_TRUE(scratch.ok());
    dir = scratch->dir();
    ASSERT_TRUE(WriteFileAtomically(dir + "/not-ours", "another program's").ok());
  }
  EXPECT_EQ(*ReadRegularFile(dir + "/not-ours", 100), "another program's");
  EXPECT_THAT(std::string(ScratchFolder::Make(parent + "/absent", "x-").status().message()),
              HasSubstr("cannot make a folder in " + parent + "/absent"));
}

// A process ended by SIGTERM removes its scratch folders first, and still ends by SIGTERM.
TEST(ScratchFolder, GoesWhenTheProcessIsTerminated) {
  const std::string parent = Folder("signal");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<ScratchFolder> scratch = ScratchFolder::Make(parent, "ranks-");
    if (!scratch.ok() || !WriteFileAtomically(scratch->Path("store"), "keys").ok()) _exit(3);
    ::raise(SIGTERM);
    _exit(4);  // not reached: SIGTERM ends the process
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(Entries(parent), std::vector<std::string>{});
}

}  // namespace
}  // namespace ckpt
