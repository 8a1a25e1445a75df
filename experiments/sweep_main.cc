// bazel run //experiments:sweep -- [--preset=quick|paper] [--models=SPEC,...]
//     [--strategies=SPEC,...] [--device=auto|cpu|cuda] [--steps=N] [--warmup=N] [--threads=N]
//     [--out=DIR] [--resume] [--memory_cap=BYTES|16GiB] [--budgets=SIZE,...] [--depths=4,8,16,32]
//     [--train_steps=N [--accumulate=K] [--amp]] [--seed=N] [--time_limit_s=S] [--explain]
//     [--list] [--report_only]
//
// Runs every model x strategy, checks each strategy's gradients against store_all's, appends
// one row per configuration to DIR/results.csv as each model finishes, and at the end writes
// DIR/report.md and the plots (pareto.png; depth.png with --depths). --report_only writes
// the report and plots from the results.csv already in --out (a sweep that was killed never
// wrote them) and runs nothing. Bad input is a one-line error naming the value and the
// accepted ones, exit status 2, and nothing written.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/chain_model.h"
#include "core/device.h"
#include "core/memory_meter.h"
#include "core/memory_model.h"
#include "core/profiler.h"
#include "core/status_macros.h"
#include "core/strategy.h"
#include "core/torch_status.h"
#include "core/workload.h"
#include "experiments/command_line.h"
#include "experiments/presets.h"
#include "experiments/report.h"
#include "experiments/results_csv.h"
#include "experiments/sweep.h"
#include "experiments/training.h"

ABSL_FLAG(std::string, preset, "quick",
          "quick (CPU-sized, the default) or paper (the classic sizes); --models and "
          "--strategies override its lists");
ABSL_FLAG(std::string, models, "", "comma-separated model specs (see --list)");
ABSL_FLAG(std::string, strategies, "",
          "comma-separated strategy specs (see --list); store_all always runs as the reference");
ABSL_FLAG(std::string, device, "auto", "auto (CUDA if available), cpu, cuda or cuda:N");
ABSL_FLAG(int, steps, 10, "timed training steps per configuration");
ABSL_FLAG(int, warmup, 2, "untimed steps per configuration before timing");
ABSL_FLAG(std::string, threads, "1",
          "LibTorch's intra-op threads (elementwise work): an integer or auto (the usable cores)");
ABSL_FLAG(std::string, blas_threads, "auto",
          "OpenBLAS's threads (the matrix products): an integer or auto (the usable cores)");
ABSL_FLAG(std::string, out, "",
          "output directory (default: results/sweep-<timestamp> in the workspace)");
ABSL_FLAG(bool, resume, false,
          "continue the results.csv in --out: models whose rows are all there are skipped");
ABSL_FLAG(std::string, memory_cap, "",
          "cap on tensor memory: bytes, or with a unit (16GiB, 512MiB); configurations past it "
          "are oom rows");
ABSL_FLAG(std::string, budgets, "",
          "peak budgets above the baseline (e.g. 8MiB,16MiB): every strategy that plans to a "
          "budget (optimal, uniform, revolve) also runs at each; the Pareto plot draws their "
          "frontiers");
ABSL_FLAG(std::string, depths, "",
          "also scan activation bytes over these depths (e.g. 4,8,16,32): depth.csv, depth.png");
ABSL_FLAG(int, train_steps, 0,
          "also train every model under every strategy for this many AdamW steps and compare "
          "the loss curves with store_all's (losses.csv, loss.png)");
ABSL_FLAG(int, accumulate, 1, "with --train_steps: micro-batches per optimizer step");
ABSL_FLAG(bool, amp, false,
          "with --train_steps: mixed precision (bfloat16 autocast on CPU; float16 with dynamic "
          "loss scaling on CUDA)");
ABSL_FLAG(double, time_limit_s, 0,
          "wall-clock budget in seconds (0: none): once spent, no further model starts (the "
          "first always does), training and the depth scan are skipped, and the report says "
          "what is missing; --resume continues");
ABSL_FLAG(uint64_t, seed, 0, "seed for parameters, batches and dropout");
ABSL_FLAG(bool, explain, false, "print each strategy's plan for each model, then exit");
ABSL_FLAG(bool, list, false, "list the presets, strategies and models, then exit");
ABSL_FLAG(bool, report_only, false,
          "run nothing: write report.md and the plots from the results.csv already in --out "
          "(a sweep that was killed, say); give the sweep's --models/--preset so the report "
          "can say which models have no rows");

namespace ckpt {
namespace {

[[noreturn]] void Die(const absl::Status& status) {
  std::fprintf(stderr, "sweep: %s\n", std::string(status.message()).c_str());
  std::exit(2);
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    items.emplace_back(absl::StripAsciiWhitespace(item));
  }
  return items;
}

absl::StatusOr<std::optional<int64_t>> ParseCap(const std::string& text) {
  if (text.empty()) return std::optional<int64_t>();
  absl::StatusOr<int64_t> bytes = ParseByteSize(text);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--memory_cap=", bytes.status().message()));
  }
  return std::optional<int64_t>(*bytes);
}

absl::StatusOr<std::vector<int64_t>> ParseBudgets(const std::string& text) {
  std::vector<int64_t> budgets;
  if (text.empty()) return budgets;
  for (const std::string& item : SplitList(text)) {
    absl::StatusOr<int64_t> bytes = ParseByteSize(item);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--budgets: ", bytes.status().message()));
    }
    budgets.push_back(*bytes);
  }
  return budgets;
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
    depths.push_back(depth);
  }
  return depths;
}

// Takes an exclusive lock on the folder `dir` for the rest of the process (flock on the folder
// itself, so nothing is written into it): Unavailable when another sweep holds it.
absl::Status LockFolder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("--out='", dir, "' cannot be opened: ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    return error == EWOULDBLOCK
               ? absl::UnavailableError(absl::StrCat(
                     "another sweep is using --out='", dir,
                     "' now; wait for it to finish (then --resume), or pass another --out"))
               : absl::PermissionDeniedError(
                     absl::StrCat("--out='", dir, "' cannot be locked: ", std::strerror(error)));
  }
  return absl::OkStatus();  // the descriptor stays open, and the lock with it
}

// The caps in force, in words, for the report.
std::string DescribeCaps(std::optional<int64_t> measured, std::optional<int64_t> standing) {
  auto gib = [](int64_t bytes) { return absl::StrFormat("%.2f GiB", bytes / double(1 << 30)); };
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

std::string DefaultOutDir() {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return absl::StrCat(workspace != nullptr ? workspace : ".", "/results/sweep-", stamp);
}

// Prints each strategy's plan for each model (--explain) as a tree, with its predicted memory.
absl::Status Explain(const SweepOptions& options, MemoryMeter& meter) {
  for (const std::string& model_spec : options.models) {
    WorkloadOptions workload_options;
    workload_options.device = options.device;
    workload_options.seed = options.seed;
    ASSIGN_OR_RETURN(Workload workload, Workload::Build(model_spec, workload_options));
    ASSIGN_OR_RETURN(const ModelProfile* measured, workload.Profile(meter));
    ModelProfile profile = *measured;
    std::printf("%s (%d stages)\n", profile.model.c_str(), profile.num_stages());
    for (const std::string& strategy_spec : StrategyOrder(options.strategies)) {
      absl::StatusOr<PlannedRun> run = workload.Plan(strategy_spec, profile, meter);
      if (!run.ok()) {
        std::printf("  %s: %s\n", strategy_spec.c_str(),
                    std::string(run.status().message()).c_str());
        continue;
      }
      std::printf(
          "  %s: %s\n    predicted: %.2f MiB of activations after forward, peak %.2f "
          "MiB above the baseline; %lld stage forwards rerun in backward\n",
          run->plan.strategy.c_str(), run->plan.summary.c_str(),
          run->predicted.activation_bytes / 1048576.0, run->predicted.peak_bytes / 1048576.0,
          static_cast<long long>(run->plan.RecomputedStages()));
      for (absl::string_view line :
           absl::StrSplit(run->plan.DescribeTree(profile.stages), '\n', absl::SkipEmpty())) {
        std::printf("    %s\n", std::string(line).c_str());
      }
    }
  }
  return absl::OkStatus();
}

// The (model, strategy) pairs, as given, of results.csv's rows.
std::set<std::pair<std::string, std::string>> PairsOf(const std::vector<ResultRow>& rows) {
  std::set<std::pair<std::string, std::string>> pairs;
  for (const ResultRow& r : rows) pairs.emplace(r.at("model_arg"), r.at("strategy_arg"));
  return pairs;
}

// The models of `options` that lack a row for some strategy (a time limit left them out).
std::vector<std::string> MissingModels(const SweepOptions& options,
                                       const std::vector<ResultRow>& rows) {
  const std::set<std::pair<std::string, std::string>> present = PairsOf(rows);
  std::vector<std::string> missing;
  for (const std::string& model : options.models) {
    if (!HasEveryRow(model, options.strategies, present)) missing.push_back(model);
  }
  return missing;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "runs every model x strategy and writes results.csv, report.md and plots; see "
      "README.md.\n  bazel run //experiments:sweep -- --models=heavy_mlp:depth=40 "
      "--strategies=store_all,uniform");
  const ParsedCommandLine parsed = ParseCommandLineOrExit(argc, argv, "sweep");
  if (!parsed.positional.empty()) {
    Die(absl::InvalidArgumentError(absl::StrCat("unexpected argument '", parsed.positional[0],
                                                "'; flags are --name=value (see --help)")));
  }
  for (const auto& [name, flag] :
       {std::pair<const char*, std::string>{"models", absl::GetFlag(FLAGS_models)},
        {"strategies", absl::GetFlag(FLAGS_strategies)}}) {
    if (parsed.given.count(name) && flag.empty()) {
      Die(absl::InvalidArgumentError(absl::StrCat(
          "--", name, "= is empty; accepted: comma-separated specs (see --list), or no --", name,
          " for the preset's")));
    }
  }

  if (absl::GetFlag(FLAGS_list)) {
    std::printf("presets: %s\n\nstrategies:\n%s\nmodels:\n%s",
                absl::StrJoin(PresetNames(), ", ").c_str(), Strategies().Describe().c_str(),
                Models().Describe().c_str());
    return 0;
  }

  // Everything is checked before anything is written or any tensor is made.
  absl::StatusOr<Preset> preset = FindPreset(absl::GetFlag(FLAGS_preset));
  if (!preset.ok()) Die(preset.status());
  SweepOptions options;
  options.models =
      absl::GetFlag(FLAGS_models).empty() ? preset->models : SplitList(absl::GetFlag(FLAGS_models));
  options.strategies = absl::GetFlag(FLAGS_strategies).empty()
                           ? preset->strategies
                           : SplitList(absl::GetFlag(FLAGS_strategies));
  absl::StatusOr<std::vector<int64_t>> budgets = ParseBudgets(absl::GetFlag(FLAGS_budgets));
  if (!budgets.ok()) Die(budgets.status());
  absl::StatusOr<std::vector<std::string>> with_budgets = WithBudgets(options.strategies, *budgets);
  if (!with_budgets.ok()) Die(with_budgets.status());
  options.strategies = *with_budgets;
  options.steps = absl::GetFlag(FLAGS_steps);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.time_limit_s = absl::GetFlag(FLAGS_time_limit_s);
  if (absl::Status s = ValidateSweep(options); !s.ok()) Die(s);
  absl::StatusOr<std::optional<int64_t>> cap = ParseCap(absl::GetFlag(FLAGS_memory_cap));
  if (!cap.ok()) Die(cap.status());
  absl::StatusOr<std::vector<int>> depths = ParseDepths(absl::GetFlag(FLAGS_depths));
  if (!depths.ok()) Die(depths.status());
  if (!depths->empty()) {
    for (const std::string& model : options.models) {
      if (absl::Status s = DepthScanModels(model, *depths).status(); !s.ok()) Die(s);
    }
  }
  TrainingOptions training;
  training.steps = absl::GetFlag(FLAGS_train_steps);
  training.accumulate = absl::GetFlag(FLAGS_accumulate);
  training.amp = absl::GetFlag(FLAGS_amp);
  if (training.steps == 0 && (training.accumulate != 1 || training.amp)) {
    Die(absl::InvalidArgumentError(
        absl::StrCat(training.amp ? "--amp" : absl::StrCat("--accumulate=", training.accumulate),
                     " applies to training, which runs only with --train_steps=N (N >= 1)")));
  }
  if (training.steps != 0) {
    if (absl::Status s = ValidateTraining(training); !s.ok()) Die(s);
  }
  const bool report_only = absl::GetFlag(FLAGS_report_only);
  if (report_only && (training.steps != 0 || !depths->empty() || absl::GetFlag(FLAGS_explain))) {
    Die(absl::InvalidArgumentError(absl::StrCat("--report_only runs nothing, so ",
                                                training.steps != 0 ? "--train_steps"
                                                : !depths->empty()  ? "--depths"
                                                                    : "--explain",
                                                " cannot go with it")));
  }
  absl::StatusOr<int> intra_op = ParseThreadCount("--threads", absl::GetFlag(FLAGS_threads));
  if (!intra_op.ok()) Die(intra_op.status());
  absl::StatusOr<int> blas = ParseThreadCount("--blas_threads", absl::GetFlag(FLAGS_blas_threads));
  if (!blas.ok()) Die(blas.status());
  const ComputeThreads threads{*intra_op, *blas};
  if (absl::Status s = SetComputeThreads(threads); !s.ok()) Die(s);
  if (threads.intra_op > 1 && threads.blas > 1 && std::getenv("OMP_WAIT_POLICY") == nullptr) {
    std::fprintf(stderr,
                 "sweep: note: LibTorch's OpenMP threads spin between parallel regions and "
                 "contend with OpenBLAS's; with --threads=%d export OMP_WAIT_POLICY=PASSIVE "
                 "(README, Performance)\n",
                 threads.intra_op);
  }
  absl::StatusOr<c10::Device> device = ResolveDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) Die(device.status());
  options.device = *device;
  absl::StatusOr<MemoryMeter*> meter = MemoryMeterFor(options.device);
  if (!meter.ok()) Die(meter.status());
  // --memory_cap applies to each configuration's own steps (RunSweep). Under it, and under
  // everything else the sweep does, the CPU's tensors stay within the memory this machine had
  // available at start-up (less a tenth for everything that is not a tensor), so that a model
  // too large for the machine is an oom row, not a process the kernel kills.
  if (absl::Status s = (*meter)->SetCap(*cap); !s.ok()) Die(s);  // checks it on this device
  options.memory_cap = *cap;
  std::optional<int64_t> standing_cap;
  if (options.device.is_cpu() && AvailableMemoryBytes().has_value()) {
    standing_cap = *AvailableMemoryBytes() / 10 * 9;
  }
  if (absl::Status s = (*meter)->SetCap(standing_cap); !s.ok()) Die(s);

  if (absl::GetFlag(FLAGS_explain)) {
    if (absl::Status s = Explain(options, **meter); !s.ok()) Die(s);
    return 0;
  }

  const std::string out_dir =
      absl::GetFlag(FLAGS_out).empty() ? DefaultOutDir() : absl::GetFlag(FLAGS_out);
  const std::string csv_path = out_dir + "/results.csv";
  // The folder is created if need be and locked for this run, and only then is results.csv
  // looked at: two sweeps on one folder would otherwise both find it absent and truncate each
  // other's rows, or both resume it and add the same rows twice.
  std::error_code ec;
  const bool dir_existed = std::filesystem::exists(out_dir, ec);
  if (dir_existed && !std::filesystem::is_directory(out_dir, ec)) {
    Die(absl::InvalidArgumentError(
        absl::StrCat("--out='", out_dir, "' is a file; accepted: a folder, new or a sweep's")));
  }
  if (report_only && !dir_existed) {
    Die(absl::NotFoundError(absl::StrCat("--report_only: no results.csv in --out='", out_dir,
                                         "'; give the folder of the sweep to report on")));
  }
  if (!dir_existed) {
    std::filesystem::create_directories(out_dir, ec);
    if (ec) {
      Die(absl::PermissionDeniedError(
          absl::StrCat("--out='", out_dir, "' cannot be created: ", ec.message())));
    }
  }
  if (absl::Status s = LockFolder(out_dir); !s.ok()) Die(s);
  const bool exists = std::filesystem::exists(csv_path, ec);
  if (report_only && !exists) {
    Die(absl::NotFoundError(absl::StrCat("--report_only: no results.csv in --out='", out_dir,
                                         "'; give the folder of the sweep to report on")));
  }
  if (exists && !absl::GetFlag(FLAGS_resume) && !report_only) {
    Die(absl::AlreadyExistsError(
        absl::StrCat(csv_path, " exists; pass --resume to continue it, or another --out")));
  }
  if (exists) {
    absl::StatusOr<std::vector<ResultRow>> done = ReadResults(csv_path);
    if (!done.ok()) Die(done.status());
    options.completed = PairsOf(*done);
  }
  std::optional<CsvAppender> csv;  // none with --report_only: results.csv is only read
  if (!report_only) {
    absl::StatusOr<CsvAppender> opened =
        exists ? CsvAppender::Append(csv_path) : CsvAppender::Create(csv_path);
    if (!opened.ok()) Die(opened.status());
    csv.emplace(*std::move(opened));
  }

  RunInfo info;
  info.runtime = DescribeRuntime();
  if (!report_only) {
    absl::StatusOr<double> gemm = MeasureGemmGflops(options.device);
    if (gemm.ok()) info.gemm_gflops = *gemm;
  }
  info.meter = (*meter)->Describe();
  info.cap = DescribeCaps(*cap, standing_cap);
  std::vector<std::string> command(argv, argv + argc);
  command[0] = "sweep";
  info.command = absl::StrJoin(command, " ");
  std::cerr << "sweep: " << info.runtime << "; memory: " << info.meter << "\n";
  if (!report_only) {
    absl::StatusOr<std::vector<ConfigResult>> results = RunSweep(
        options, **meter, [&](const ConfigResult& r) { return csv->Write(CsvRow(r, threads)); },
        std::cerr);
    if (!results.ok()) {
      std::fprintf(stderr, "sweep: %s\n", results.status().ToString().c_str());
      return 1;
    }
    std::printf("%s\n", FormatTable(*results).c_str());
  }

  absl::StatusOr<std::vector<ResultRow>> rows = ReadResults(csv_path);
  const std::vector<std::string> missing =
      rows.ok() ? MissingModels(options, *rows) : std::vector<std::string>();
  const bool complete = missing.empty();
  std::string appendix;
  if (report_only) {
    appendix = absl::StrCat("This report was written with --report_only from ", csv_path,
                            " as an earlier sweep left it; the machine and runtime above are "
                            "those of the report's run.\n\n");
  }
  if (!complete) {
    const std::string why =
        report_only ? "results.csv has no complete rows for "
                    : absl::StrCat("The time limit (--time_limit_s=", options.time_limit_s,
                                   ") was spent before ");
    absl::StrAppend(&appendix, "## Incomplete\n\n", why, missing.size(), " of ",
                    options.models.size(),
                    report_only ? " models: " : " models started: ", absl::StrJoin(missing, ", "),
                    ".", report_only ? "" : " Training and the depth scan were skipped.",
                    " Continue with the sweep's command and `--resume --out=", out_dir, "`.\n\n");
    std::fprintf(stderr,
                 "sweep: incomplete, %zu model(s) not run; continue with --resume --out=%s\n",
                 missing.size(), out_dir.c_str());
  }

  // Training, then the report and plots from every row of results.csv (a resumed sweep's
  // earlier ones too).
  bool curves_ok = true;
  if (training.steps > 0 && complete) {
    absl::StatusOr<std::vector<LossCurve>> curves =
        RunTraining(options, training, **meter, std::cerr);
    absl::Status s = curves.ok() ? WriteLossCurves(out_dir, *curves) : curves.status();
    if (!s.ok()) std::fprintf(stderr, "sweep: training: %s\n", std::string(s.message()).c_str());
    if (curves.ok()) {
      appendix += TrainingReport(training, *curves);
      for (const LossCurve& c : *curves) {
        curves_ok = curves_ok && !c.departs;
        if (c.strategy == "store_all" && c.status != "ok") {
          std::fprintf(stderr,
                       "sweep: training: store_all's curve of %s is %s (%s); the other curves "
                       "of the model were not compared\n",
                       c.model.c_str(), c.status.c_str(), c.message.c_str());
        }
      }
    }
  }
  // The plot first, so that the report can say why a picture is missing.
  absl::Status plot = rows.ok() ? WriteParetoPlot(out_dir, *rows) : rows.status();
  if (!plot.ok()) {
    appendix = absl::StrCat("pareto.png was not drawn: ", plot.message(),
                            ". `gnuplot pareto.gp` in this folder draws it.\n\n", appendix);
  }
  absl::Status report = rows.ok() ? WriteReport(out_dir, *rows, info, appendix) : rows.status();
  for (const absl::Status& s : {report, plot}) {
    if (!s.ok()) std::fprintf(stderr, "sweep: %s\n", std::string(s.message()).c_str());
  }
  if (!depths->empty() && complete) {
    absl::StatusOr<std::vector<DepthPoint>> points =
        RunDepthScan(options, *depths, **meter, std::cerr);
    absl::Status s = points.ok() ? WriteDepthPlot(out_dir, *points) : points.status();
    if (!s.ok()) std::fprintf(stderr, "sweep: depth scan: %s\n", std::string(s.message()).c_str());
  }
  std::printf("results: %s (results.csv, report.md, pareto.png%s%s)\n", out_dir.c_str(),
              depths->empty() || !complete ? "" : ", depth.csv, depth.png",
              training.steps > 0 && complete ? ", losses.csv, loss.png" : "");
  if (!curves_ok) std::fprintf(stderr, "sweep: a loss curve departs from store_all's\n");
  return report.ok() && curves_ok ? 0 : 1;
}

}  // namespace
}  // namespace ckpt

int main(int argc, char** argv) { return ckpt::Main(argc, argv); }
