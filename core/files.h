// Files as ckptlab writes and reads them: whole or not at all, and never trusting what a path
// turns out to be.
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

// For checking outputs before any work is done: OK when `path` does not exist or is a regular
// file (or a link to one) that WriteFileAtomically can replace, and with `in_place`, that this
// process can also open for writing (a file appended to); else FailedPrecondition naming what
// is in the way. (Replacing a file needs only its folder to take new files: CheckWritableFolder.)
absl::Status CheckWritableFile(const std::string& path, bool in_place = false);

// OK when files can be created in the folder `dir` (a probe file is made and removed);
// FailedPrecondition naming the folder and the reason otherwise.
absl::Status CheckWritableFolder(const std::string& dir);

// Control characters (below 0x20, and 0x7f) are what no name, spec or cell may hold: a line
// break or an escape would end or rewrite a line of the CSV files, gnuplot's scripts and the
// terminal.
inline bool IsControlCharacter(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}
// The index of the first control character in `text`, or -1.
int FindControlCharacter(absl::string_view text);

}  // namespace ckpt
