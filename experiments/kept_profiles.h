// The profiles a run keeps in its output folder (profiles.txt), so that a later question on the
// same model in the same folder (--predict again, with other budgets or another card; a --resume)
// plans from them instead of measuring again.
//
//   KeptProfiles kept = KeptProfiles::Open(folder.Path(KeptProfiles::kFile),
//                                          ProfileSetting(WorkloadOptionsFor(options)));
//   loop.kept = &kept;  // ForEachModel adopts a kept profile; the mode keeps what it measured:
//   kept.Keep(m.built, profile, progress);
//
// A profile is kept under the spec of the model measured and everything else its figures depend
// on: the file the spec names (a digest of its bytes), this executable (a digest of its file:
// any rebuild that changes the code measures again), the runtime (LibTorch's version, threads,
// BLAS, CUDA), the device as named, autocast, the chunk count of the menus, the link assumed,
// whether times were measured and whether bytes were extrapolated. A profile is used only where
// all of them are equal, and its stages equal the model's as built now; one kept for the model
// under another setting is measured again, and the progress says which part differs. Each entry
// carries a digest of its text (core/plan/profile_text.h): a file edited by hand is set aside
// whole. The file is written whole (core/base/files.h) each time a profile is added.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/plan/profile.h"
#include "core/plan/profile_text.h"
#include "core/run/workload.h"
#include "experiments/progress.h"

namespace ckpt {

// What a profile measured under `options`, its bytes extrapolated from smaller sizes or not,
// depends on besides its model, in one line; empty when this executable cannot be read to digest
// (then nothing is kept).
std::string ProfileSetting(const WorkloadOptions& options, bool extrapolate);

class KeptProfiles {
 public:
  // The file's name in the output folder.
  static constexpr char kFile[] = "profiles.txt";

  // The profiles at `path` (none when it does not exist) for runs of `setting`. A file that
  // cannot be read as profiles is no error: note() says why, and the first Keep replaces it.
  static KeptProfiles Open(std::string path, std::string setting);

  // The profile kept for `model` under this setting, if any.
  std::optional<ModelProfile> Find(const BoundModel& model) const;
  // Where one was kept for `model` under another setting: the parts of this setting that differ
  // ("extrapolated no"); else "".
  std::string OtherSetting(const BoundModel& model) const;
  // Keeps `profile` for `model` (in place of one kept for it before) and writes the file. A file
  // that cannot be written (a full disk) is said on `progress`, and the run goes on: its rows
  // matter more than what would spare a later run the profiling.
  void Keep(const BoundModel& model, const ModelProfile& profile, Progress& progress);

  const std::string& path() const { return path_; }
  // Why the file's profiles were set aside, or "".
  const std::string& note() const { return note_; }

 private:
  KeptProfiles(std::string path, std::string setting)
      : path_(std::move(path)), setting_(std::move(setting)) {}
  std::string Key(const BoundModel& model) const;

  std::string path_;
  std::string setting_;
  std::vector<KeyedProfile> entries_;
  std::string note_;
};

}  // namespace ckpt
