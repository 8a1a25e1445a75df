#include "core/base/files.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckpt {
namespace {

std::string Reason(int error) { return std::strerror(error); }

// "cannot write PATH: REASON", the one failure of every write.
absl::Status CannotWrite(const std::string& path, int error) {
  return absl::DataLossError(absl::StrCat("cannot write ", path, ": ", Reason(error)));
}

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

// --- What a signal removes: the scratch folders, in a table a handler may read. ---

constexpr int kScratchSlots = 4;
constexpr int kScratchFiles = 4;
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

// A scratch folder and the files made in it, as plain bytes (a handler calls no allocator).
struct ScratchSlot {
  char dir[PATH_MAX];
  char files[kScratchFiles][PATH_MAX];
  volatile sig_atomic_t num_files;
  volatile sig_atomic_t used;
};
ScratchSlot scratch_slots[kScratchSlots];  // static storage: zeroed, never destroyed
struct sigaction previous_actions[3];
bool handlers_installed = false;

// Only async-signal-safe calls: unlink, rmdir.
void RemoveSlot(ScratchSlot& slot) {
  for (int i = 0; i < slot.num_files; ++i) ::unlink(slot.files[i]);
  ::rmdir(slot.dir);
  slot.num_files = 0;
  slot.used = 0;
}

extern "C" void RemoveScratchOnSignal(int signal) {
  for (ScratchSlot& slot : scratch_slots) {
    if (slot.used) RemoveSlot(slot);
  }
  // The signal's own course: the action there was before, delivered once this handler returns.
  for (size_t i = 0; i < sizeof(kCleanupSignals) / sizeof(kCleanupSignals[0]); ++i) {
    if (kCleanupSignals[i] == signal) ::sigaction(signal, &previous_actions[i], nullptr);
  }
  ::raise(signal);
}

// Blocks the cleanup signals while the table changes, so that a handler never reads half an
// entry.
class SignalsHeld {
 public:
  SignalsHeld() {
    sigset_t set;
    sigemptyset(&set);
    for (const int s : kCleanupSignals) sigaddset(&set, s);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~SignalsHeld() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};

void InstallCleanupHandlers() {
  if (handlers_installed) return;
  handlers_installed = true;
  for (size_t i = 0; i < sizeof(kCleanupSignals) / sizeof(kCleanupSignals[0]); ++i) {
    struct sigaction action {};
    action.sa_handler = RemoveScratchOnSignal;
    sigemptyset(&action.sa_mask);
    ::sigaction(kCleanupSignals[i], nullptr, &previous_actions[i]);
    // A signal the process ignores stays ignored: it ends nothing.
    if (previous_actions[i].sa_handler == SIG_IGN) continue;
    ::sigaction(kCleanupSignals[i], &action, nullptr);
  }
}

bool CopyPath(char (&to)[PATH_MAX], const std::string& from) {
  if (from.size() >= PATH_MAX) return false;
  std::memcpy(to, from.c_str(), from.size() + 1);
  return true;
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& what) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return CannotWrite(what, n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Flushes and closes `fd` (always closed), checked.
absl::Status SyncAndClose(int fd, const std::string& what) {
  const int synced = ::fsync(fd) == 0 ? 0 : errno;
  const int closed = ::close(fd) == 0 ? 0 : errno;
  // fsync is refused by some special file systems (EINVAL): that is not a failed write.
  if (synced != 0 && synced != EINVAL && synced != EROFS) return CannotWrite(what, synced);
  return closed != 0 ? CannotWrite(what, closed) : absl::OkStatus();
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
    return CannotWrite(path, error);
  }
  return std::make_pair(fd, temporary);
}

// Flushes and closes `fd` (always closed), then renames `temporary` over `path`; removes the
// temporary on any failure.
absl::Status Commit(int fd, const std::string& temporary, const std::string& path) {
  absl::Status s = SyncAndClose(fd, path);
  if (s.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) s = CannotWrite(path, errno);
  if (!s.ok()) ::unlink(temporary.c_str());
  return s;
}

// ReadRegularFile's checks and reads on the descriptor `fd` open() gave for `path`.
absl::StatusOr<std::string> ReadOpenFile(int fd, const std::string& path, int64_t max_bytes) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read ", path, ": ", Reason(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", KindOf(st.st_mode), ", not a regular file"));
  }
  if (st.st_size > max_bytes) {
    return absl::FailedPreconditionError(absl::StrFormat("%s holds %d bytes; accepted: at most %d",
                                                         path, static_cast<int64_t>(st.st_size),
                                                         max_bytes));
  }
  std::string text;
  char chunk[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", Reason(errno)));
    if (n == 0) return text;
    text.append(chunk, static_cast<size_t>(n));
    // A file that grows while it is read is held to the same bound.
    if (static_cast<int64_t>(text.size()) > max_bytes) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s holds more than %d bytes; accepted: at most that", path, max_bytes));
    }
  }
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
    return CannotWrite(path, error);
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
  if (fd < 0 && errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  absl::StatusOr<std::string> text = ReadOpenFile(fd, path, max_bytes);
  if (fd >= 0) ::close(fd);
  return text;
}

absl::Status CheckWritableFile(const std::string& path, bool in_place) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();  // made when written
    return absl::FailedPreconditionError(absl::StrCat("cannot use ", path, ": ", Reason(errno)));
  }
  const bool link = S_ISLNK(st.st_mode);
  // A link is replaced, never written through: only a file appended to is read through it first
  // (CsvAppender), so only then must it lead to a regular file.
  if (link && !in_place) return absl::OkStatus();
  if (link && ::stat(path.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot use ", path, " (a symbolic link): ", Reason(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", KindOf(st.st_mode), link ? " (through a symbolic link)" : "",
                     ", where the sweep writes a file; remove it"));
  }
  if (in_place && !link && ::access(path.c_str(), W_OK) != 0) {
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

std::string DescribeWhatIsAt(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? "nothing" : Reason(errno);
  return S_ISREG(st.st_mode) ? "a regular file" : KindOf(st.st_mode);
}

absl::Status CreateNewFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int error = errno;
    if (error == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrCat(path, " exists already (", DescribeWhatIsAt(path), ")"));
    }
    if (error == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("cannot create ", path, ": its folder does not exist"));
    }
    return absl::FailedPreconditionError(absl::StrCat("cannot create ", path, ": ", Reason(error)));
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::StatusOr<int> OpenToAppend(const std::string& path) {
  auto refused = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("cannot append to ", path, ": ", why));
  };
  // Looked at first, so that the refusal names what is there (opening a FIFO without a reader
  // fails with "No such device or address"); then opened without following a link or blocking,
  // and looked at again, in case it changed in between.
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return refused(Reason(errno));
  if (S_ISLNK(st.st_mode)) return refused("it is a symbolic link, which is never written through");
  if (!S_ISREG(st.st_mode)) {
    return refused(absl::StrCat("it is ", KindOf(st.st_mode), ", not a regular file"));
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return refused(Reason(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return refused("it changed while it was opened");
  }
  ::fcntl(fd, F_SETFL, O_APPEND);  // blocking writes from here, as a regular file's are
  return fd;
}

absl::StatusOr<ScratchFolder> ScratchFolder::Make(const std::string& parent,
                                                  const std::string& prefix) {
  std::string dir = absl::StrCat(parent, "/", prefix, "XXXXXX");
  if (::mkdtemp(dir.data()) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make a folder in ", parent, ": ", Reason(errno)));
  }
  SignalsHeld held;
  InstallCleanupHandlers();
  int slot = -1;
  for (int i = 0; i < kScratchSlots && slot < 0; ++i) {
    if (!scratch_slots[i].used && CopyPath(scratch_slots[i].dir, dir)) slot = i;
  }
  if (slot >= 0) {
    scratch_slots[slot].num_files = 0;
    scratch_slots[slot].used = 1;
  }
  return ScratchFolder(std::move(dir), slot);
}

ScratchFolder::ScratchFolder(ScratchFolder&& other) noexcept
    : dir_(std::move(other.dir_)), files_(std::move(other.files_)), slot_(other.slot_) {
  other.dir_.clear();
  other.files_.clear();
  other.slot_ = -1;
}

std::string ScratchFolder::Path(const std::string& name) {
  const std::string path = absl::StrCat(dir_, "/", name);
  if (std::find(files_.begin(), files_.end(), path) != files_.end()) return path;
  files_.push_back(path);
  if (slot_ >= 0) {  // a signal's handler removes it too, where the table has room for it
    SignalsHeld held;
    ScratchSlot& slot = scratch_slots[slot_];
    if (slot.num_files < kScratchFiles && CopyPath(slot.files[slot.num_files], path)) {
      slot.num_files = slot.num_files + 1;
    }
  }
  return path;
}

ScratchFolder::~ScratchFolder() {
  if (dir_.empty()) return;
  if (slot_ >= 0) {
    SignalsHeld held;
    scratch_slots[slot_].num_files = 0;
    scratch_slots[slot_].used = 0;
  }
  for (const std::string& file : files_) ::unlink(file.c_str());
  ::rmdir(dir_.c_str());
}

}  // namespace ckpt
