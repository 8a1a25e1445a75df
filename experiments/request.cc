#include "experiments/request.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/base/bytes.h"
#include "core/base/files.h"
#include "core/plan/spec.h"

namespace ckpt {
namespace {

// A mode that does less than a sweep, and the flags it uses: any other flag given with it is
// refused (exit 2), so that no flag is silently ignored in any mode.
struct Mode {
  const char* flag;
  const char* why;  // "--predict runs no step": why the other flags cannot go with it
  std::vector<std::string> uses;
};

// The first of these whose flag is given decides the mode; with none, the sweep uses every flag.
const std::vector<Mode>& ModesThatDoLess() {
  static const auto* modes = new std::vector<Mode>{
      {"list", "--list prints what this build offers and exits", {}},
      {"predict",
       "--predict runs no step",
       {"preset", "models", "strategies", "budgets", "link_bandwidth", "device", "seed", "threads",
        "blas_threads", "out", "amp", "states", "world_size", "collective_bandwidth",
        "device_memory", "extrapolate", "device_model"}},
      {"report_only",
       "--report_only runs nothing",
       {"preset", "models", "strategies", "budgets", "out"}},
      {"explain",
       "--explain prints plans and exits",
       {"preset", "models", "strategies", "budgets", "link_bandwidth", "device", "seed", "threads",
        "blas_threads", "amp"}},
  };
  return *modes;
}

// The caps in force, in words, for the report.
std::string DescribeCaps(std::optional<int64_t> measured, std::optional<int64_t> standing) {
  // Exact, as --memory_cap takes it ("16GiB", "1000 bytes"), and in GiB beside it past 1 GiB.
  auto gib = [](int64_t bytes) {
    std::string exact = FormatByteSize(bytes);
    if (exact == absl::StrCat(bytes)) exact += " bytes";
    constexpr int64_t kGib = int64_t{1} << 30;
    return bytes < kGib || bytes % kGib == 0 ? exact
                                             : absl::StrCat(exact, " (", FormatSize(bytes), ")");
  };
  std::string out = measured.has_value()
                        ? absl::StrCat("each configuration's steps capped at ", gib(*measured),
                                       " of live tensors (--memory_cap)")
                        : "no --memory_cap";
  if (standing.has_value()) {
    absl::StrAppend(&out, "; every tensor of the run within ", gib(*standing),
                    " (nine tenths of the memory available at start-up), so that a model too "
                    "large for this machine is an oom row");
  }
  return out;
}

// The caps the rows of a folder were measured under, from its record (--report_only).
std::string DescribeRecordedCaps(const std::optional<RunRecord>& record) {
  if (record.has_value()) {
    for (const auto& [setting, value] : *record) {
      int64_t bytes = 0;
      if (setting == "memory_cap" && absl::SimpleAtoi(value, &bytes)) {
        return absl::StrCat(DescribeCaps(bytes, std::nullopt), ", as run.csv records");
      }
      if (setting == "memory_cap") return "no --memory_cap, as run.csv records";
    }
  }
  return "the caps of the run are not recorded";
}

// Where the offload copies' times come from, in words, from the run.csv setting RecordOf writes.
std::string DescribeCopies(absl::string_view link_bandwidth) {
  int64_t rate = 0;
  if (absl::ConsumeSuffix(&link_bandwidth, "B/s") && absl::SimpleAtoi(link_bandwidth, &rate) &&
      rate > 0) {
    return absl::StrFormat(
        "an assumed link of %.1f GB/s each way, beside the compute: predicted step times of "
        "offloading plans are for that link, not measured on this device",
        rate / 1e9);
  }
  return "measured on this device (the profile's copy rates; on a GPU, copies on a stream of "
         "their own beside the compute; on a CPU, memory copies that the step waits for)";
}

constexpr char kBadInput[] = "ckptlab.sweep/bad-input";

}  // namespace

absl::Status BadInput(absl::Status status) {
  status.SetPayload(kBadInput, absl::Cord("exit 2"));
  return status;
}

int ExitStatusOf(const absl::Status& status) {
  if (status.ok()) return 0;
  return status.GetPayload(kBadInput).has_value() ? 2 : 1;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    items.emplace_back(absl::StripAsciiWhitespace(item));
  }
  return items;
}

absl::StatusOr<std::optional<int64_t>> ParseSize(absl::string_view flag, const std::string& text,
                                                 int64_t least) {
  if (text.empty()) return std::optional<int64_t>();
  absl::StatusOr<int64_t> bytes = ParseByteSize(text);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", bytes.status().message()));
  }
  if (*bytes < least) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", text, " is not accepted; accepted: a size of at least ",
                     least, " bytes (24GiB, 512MiB, 1000)"));
  }
  return std::optional<int64_t>(*bytes);
}

absl::StatusOr<int64_t> ParseRate(absl::string_view flag, const std::string& text) {
  if (text.empty()) return 0;
  absl::string_view size = text;
  absl::StatusOr<int64_t> bytes = absl::ConsumeSuffix(&size, "/s")
                                      ? ParseByteSize(size)
                                      : absl::InvalidArgumentError("a rate needs its '/s'");
  if (!bytes.ok() || *bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", text,
                     " is not a rate; accepted: a positive size per second (25GB/s, 12GiB/s)"));
  }
  return *bytes;
}

absl::StatusOr<int64_t> ParseLinkBandwidth(const std::string& text) {
  return ParseRate("link_bandwidth", text);
}

absl::StatusOr<std::vector<int>> ParseDepths(const std::string& text) {
  std::vector<int> depths;
  if (text.empty()) return depths;
  for (const std::string& item : SplitList(text)) {
    int depth = 0;
    if (!absl::SimpleAtoi(item, &depth) || depth < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--depths: '", item, "' is not accepted; accepted: integers >= 1, e.g. 4,8,16,32"));
    }
    if (std::find(depths.begin(), depths.end(), depth) != depths.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--depths lists ", depth, " twice; accepted: each depth once"));
    }
    depths.push_back(depth);
  }
  return depths;
}

absl::StatusOr<std::vector<int64_t>> ParseBudgets(const std::string& text) {
  std::vector<int64_t> budgets;
  if (text.empty()) return budgets;
  for (const std::string& item : SplitList(text)) {
    absl::StatusOr<int64_t> bytes = ParseByteSize(item);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--budgets: '", item,
                       "' is not accepted; accepted: sizes in bytes, e.g. 8MiB,16MiB,1.5GiB"));
    }
    budgets.push_back(*bytes);
  }
  return budgets;
}

absl::Status CheckFlagsOfMode(const std::set<std::string>& given) {
  for (const Mode& mode : ModesThatDoLess()) {
    if (!given.count(mode.flag)) continue;
    for (const std::string& flag : given) {
      if (flag == mode.flag ||
          std::find(mode.uses.begin(), mode.uses.end(), flag) != mode.uses.end()) {
        continue;
      }
      std::vector<std::string> accepted;
      for (const std::string& use : mode.uses) accepted.push_back(absl::StrCat("--", use));
      return absl::InvalidArgumentError(
          absl::StrCat(mode.why, ", so --", flag, " cannot go with it; accepted with --", mode.flag,
                       ": ", accepted.empty() ? "no other flag" : absl::StrJoin(accepted, ", ")));
    }
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TempParent() {
  const char* tmp = std::getenv("TMPDIR");
  const std::string parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  struct stat st {};
  std::string why;
  if (::stat(parent.c_str(), &st) != 0) {
    why = std::strerror(errno);
  } else if (!S_ISDIR(st.st_mode)) {
    why = absl::StrCat("it is ", DescribeWhatIsAt(parent));
  } else if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    why = std::strerror(errno);
  }
  if (why.empty()) return parent;
  return absl::InvalidArgumentError(
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? absl::StrCat("TMPDIR=", parent) : parent,
                   " cannot hold the folder the ranks meet in (", why,
                   "); accepted: TMPDIR naming a folder where this user can make files, or TMPDIR "
                   "unset (/tmp)"));
}

namespace {

// --link_bandwidth as run.csv records it: "25000000000B/s", or "measured".
std::string LinkSetting(const SweepOptions& o) {
  return o.link_bytes_per_s > 0 ? absl::StrCat(o.link_bytes_per_s, "B/s") : "measured";
}

}  // namespace

RunRecord RecordOf(const Request& r, const Machine& m) {
  const SweepOptions& o = r.options;
  RunRecord record = {
      {"device", o.device.str()},
      {"memory_cap", o.memory_cap.has_value() ? absl::StrCat(*o.memory_cap) : "none"},
      {"steps", absl::StrCat(o.steps)},
      {"warmup", absl::StrCat(o.warmup)},
      {"seed", absl::StrCat(o.seed)},
      {"threads", absl::StrCat(m.threads.intra_op)},
      {"blas_threads", m.threads.blas > 0 ? absl::StrCat(m.threads.blas) : "unknown"},
      {"train_steps", absl::StrCat(r.training.steps)},
      {"accumulate", absl::StrCat(r.training.accumulate)},
      {"amp", r.training.amp ? "true" : "false"},
      {"link_bandwidth", LinkSetting(o)},
      {"world_size", absl::StrCat(r.ranks.world_size)},
      {"plan_files", r.plan_files.empty() ? "none" : absl::StrJoin(r.plan_files, ";")},
      // What --predict predicts for (none for a run that steps: its ranks are world_size).
      {"states", r.predict ? StateLayoutName(r.states.layout) : "none"},
      {"states_world_size", r.predict ? absl::StrCat(r.states.world_size) : "none"},
      {"collective_bandwidth",
       !r.predict ? "none"
       : r.states.collective_bytes_per_ms > 0
           ? absl::StrCat(std::llround(r.states.collective_bytes_per_ms * 1000), "B/s")
           : "untimed"}};
  // The card --predict answers for; only a prediction's record has it, so that a sweep's is
  // what it was (and older folders still resume).
  if (r.predict) {
    record.emplace_back("device_memory",
                        r.device_memory.has_value() ? absl::StrCat(*r.device_memory) : "none");
    record.emplace_back("extrapolate", r.extrapolate ? "true" : "false");
    record.emplace_back("device_model", r.device_model != nullptr ? r.device_model->name : "none");
  }
  return record;
}

std::string ConfigurationOf(const Request& r, const Machine& m) {
  std::string text;
  for (const auto& [setting, value] : RecordOf(r, m)) {
    // The device as asked: on CUDA, ranks asked alike each resolve it to a GPU of their own.
    absl::StrAppend(&text, setting, "=", setting == "device" ? r.device_asked : value, "\n");
  }
  absl::StrAppend(&text, "dist_backend=", r.ranks.backend, "\n",
                  "models=", absl::StrJoin(SpecsOf(r.options.models), ","), "\n",
                  "strategies=", absl::StrJoin(SpecsOf(r.options.strategies), ","), "\n",
                  "depths=", absl::StrJoin(r.depths, ","), "\n",
                  "time_limit_s=", r.options.time_limit_s, "\n");
  return text;
}

std::vector<std::string> OutputsOf(const Request& r) {
  if (r.predict) return {"run.csv", "predict.csv", "predict.md", "profiles.txt"};
  std::vector<std::string> out = {"report.md", "pareto.dat", "pareto.gp", "pareto.png"};
  if (r.use != FolderUse::kReportOnly) {
    out.insert(out.begin(), {"results.csv", "run.csv", "profiles.txt"});
  }
  if (!r.depths.empty()) out.insert(out.end(), {"depth.csv", "depth.dat", "depth.gp", "depth.png"});
  if (r.training.steps > 0) {
    out.insert(out.end(), {"losses.csv", "loss.dat", "loss.gp", "loss.png"});
  }
  return out;
}

RunInfo DescribeRun(const Request& request, const Machine& machine, const OutputFolder& folder) {
  const SweepOptions& options = request.options;
  const bool report_only = request.use == FolderUse::kReportOnly;
  RunInfo info;
  info.runtime = DescribeRuntime();
  info.meter = machine.meter->Describe();
  info.cap = report_only ? DescribeRecordedCaps(folder.recorded())
                         : DescribeCaps(options.memory_cap, machine.standing_cap);
  // Said as run.csv records it (--amp), so that --report_only says what the run measured.
  auto precision = [](bool amp) {
    return amp ? std::string(
                     "every step and its profile under autocast (--amp: bfloat16 on CPU, "
                     "float16 on CUDA)")
               : std::string("the models' own dtype, float32");
  };
  if (!report_only) {
    info.copies = DescribeCopies(LinkSetting(options));
    info.precision = precision(options.autocast.has_value());
  }
  if (report_only && folder.recorded().has_value()) {  // else not said: not recorded
    for (const auto& [setting, value] : *folder.recorded()) {
      if (setting == "link_bandwidth") info.copies = DescribeCopies(value);
      if (setting == "amp") info.precision = precision(value == "true");
    }
  }
  info.command = request.command;
  return info;
}

}  // namespace ckpt
