// The sweep's output folder: made (a name of its own when none is given), locked for the run,
// checked before anything is measured, and holding the record of the settings its rows were
// measured with (run.csv), which a --resume must match.
//
//   ASSIGN_OR_RETURN(OutputFolder folder,
//                    OutputFolder::Open(flag_out, default_parent, FolderUse::kResume, outputs));
//   RETURN_IF_ERROR(folder.Adopt(record));  // writes run.csv, or checks it against `record`
//
// What counts as the sweep's: a folder is a sweep's when it holds run.csv; the sweep writes
// into a new folder, an empty one or a sweep's, and refuses any other (it would overwrite a
// user's report.md). Every file the run will write is checked first: a regular file or none,
// writable, in a folder where files can be made (each output is written to a temporary there
// and renamed, core/base/files.h).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckpt {

// The settings that change what a sweep measures, besides its models and strategies, by flag
// name, in the order written: ("memory_cap", "none"), ("steps", "10"), ...
using RunRecord = std::vector<std::pair<std::string, std::string>>;

enum class FolderUse {
  kNew,         // results.csv must not exist yet
  kResume,      // results.csv is continued when it exists (--resume)
  kReportOnly,  // results.csv must exist; nothing is measured (--report_only)
  kPredict,     // as kNew, for --predict, which continues no folder: no advice names --resume
};

class OutputFolder {
 public:
  // The file names the sweep writes in its folder.
  static const std::vector<std::string>& SweepFiles();

  // Opens `dir` for `use` (creating it and the folders above it if need be, except for
  // kReportOnly; a refusal removes the folders it made, unless another sweep holds them: two
  // sweeps started on one new folder, one of them wins), or, when `dir` is
  // empty, a new folder "sweep-<local time>" (with "-2", "-3", ... when that name is taken) in
  // `default_parent`. Takes an exclusive lock on it for the life of the process (another sweep
  // on it: Unavailable). `outputs` are the files this run will write there: each must be
  // absent or a writable regular file, and files must be creatable in the folder. Errors
  // (InvalidArgument, NotFound, AlreadyExists, FailedPrecondition, Unavailable) name the path
  // and what is accepted; nothing has been written when one comes back.
  static absl::StatusOr<OutputFolder> Open(const std::string& dir,
                                           const std::string& default_parent, FolderUse use,
                                           const std::vector<std::string>& outputs);

  const std::string& dir() const { return dir_; }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  // Whether results.csv was there when the folder was opened.
  bool has_results() const { return has_results_; }
  // The settings run.csv recorded when the folder was opened, if it held one.
  const std::optional<RunRecord>& recorded() const { return recorded_; }

  // For a folder without a record, writes `record` as run.csv (DataLoss naming the reason).
  // For one with a record, InvalidArgument naming every setting in which `record` differs from
  // it: rows measured under other settings are not to be mixed with this run's.
  absl::Status Adopt(const RunRecord& record);

 private:
  // Open, adding the folders it created to `made`, outermost first.
  static absl::StatusOr<OutputFolder> Open(const std::string& dir,
                                           const std::string& default_parent, FolderUse use,
                                           const std::vector<std::string>& outputs,
                                           std::vector<std::string>& made);
  OutputFolder(std::string dir, bool has_results, std::optional<RunRecord> recorded)
      : dir_(std::move(dir)), has_results_(has_results), recorded_(std::move(recorded)) {}

  std::string dir_;
  bool has_results_ = false;
  std::optional<RunRecord> recorded_;
};

}  // namespace ckpt
