#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckpt {
namespace {

std::string Reason(int error) { return std::strerror(error); }

// The folder and the name of `path` ("." for a bare name).
std::pair<std::string, std::string> Split(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// What a file that is not a regular one is, in words.
std::string KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& what) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::DataLossError(
          absl::StrCat("cannot write ", what, ": ", Reason(n < 0 ? errno : ENOSPC)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Flushes and closes `fd` (always closed), checked.
absl::Status SyncAndClose(int fd, const std::string& what) {
  const int synced = ::fsync(fd) == 0 ? 0 : errno;
  const int closed = ::close(fd) == 0 ? 0 : errno;
  // fsync is refused by some special file systems (EINVAL): that is not a failed write.
  if (synced != 0 && synced != EINVAL && synced != EROFS) {
    return absl::DataLossError(absl::StrCat("cannot write ", what, ": ", Reason(synced)));
  }
  if (closed != 0)
    return absl::DataLossError(absl::StrCat("cannot write ", what, ": ", Reason(closed)));
  return absl::OkStatus();
}

// A new empty temporary beside `path`, mode 0644, open for writing: its descriptor and name.
absl::StatusOr<std::pair<int, std::string>> CreateTemporary(const std::string& path) {
  const auto [dir, name] = Split(path);
  std::string temporary = absl::StrCat(dir, "/.", name, ".tmp.XXXXXX");
  std::vector<char> buffer(temporary.begin(), temporary.end());
  buffer.push_back('\0');
  const int fd = ::mkostemp(buffer.data(), O_CLOEXEC);
  if (fd < 0) {
    return absl::DataLossError(
        absl::StrCat("cannot write ", path, ": no temporary file in ", dir, ": ", Reason(errno)));
  }
  temporary.assign(buffer.data());
  // mkostemp makes 0600; outputs are for anyone who may read the folder.
  if (::fchmod(fd, 0644) != 0) {
    const int error = errno;
    ::close(fd);
    ::unlink(temporary.c_str());
    return absl::DataLossError(absl::StrCat("cannot write ", path, ": ", Reason(error)));
  }
  return std::make_pair(fd, temporary);
}

// Flushes and closes `fd` (always closed), then renames `temporary` over `path`; removes the
// temporary on any failure.
absl::Status Commit(int fd, const std::string& temporary, const std::string& path) {
  absl::Status s = SyncAndClose(fd, path);
  if (s.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) {
    s = absl::DataLossError(absl::StrCat("cannot write ", path, ": ", Reason(errno)));
  }
  if (!s.ok()) ::unlink(temporary.c_str());
  return s;
}

}  // namespace

absl::StatusOr<std::string> MakeTemporaryBeside(const std::string& path) {
  auto created = CreateTemporary(path);
  if (!created.ok()) return created.status();
  ::close(created->first);
  return created->second;
}

void DiscardFile(const std::string& temporary) { ::unlink(temporary.c_str()); }

absl::Status CommitFile(const std::string& temporary, const std::string& path) {
  const int fd = ::open(temporary.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    DiscardFile(temporary);
    return absl::DataLossError(absl::StrCat("cannot write ", path, ": ", Reason(error)));
  }
  return Commit(fd, temporary, path);
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  auto created = CreateTemporary(path);
  if (!created.ok()) return created.status();
  const auto [fd, temporary] = *created;
  if (absl::Status s = WriteAll(fd, contents, path); !s.ok()) {
    ::close(fd);
    DiscardFile(temporary);
    return s;
  }
  return Commit(fd, temporary, path);
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes) {
  // Non-blocking, so that opening a FIFO returns at once (and fstat then refuses it).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return absl::FailedPreconditionError(absl::StrCat("cannot read ", path, ": ", Reason(error)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat("cannot read ", path, ": ", Reason(error)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", KindOf(st.st_mode), ", not a regular file"));
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrFormat("%s holds %d bytes; accepted: at most %d",
                                                         path, static_cast<int64_t>(st.st_size),
                                                         max_bytes));
  }
  std::string text;
  char chunk[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", Reason(error)));
    }
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
    // A file that grows while it is read is held to the same bound.
    if (static_cast<int64_t>(text.size()) > max_bytes) {
      ::close(fd);
      return absl::FailedPreconditionError(
          absl::StrFormat("%s holds more than %d bytes; accepted: at most that", path, max_bytes));
    }
  }
  ::close(fd);
  return text;
}

absl::Status CheckWritableFile(const std::string& path, bool in_place) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();  // made when written
    return absl::FailedPreconditionError(absl::StrCat("cannot use ", path, ": ", Reason(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is ", KindOf(st.st_mode), ", where the sweep writes a file; remove it"));
  }
  if (in_place && ::access(path.c_str(), W_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", path, ": ", Reason(errno)));
  }
  return absl::OkStatus();
}

absl::Status CheckWritableFolder(const std::string& dir) {
  absl::StatusOr<std::string> probe = MakeTemporaryBeside(dir + "/probe");
  if (!probe.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("files cannot be created in ", dir, " (", probe.status().message(), ")"));
  }
  DiscardFile(*probe);
  return absl::OkStatus();
}

int FindControlCharacter(absl::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (IsControlCharacter(text[i])) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace ckpt
