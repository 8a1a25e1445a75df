// Files as ckptlab writes and reads them: whole or not at all, and never trusting what a path
// turns out to be. The one file policy, for every path from every source (a flag, an environment
// variable, a spec, a plan file, a link found in a folder):
//
//   read    a regular file only (a link to one is read through), of at most a bound;
//   write   by replacing the file whole (a link in the way is replaced, never followed), or by
//           appending to a regular file this run owns, never through a link;
//   create  only where nothing is (CreateNewFile, ScratchFolder, the temporaries);
//   delete  only what this run created: its temporaries, its scratch folders and what it made
//           in them.
//
//   RETURN_IF_ERROR(WriteFileAtomically(dir + "/report.md", markdown));
//   ASSIGN_OR_RETURN(std::string text, ReadRegularFile(path, kMaxResultsBytes));
//
// Writing. The text goes to a temporary beside the target (the same folder, so the rename
// cannot cross file systems), every write, the flush to disk and the close are checked, and
// only then is the temporary renamed over the target. A reader sees the old file or the new
// one, never a part; a failure leaves the old file as it was and no temporary behind. Errors
// are DataLoss and say which file and the system's reason (strerror).
//
// Reading. Only a regular file (a symbolic link to one is followed) of at most a bound is
// read; a directory, a FIFO, a socket or a device (/dev/zero) is refused without blocking on
// it, as is a file past the bound. Needs no LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ckpt {

// Replaces (or creates) `path` with `contents`, atomically (see above).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// A fresh temporary beside `path` for a program that writes the file itself (gnuplot):
// "dir/.name.tmp.XXXXXX", created empty (0644). CommitFile moves it into place; DiscardFile
// removes it. DataLoss naming the folder and the reason when none can be made.
absl::StatusOr<std::string> MakeTemporaryBeside(const std::string& path);
// Flushes `temporary` to disk and renames it over `path`; on failure removes it. DataLoss
// naming the file and the reason.
absl::Status CommitFile(const std::string& temporary, const std::string& path);
void DiscardFile(const std::string& temporary);

// The contents of `path`, a regular file of at most `max_bytes`. NotFound when it does not
// exist; FailedPrecondition naming what it is instead (a directory, a FIFO, a device) or its
// size against the bound; DataLoss for a read error. Every message names the path.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes);

// For checking outputs before any work is done: OK when `path` does not exist, is a link (which
// WriteFileAtomically replaces), or is a regular file; with `in_place` (a file appended to), a
// regular file this process can write, or a link to a regular file (whose text is read through it
// before the link is replaced). Else FailedPrecondition naming what is in the way. (Replacing a
// file needs only its folder to take new files: CheckWritableFolder.)
absl::Status CheckWritableFile(const std::string& path, bool in_place = false);

// OK when files can be created in the folder `dir` (a probe file is made and removed);
// FailedPrecondition naming the folder and the reason otherwise.
absl::Status CheckWritableFolder(const std::string& dir);

// What is at `path`, in words, without following a link: "nothing", "a regular file", "a
// directory", "a FIFO (named pipe)", "a symbolic link", ...
std::string DescribeWhatIsAt(const std::string& path);

// Creates `path` as a new empty file (mode 0600) that this run then owns, where nothing is: not
// even a link (which is never followed). AlreadyExists naming what is there; NotFound when its
// folder does not exist; FailedPrecondition with the system's reason otherwise.
absl::Status CreateNewFile(const std::string& path);

// Opens the existing regular file `path` to append to it (O_APPEND), never through a link: a
// descriptor the caller closes. FailedPrecondition naming what is there instead (a link, a
// FIFO, a folder) or the system's reason.
absl::StatusOr<int> OpenToAppend(const std::string& path);

// A folder this run makes for files of its own ("<parent>/<prefix>XXXXXX", mode 0700), removed
// when the object goes, and also when the process is ended by SIGINT, SIGTERM or SIGHUP (after
// which the signal takes its course): with it, the files named through Path() and nothing else,
// so that a file another program left there keeps the folder and itself.
class ScratchFolder {
 public:
  // FailedPrecondition naming `parent` and the reason when no folder can be made there.
  static absl::StatusOr<ScratchFolder> Make(const std::string& parent, const std::string& prefix);
  ScratchFolder(ScratchFolder&& other) noexcept;
  ScratchFolder& operator=(ScratchFolder&&) = delete;
  ~ScratchFolder();

  const std::string& dir() const { return dir_; }
  // `dir()/name`, for a file this run makes there: removed with the folder.
  std::string Path(const std::string& name);

 private:
  ScratchFolder(std::string dir, int slot) : dir_(std::move(dir)), slot_(slot) {}
  std::string dir_;
  std::vector<std::string> files_;  // made there through Path()
  int slot_ = -1;                   // its entry in the process's table of what a signal removes
};

}  // namespace ckpt
