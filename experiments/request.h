// The sweep's request: what its flags ask for, each value parsed once and checked before anything
// runs, and what follows from it (the record a --resume must match, what the ranks must agree on,
// the files written, the run described). The flags themselves are read in the main
// (experiments/sweep_main.cc); everything here takes their values.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dist/data_parallel.h"
#include "core/plan/device_model.h"
#include "core/plan/states.h"
#include "core/run/device.h"
#include "core/run/memory_meter.h"
#include "experiments/output/output_folder.h"
#include "experiments/output/report.h"
#include "experiments/predict.h"
#include "experiments/presets.h"
#include "experiments/sweep.h"
#include "experiments/training.h"

namespace ckpt {

// Errors travel as absl::Status to the sweep's Main, which alone ends the process. Bad input,
// refused before anything is measured or written, is marked so and ends with exit status 2;
// every other error with 1.
absl::Status BadInput(absl::Status status);
int ExitStatusOf(const absl::Status& status);  // 0 for OK

// The items of a comma-separated list, each stripped of surrounding white space.
std::vector<std::string> SplitList(const std::string& text);

// A size flag, --`flag` (--memory_cap, --device_memory): none for "", else a size of at least
// `least` bytes (ParseByteSize: "16GiB", "512MiB", bytes); InvalidArgument after "--`flag`=".
absl::StatusOr<std::optional<int64_t>> ParseSize(absl::string_view flag, const std::string& text,
                                                 int64_t least = 0);

// The rate flag --`flag`: bytes per second, kept whole (run.csv records it), 0 for "";
// InvalidArgument naming the flag and text for anything but a positive size with "/s"
// ("25GB/s"). ParseLinkBandwidth is --link_bandwidth's.
absl::StatusOr<int64_t> ParseRate(absl::string_view flag, const std::string& text);
absl::StatusOr<int64_t> ParseLinkBandwidth(const std::string& text);

// --budgets: sizes in bytes (ParseByteSize), in order, none for ""; InvalidArgument naming the
// item.
absl::StatusOr<std::vector<int64_t>> ParseBudgets(const std::string& text);

// --depths: distinct integers >= 1, in order, none for ""; InvalidArgument naming the item.
absl::StatusOr<std::vector<int>> ParseDepths(const std::string& text);

// The modes that do less than a sweep (--list, --predict, --report_only, --explain) use some
// flags only: InvalidArgument naming the first flag in `given` that the first mode given does
// not use, and those it does, so that no flag is silently ignored in any mode.
absl::Status CheckFlagsOfMode(const std::set<std::string>& given);

// What the flags ask for, parsed and checked, before anything runs.
struct Request {
  bool list = false;
  SweepOptions options;  // models and strategies bound
  TrainingOptions training;
  std::vector<int> depths;
  ComputeThreads threads;  // as asked
  FolderUse use = FolderUse::kNew;
  std::string out;  // --out: the output folder, "" for a new one under results/
  bool explain = false;
  bool predict = false;
  std::vector<PublishedSaving> published;  // the preset's figures, beside --predict's
  // --predict: the state's layout over the ranks the prediction is for (--states, --world_size,
  // --collective_bandwidth); not the ranks this run starts.
  StatesSetting states;
  // --predict: the card's memory the answer is for (--device_memory), if given.
  std::optional<int64_t> device_memory;
  // --predict: bytes extrapolated from smaller sizes where they can be (--extrapolate).
  bool extrapolate = true;
  // --predict: the device model whose times the step takes (--device_model), or none: this
  // machine's.
  const DeviceModel* device_model = nullptr;
  // The ranks running, and this process's place among them: a launcher's environment's
  // (`launched`), or rank 0 of --nproc's, which starts the others and meets them in a folder
  // made in `temp_parent`; rank 0 of 1 for one process. The backend is ChooseBackend's. (What
  // --predict assumes is `states`, not this.)
  Rendezvous ranks;
  bool launched = false;
  std::string temp_parent;              // with ranks to start: $TMPDIR (or /tmp), where they meet
  std::string device_asked;             // --device as given: each rank resolves it to its own GPU
  std::vector<std::string> plan_files;  // the plan files the strategies read, with digests
  std::string command;                  // as the reports record it
  // The command line as given: the ranks --nproc starts run it again.
  std::vector<std::string> arguments;
};

// Where the ranks --nproc starts meet: a folder made in $TMPDIR, or /tmp. Checked before anything
// is written: InvalidArgument naming it when it is not a folder this process can make files in.
absl::StatusOr<std::string> TempParent();

// The device's meter and the compute threads, set up as the request asks.
struct Machine {
  MemoryMeter* meter = nullptr;
  ComputeThreads threads;  // as they run
  // Every tensor of the run within this (CPU: nine tenths of the memory available at
  // start-up), so that a model too large for the machine is an oom row, not a process the
  // kernel kills.
  std::optional<int64_t> standing_cap;
};

// What changes the rows besides their models and strategies: a --resume must match it.
RunRecord RecordOf(const Request& request, const Machine& machine);

// What every rank must have been started with alike, compared when they meet: the record a
// --resume matches (the device as asked: ranks asked alike each resolve it to a GPU of their
// own), and what the rows are of.
std::string ConfigurationOf(const Request& request, const Machine& machine);

// The files a run of `request` writes in its folder.
std::vector<std::string> OutputsOf(const Request& request);

// The report's account of where and how it ran: for --report_only, the caps and copies that
// `folder`'s run.csv records.
RunInfo DescribeRun(const Request& request, const Machine& machine, const OutputFolder& folder);

}  // namespace ckpt
