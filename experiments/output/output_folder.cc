#include "experiments/output/output_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/files.h"
#include "core/base/status_macros.h"
#include "experiments/records/results_csv.h"

namespace ckpt {
namespace {

constexpr char kResults[] = "results.csv";
constexpr char kRecord[] = "run.csv";

// Takes an exclusive lock on the folder `dir` for the rest of the process (flock on the folder
// itself, so nothing is written into it): Unavailable when another sweep holds it.
absl::Status LockFolder(const std::string& dir, FolderUse use) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--out='", dir, "' cannot be opened: ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    return error == EWOULDBLOCK
               ? absl::UnavailableError(absl::StrCat(
                     "another sweep is using --out='", dir, "' now; wait for it to finish",
                     use == FolderUse::kNew || use == FolderUse::kResume ? " (then --resume)" : "",
                     ", or pass another --out"))
               : absl::FailedPreconditionError(
                     absl::StrCat("--out='", dir, "' cannot be locked: ", std::strerror(error)));
  }
  return absl::OkStatus();  // the descriptor stays open, and the lock with it
}

// Makes `dir` and the folders above it that are missing, adding each it made to `made` (outermost
// first), so that a run that refuses later removes exactly those. The reason (strerror) on error.
absl::Status MakeFolders(const std::string& dir, std::vector<std::string>& made) {
  std::vector<std::string> missing;  // innermost first
  for (std::filesystem::path p = dir; !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) break;
    missing.push_back(p.string());
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(std::strerror(errno));
    }
    made.push_back(*it);
  }
  return absl::OkStatus();
}

// A new folder in `parent` named after the local time: mkdir either makes it or finds it
// taken, so two sweeps started in the same second get two folders.
absl::StatusOr<std::string> MakeNewFolder(const std::string& parent,
                                          std::vector<std::string>& made) {
  if (absl::Status s = MakeFolders(parent, made); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the results folder '", parent, "' cannot be created: ", s.message()));
  }
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  const std::string base = absl::StrCat(parent, "/sweep-", stamp);
  for (int n = 1; n <= 1000; ++n) {
    const std::string dir = n == 1 ? base : absl::StrCat(base, "-", n);
    if (::mkdir(dir.c_str(), 0755) == 0) {
      made.push_back(dir);
      return dir;
    }
    if (errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", dir, "' cannot be created: ", std::strerror(errno)));
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no free folder name after ", base, "-1000; pass --out"));
}

// How a message names a recorded setting: the flag that sets it, or what it is where the record's
// name is not a flag's (the texts of the plan files --strategies names; the ranks that ran, and
// --predict's --world_size, which it records as states_world_size).
std::string SettingName(const std::string& setting) {
  if (setting == "plan_files") return "the plan files";
  if (setting == "world_size") return "the ranks (--nproc, or a launcher's WORLD_SIZE)";
  if (setting == "states_world_size") return "--world_size";
  return absl::StrCat("--", setting);
}

// Whether `name` is a temporary of one of the sweep's files (left by a kill mid-write).
bool IsOurTemporary(const std::string& name) {
  for (const std::string& file : OutputFolder::SweepFiles()) {
    if (absl::StartsWith(name, absl::StrCat(".", file, ".tmp."))) return true;
  }
  return false;
}

absl::StatusOr<RunRecord> ReadRecord(const std::string& path) {
  std::vector<int> lines;
  ASSIGN_OR_RETURN(const auto csv, ReadCsv(path, &lines));
  if (csv.empty() || csv[0] != std::vector<std::string>{"setting", "value"}) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not a sweep's record (its header is not setting,value); pass another --out"));
  }
  RunRecord record;
  for (size_t i = 1; i < csv.size(); ++i) {
    if (csv[i].size() != 2) {
      return absl::DataLossError(absl::StrCat(path, " line ", lines[i], " has ", csv[i].size(),
                                              " fields, not 2; the file is damaged"));
    }
    record.emplace_back(csv[i][0], csv[i][1]);
  }
  return record;
}

}  // namespace

const std::vector<std::string>& OutputFolder::SweepFiles() {
  static const auto* files = new std::vector<std::string>{
      kResults,     kRecord,         "report.md",   "pareto.dat", "pareto.gp",
      "pareto.png", "pareto.gp.log", "depth.csv",   "depth.dat",  "depth.gp",
      "depth.png",  "depth.gp.log",  "losses.csv",  "loss.dat",   "loss.gp",
      "loss.png",   "loss.gp.log",   "predict.csv", "predict.md", "profiles.txt"};
  return *files;
}

absl::StatusOr<OutputFolder> OutputFolder::Open(const std::string& dir_flag,
                                                const std::string& default_parent, FolderUse use,
                                                const std::vector<std::string>& outputs) {
  std::vector<std::string> made;  // the folders this call created, removed again if it refuses
  absl::StatusOr<OutputFolder> folder = Open(dir_flag, default_parent, use, outputs, made);
  // Not where another sweep holds the folder: it took the folder this one made (both started on
  // one new --out), and it is that sweep's now.
  if (!folder.ok() && !absl::IsUnavailable(folder.status())) {
    for (auto it = made.rbegin(); it != made.rend(); ++it) ::rmdir(it->c_str());
  }
  return folder;
}

absl::StatusOr<OutputFolder> OutputFolder::Open(const std::string& dir_flag,
                                                const std::string& default_parent, FolderUse use,
                                                const std::vector<std::string>& outputs,
                                                std::vector<std::string>& made) {
  std::string dir = dir_flag;
  if (dir.empty()) {
    if (use == FolderUse::kReportOnly) {
      return absl::InvalidArgumentError(
          "--report_only needs --out: the folder of the sweep to report on");
    }
    ASSIGN_OR_RETURN(dir, MakeNewFolder(default_parent, made));
  } else {
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--out='", dir, "' is not a folder; accepted: a folder, new, empty or a sweep's"));
      }
    } else if (use == FolderUse::kReportOnly) {
      return absl::NotFoundError(absl::StrCat("--report_only: no results.csv in --out='", dir,
                                              "'; give the folder of the sweep to report on"));
    } else if (absl::Status s = MakeFolders(dir, made); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("--out='", dir, "' cannot be created: ", s.message()));
    }
  }
  // Locked first, and only then looked into: two sweeps on one folder would otherwise both find
  // results.csv absent and truncate each other's rows, or both resume it and add rows twice.
  RETURN_IF_ERROR(LockFolder(dir, use));

  std::vector<std::string> foreign;    // every name, but the temporaries of the sweep's files
  std::vector<std::string> strangers;  // of those, the names no sweep writes
  bool has_record = false, has_results = false;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    has_record |= name == kRecord;
    has_results |= name == kResults;
    if (IsOurTemporary(name)) continue;
    foreign.push_back(name);
    if (std::find(SweepFiles().begin(), SweepFiles().end(), name) == SweepFiles().end()) {
      strangers.push_back(name);
    }
  }
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("--out='", dir, "' cannot be read: ", ec.message()));
  }
  // A sweep's folder holds run.csv. One from before run.csv existed holds results.csv and only
  // names the sweep writes: --report_only, which writes no record and reads the rows, takes it.
  const bool older_sweeps = use == FolderUse::kReportOnly && has_results && strangers.empty();
  if (!has_record && !foreign.empty() && !older_sweeps) {
    std::vector<std::string>& named = strangers.empty() ? foreign : strangers;
    std::sort(named.begin(), named.end());
    const size_t shown = std::min<size_t>(named.size(), 5);
    return absl::FailedPreconditionError(absl::StrCat(
        "--out='", dir, "' holds files the sweep did not write (",
        absl::StrJoin(named.begin(), named.begin() + shown, ", "),
        named.size() > shown ? absl::StrCat(" and ", named.size() - shown, " more") : "",
        "); accepted: a new or empty folder, or a sweep's (one that holds run.csv; for "
        "--report_only also one that holds results.csv and only files a sweep writes)"));
  }
  if (use == FolderUse::kReportOnly && !has_results) {
    return absl::NotFoundError(absl::StrCat("--report_only: no results.csv in --out='", dir,
                                            "'; give the folder of the sweep to report on"));
  }
  if (use == FolderUse::kPredict && has_results) {
    return absl::AlreadyExistsError(
        absl::StrCat(dir, "/", kResults,
                     " exists: --out is a sweep's measured rows, and --predict writes "
                     "into a folder of its own; pass another --out"));
  }
  if (use == FolderUse::kNew && has_results) {
    return absl::AlreadyExistsError(absl::StrCat(
        dir, "/", kResults, " exists; pass --resume to continue it, or another --out"));
  }
  // A record without rows (a sweep killed before its first) binds nothing: it is rewritten.
  std::optional<RunRecord> recorded;
  if (has_record && has_results) {
    ASSIGN_OR_RETURN(recorded, ReadRecord(absl::StrCat(dir, "/", kRecord)));
  }
  for (const std::string& name : outputs) {
    // results.csv is appended to; the others are replaced whole (core/base/files.h).
    RETURN_IF_ERROR(CheckWritableFile(absl::StrCat(dir, "/", name), name == kResults));
  }
  RETURN_IF_ERROR(CheckWritableFolder(dir));
  return OutputFolder(dir, has_results, std::move(recorded));
}

absl::Status OutputFolder::Adopt(const RunRecord& record) {
  if (!recorded_.has_value()) {
    std::string text = CsvLine({"setting", "value"});
    for (const auto& [setting, value] : record) text += CsvLine({setting, value});
    RETURN_IF_ERROR(WriteFileAtomically(Path(kRecord), text));
    recorded_ = record;
    return absl::OkStatus();
  }
  std::vector<std::string> differences;
  for (const auto& [setting, value] : record) {
    std::string theirs = "unset";
    for (const auto& [recorded_setting, recorded_value] : *recorded_) {
      if (recorded_setting == setting) theirs = recorded_value;
    }
    if (theirs != value) {
      differences.push_back(
          absl::StrCat(SettingName(setting), " (", value, " now, ", theirs, " there)"));
    }
  }
  if (differences.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--out='", dir_,
      "' holds rows measured with other settings: ", absl::StrJoin(differences, ", "),
      "; accepted: the settings its run.csv records (or another --out, for a new run)"));
}

}  // namespace ckpt
