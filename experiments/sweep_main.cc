// bazel run //experiments:sweep -- [--preset=quick|paper] [--models=SPEC,...]
//     [--strategies=SPEC,...] [--device=auto|cpu|cuda] [--steps=N] [--warmup=N] [--threads=N]
//     [--out=DIR] [--resume] [--memory_cap=BYTES|16GiB] [--budgets=SIZE,...] [--depths=4,8,16,32]
//     [--link_bandwidth=25GB/s] [--predict [--states=replicated|zero1|zero2|zero3]
//     [--world_size=N] [--collective_bandwidth=100GB/s] [--device_memory=24GiB]
//     [--extrapolate=true|false] [--device_model=h100|a100|l4]]
//     [--amp] [--train_steps=N [--accumulate=K]] [--seed=N] [--time_limit_s=S] [--nproc=N]
//     [--dist_backend=auto|gloo|nccl] [--explain] [--list] [--report_only]
//
// Runs every model x strategy, checks each strategy's gradients against store_all's, appends
// one row per configuration to DIR/results.csv as each model finishes, and at the end writes
// DIR/report.md and the plots (pareto.png; depth.png with --depths). --report_only writes
// the report and plots from the results.csv already in --out (a sweep that was killed never
// wrote them) and runs nothing.
//
// Data parallel: --nproc=N runs N ranks on this host, this process rank 0 (which alone writes
// the outputs) and N - 1 started from it; under a launcher's environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, as torchrun sets them) this process is one rank of that run. On
// CUDA each rank of a host takes its own GPU (LOCAL_RANK) unless --device names one, and the
// ranks reduce with NCCL, or Gloo through the host (--dist_backend). docs/data-parallel.md.
//
// Exit status: 0 when every output was written; 2 for bad input (a one-line error naming the
// value and the accepted ones, before anything is measured or written); 1 when an output
// could not be written (the file and the system's reason named; every file is written whole or
// not at all, core/base/files.h), a loss curve departs from store_all's, or a rank failed (named).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/dist/data_parallel.h"
#include "core/dist/launcher.h"
#include "core/plan/states.h"
#include "core/run/device.h"
#include "core/run/memory_meter.h"
#include "core/run/workload.h"
#include "experiments/command_line.h"
#include "experiments/modes.h"
#include "experiments/presets.h"
#include "experiments/ranks.h"
#include "experiments/request.h"
#include "experiments/sweep_options.h"
#include "experiments/training.h"
#include "strategies/plan_file.h"

ABSL_FLAG(std::string, preset, "quick",
          "quick (CPU-sized, the default) or paper (the classic sizes); --models and "
          "--strategies override its lists");
ABSL_FLAG(std::string, models, "", "comma-separated model specs (see --list)");
ABSL_FLAG(std::string, strategies, "",
          "comma-separated strategy specs (see --list); store_all always runs as the reference");
ABSL_FLAG(std::string, device, "auto", "auto (CUDA if available), cpu, cuda or cuda:N");
ABSL_FLAG(int, steps, 10,
          "timed training steps per configuration (not given: the preset's, quick 3, paper 10)");
ABSL_FLAG(int, warmup, 2,
          "untimed steps per configuration before timing (not given: the preset's, quick 1, "
          "paper 2)");
ABSL_FLAG(std::string, threads, "1",
          "LibTorch's intra-op threads (elementwise work): an integer or auto (OMP_NUM_THREADS "
          "where set, else the usable cores)");
ABSL_FLAG(std::string, blas_threads, "auto",
          "OpenBLAS's threads (the matrix products): an integer or auto (OPENBLAS_NUM_THREADS "
          "where set, else the usable cores)");
ABSL_FLAG(std::string, out, "",
          "output directory (default: results/sweep-<timestamp> in the workspace)");
ABSL_FLAG(bool, resume, false,
          "continue the results.csv in --out: models whose rows are all there are skipped");
ABSL_FLAG(std::string, memory_cap, "",
          "cap on tensor memory: bytes, or with a unit (16GiB, 512MiB); configurations past it "
          "are oom rows");
ABSL_FLAG(std::string, link_bandwidth, "",
          "assume offload copies run over a link of this rate each way, beside the compute "
          "(e.g. 25GB/s, a PCIe 4.0 x16 card), instead of measuring this device's copies: the "
          "time model and the planners use it, and the report marks such times as predicted");
ABSL_FLAG(std::string, states, "replicated",
          "with --predict: the training state's layout over --world_size ranks: replicated "
          "(DDP), zero1 (AdamW's moments sharded), zero2 (and the gradients), zero3 (and the "
          "parameters, gathered stage by stage; FSDP's full sharding)");
ABSL_FLAG(int, world_size, 1, "with --predict: the ranks the state is laid out over (--states)");
ABSL_FLAG(std::string, collective_bandwidth, "",
          "with --predict: the collectives' rate per rank (e.g. 100GB/s): the step time counts "
          "gradient reductions and zero3's parameter gathers, a rerun's gathers included, and "
          "planners weigh them; not given, collectives are not timed");
ABSL_FLAG(std::string, device_memory, "",
          "with --predict: the memory of the card the answer is for (e.g. 24GiB): each row says "
          "whether its total peak fits it with the allocator's margin, and every strategy that "
          "plans to a budget plans again to what the card leaves the step");
ABSL_FLAG(std::string, device_model, "",
          "with --predict: the card whose times the answer gives (h100, a100, l4): each stage's "
          "counted work priced on its model, and the planners plan with those times; not given, "
          "this machine's times");
ABSL_FLAG(bool, extrapolate, true,
          "with --predict: each model's bytes extrapolated exactly from profiles at smaller "
          "batches and sequences, checked on a held-out size, its times scaled from that size's; "
          "where a model cannot be, or false, measured at full size");
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
          "mixed precision: every step (measured, predicted, --predict's profile, training) "
          "under autocast, bfloat16 on CPU, float16 on CUDA (training scales the loss there)");
ABSL_FLAG(double, time_limit_s, 0,
          "wall-clock budget in seconds (0: none): once spent, no further model starts (the "
          "first always does), training and the depth scan are skipped, and the report says "
          "what is missing; --resume continues");
ABSL_FLAG(int, nproc, 1,
          "data parallel: run this many ranks on this host (Gloo over loopback), each on its own "
          "rows of every batch (a model's batch is per rank); bytes are per rank. Under a "
          "launcher's RANK/WORLD_SIZE this process is one rank, and --nproc, if given, must be "
          "WORLD_SIZE");
ABSL_FLAG(std::string, dist_backend, "auto",
          "data parallel: what the ranks reduce with: auto (CPU: gloo; CUDA: nccl where built, "
          "else gloo), gloo or nccl (CUDA only)");
ABSL_FLAG(uint64_t, seed, 0, "seed for parameters, batches and dropout");
ABSL_FLAG(bool, explain, false, "print each strategy's plan for each model, then exit");
ABSL_FLAG(bool, predict, false,
          "predict every strategy's memory and step time for each model at full size from a "
          "profile of a shallow copy (depth 2), running no step: predict.md and predict.csv");
ABSL_FLAG(bool, list, false, "list the presets, strategies and models, then exit");
ABSL_FLAG(bool, report_only, false,
          "run nothing: write report.md and the plots from the results.csv already in --out "
          "(a sweep that was killed, say); give the sweep's --models/--preset so the report "
          "can say which models have no rows");

namespace ckpt {
namespace {

// The command line as the reports record it, the program named "sweep".
std::string CommandOf(int argc, char** argv) {
  std::vector<std::string> command(argv, argv + argc);
  command[0] = "sweep";
  return absl::StrJoin(command, " ");
}

// Under `bazel run` the program starts in its runfiles: paths a user gives (--out, a plan file)
// mean what they mean in the user's own directory.
absl::Status EnterUserDirectory() {
  const char* user_dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (user_dir != nullptr && ::chdir(user_dir) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot enter ", user_dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// The data-parallel part of the request: --nproc, or a launcher's environment; then the
// device, which on CUDA is the rank's own, and the backend.
absl::Status ParseRanks(const ParsedCommandLine& parsed, Request& r) {
  constexpr int kMostRanks = 64;
  const int nproc = absl::GetFlag(FLAGS_nproc);
  if (nproc < 1 || nproc > kMostRanks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nproc=", nproc, " is not accepted; accepted: 1..", kMostRanks, " (ranks on this host)"));
  }
  ASSIGN_OR_RETURN(std::optional<Rendezvous> launched, RendezvousFromEnvironment());
  r.launched = launched.has_value();
  if (r.launched) {
    if (parsed.given.count("nproc") && nproc != launched->world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--nproc=", nproc, " but the environment sets WORLD_SIZE=", launched->world_size,
          "; accepted: --nproc equal to WORLD_SIZE, or no ", "--nproc under a launcher"));
    }
    r.ranks = *launched;
  } else {
    r.ranks.world_size = r.ranks.local_world_size = nproc;
    if (nproc > 1) {
      ASSIGN_OR_RETURN(r.temp_parent, TempParent());
    }
  }
  const bool ranks = r.ranks.world_size > 1 || r.launched;
  if (ranks && !HaveDataParallel()) {
    return absl::UnimplementedError(
        absl::StrCat("--nproc=", r.ranks.world_size, ": ", DataParallelUnavailableReason()));
  }
  r.device_asked = absl::GetFlag(FLAGS_device);
  ASSIGN_OR_RETURN(r.options.device, ResolveDevice(r.device_asked, r.ranks.local_rank));
  // The backend is checked whenever it is named, so that a script's mistake shows on one rank.
  const std::string backend = absl::GetFlag(FLAGS_dist_backend);
  if (ranks || parsed.given.count("dist_backend")) {
    absl::StatusOr<std::string> chosen = ChooseBackend(r.options.device, backend);
    if (!chosen.ok()) {
      return absl::Status(chosen.status().code(), absl::StrCat("--dist_backend=", backend, ": ",
                                                               chosen.status().message()));
    }
    if (ranks) r.ranks.backend = *chosen;
  }
  // NCCL refuses two ranks on one GPU: say so before the ranks start, not at their first
  // collective.
  const bool one_gpu_named = r.device_asked.find(':') != std::string::npos;  // cuda:N
  const int local_ranks = r.ranks.local_world_size;
  if (r.ranks.backend == "nccl" && local_ranks > 1 &&
      (one_gpu_named || local_ranks > VisibleGpus())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dist_backend=nccl needs a GPU per rank, and ", local_ranks, " ranks of this host ",
        one_gpu_named ? absl::StrCat("would share --device=", r.device_asked)
                      : absl::StrCat("would share its ", VisibleGpus(), " GPU(s)"),
        "; accepted: --dist_backend=gloo, or --device=cuda with at most one rank per GPU"));
  }
  // A launcher's ranks (no --nproc given) for a mode that runs no step.
  if (r.ranks.world_size > 1 && (r.predict || r.use == FolderUse::kReportOnly)) {
    return absl::InvalidArgumentError(
        absl::StrCat(r.predict ? "--predict runs no step" : "--report_only runs nothing",
                     ", so it takes no ranks: the environment sets WORLD_SIZE=", r.ranks.world_size,
                     "; accepted: one process, outside a launcher"));
  }
  return absl::OkStatus();
}

// The specs of a list flag, or the preset's when it is not given; InvalidArgument when it is
// given empty.
absl::StatusOr<std::vector<std::string>> SpecsFlag(const ParsedCommandLine& parsed,
                                                   const char* name, const std::string& value,
                                                   const std::vector<std::string>& preset) {
  if (!parsed.given.count(name)) return preset;
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", name,
                                                   "= is empty; accepted: comma-separated specs "
                                                   "(see --list), or no --",
                                                   name, " for the preset's"));
  }
  return SplitList(value);
}

// The request of the command line, every spec bound once and every value checked; its errors are
// bad input. The plan files the strategies name are read here, once for the whole run.
absl::StatusOr<Request> ReadRequest(const ParsedCommandLine& parsed) {
  if (!parsed.positional.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", parsed.positional[0],
                                                   "'; flags are --name=value (see --help)"));
  }
  RETURN_IF_ERROR(CheckFlagsOfMode(parsed.given));
  Request r;
  r.list = absl::GetFlag(FLAGS_list);
  if (r.list) return r;
  ASSIGN_OR_RETURN(const std::vector<std::string> model_texts,
                   SpecsFlag(parsed, "models", absl::GetFlag(FLAGS_models), {}));
  ASSIGN_OR_RETURN(const std::vector<std::string> strategy_texts,
                   SpecsFlag(parsed, "strategies", absl::GetFlag(FLAGS_strategies), {}));
  ASSIGN_OR_RETURN(const Preset preset, FindPreset(absl::GetFlag(FLAGS_preset)));
  if (preset.predict_only && !absl::GetFlag(FLAGS_predict)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--preset=", preset.name, " holds models no machine here can run; accepted: --preset=",
        preset.name, " with --predict"));
  }
  r.published = preset.published;
  SweepOptions& options = r.options;
  ASSIGN_OR_RETURN(options.models, BindModels(model_texts.empty() ? preset.models : model_texts));
  ASSIGN_OR_RETURN(const std::vector<int64_t> budgets, ParseBudgets(absl::GetFlag(FLAGS_budgets)));
  ASSIGN_OR_RETURN(const std::vector<BoundStrategy> strategies,
                   BindStrategies(strategy_texts.empty() ? preset.strategies : strategy_texts));
  ASSIGN_OR_RETURN(options.strategies, WithBudgets(strategies, budgets));
  options.steps = parsed.given.count("steps") ? absl::GetFlag(FLAGS_steps) : preset.steps;
  options.warmup = parsed.given.count("warmup") ? absl::GetFlag(FLAGS_warmup) : preset.warmup;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.time_limit_s = absl::GetFlag(FLAGS_time_limit_s);
  ASSIGN_OR_RETURN(options.memory_cap, ParseSize("memory_cap", absl::GetFlag(FLAGS_memory_cap)));
  ASSIGN_OR_RETURN(options.link_bytes_per_s,
                   ParseLinkBandwidth(absl::GetFlag(FLAGS_link_bandwidth)));
  RETURN_IF_ERROR(ValidateSweep(options));
  ASSIGN_OR_RETURN(r.depths, ParseDepths(absl::GetFlag(FLAGS_depths)));
  for (const BoundModel& model : options.models) {
    if (!r.depths.empty()) RETURN_IF_ERROR(DepthScanModels(model, r.depths).status());
  }
  TrainingOptions& training = r.training;
  training.steps = absl::GetFlag(FLAGS_train_steps);
  training.accumulate = absl::GetFlag(FLAGS_accumulate);
  training.amp = absl::GetFlag(FLAGS_amp);
  if (training.steps == 0 && training.accumulate != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--accumulate=", training.accumulate,
                     " applies to training, which runs only with --train_steps=N (N >= 1)"));
  }
  if (training.steps != 0) RETURN_IF_ERROR(ValidateTraining(training));
  r.explain = absl::GetFlag(FLAGS_explain);
  r.predict = absl::GetFlag(FLAGS_predict);
  for (const char* flag : {"states", "world_size", "collective_bandwidth", "device_memory",
                           "extrapolate", "device_model"}) {
    if (parsed.given.count(flag) && !r.predict) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " describes the training --predict predicts for; accepted: --",
                       flag, " with --predict"));
    }
  }
  ASSIGN_OR_RETURN(r.device_memory,
                   ParseSize("device_memory", absl::GetFlag(FLAGS_device_memory), 1));
  r.extrapolate = absl::GetFlag(FLAGS_extrapolate);
  if (const std::string name = absl::GetFlag(FLAGS_device_model); !name.empty()) {
    ASSIGN_OR_RETURN(r.device_model, FindDeviceModel(name));
  }
  ASSIGN_OR_RETURN(r.states.layout, ParseStateLayout(absl::GetFlag(FLAGS_states)));
  r.states.world_size = absl::GetFlag(FLAGS_world_size);
  ASSIGN_OR_RETURN(const int64_t collective_bytes_per_s,
                   ParseRate("collective_bandwidth", absl::GetFlag(FLAGS_collective_bandwidth)));
  r.states.collective_bytes_per_ms = static_cast<double>(collective_bytes_per_s) / 1000.0;
  RETURN_IF_ERROR(ValidateStatesSetting(r.states));
  r.out = absl::GetFlag(FLAGS_out);
  r.use = absl::GetFlag(FLAGS_report_only) ? FolderUse::kReportOnly
          : r.predict                      ? FolderUse::kPredict
          : absl::GetFlag(FLAGS_resume)    ? FolderUse::kResume
                                           : FolderUse::kNew;
  RETURN_IF_ERROR(ParseRanks(parsed, r));
  for (const BoundModel& model : options.models) {
    RETURN_IF_ERROR(CheckRanks(model, r.ranks.world_size));
  }
  // After ParseRanks, which resolves the device: before it, every run took the CPU's dtype
  // (an H100 ran --amp in bfloat16, its training in float16).
  if (training.amp) options.autocast = AmpDtype(options.device);
  ASSIGN_OR_RETURN(r.threads.intra_op,
                   ParseThreadCount("--threads", absl::GetFlag(FLAGS_threads), "OMP_NUM_THREADS"));
  ASSIGN_OR_RETURN(r.threads.blas,
                   ParseThreadCount("--blas_threads", absl::GetFlag(FLAGS_blas_threads),
                                    "OPENBLAS_NUM_THREADS"));
  // The ranks of one host share its cores: auto gives each its part of them.
  if (absl::GetFlag(FLAGS_blas_threads) == "auto") {
    r.threads.blas = std::max(1, r.threads.blas / r.ranks.local_world_size);
  }
  return r;
}

// Its errors are bad input: a device, a cap or thread counts this machine refuses.
absl::StatusOr<Machine> SetUpMachine(const Request& r) {
  Machine m;
  ASSIGN_OR_RETURN(m.threads, SetComputeThreads(r.threads));
  if (r.ranks.rank == 0 && m.threads.intra_op > 1 && m.threads.blas > 1 &&
      std::getenv("OMP_WAIT_POLICY") == nullptr) {
    Say(absl::StrFormat(
        "note: LibTorch's OpenMP threads spin between parallel regions and contend with "
        "OpenBLAS's; with --threads=%d export OMP_WAIT_POLICY=PASSIVE (README, Performance)",
        m.threads.intra_op));
  }
  RETURN_IF_ERROR(UseDevice(r.options.device));
  ASSIGN_OR_RETURN(m.meter, MemoryMeterFor(r.options.device));
  // --memory_cap applies to each configuration's own steps (RunSweep); set here once to check
  // it on this device.
  RETURN_IF_ERROR(m.meter->SetCap(r.options.memory_cap));
  if (r.options.device.is_cpu() && AvailableMemoryBytes().has_value()) {
    m.standing_cap =
        *AvailableMemoryBytes() / 10 * 9 / r.ranks.local_world_size;  // ranks share the host
  }
  RETURN_IF_ERROR(m.meter->SetCap(m.standing_cap));
  return m;
}

// The run, top-down: the command line read and checked, the machine set up, then the mode. Every
// error comes back here as a Status (bad input marked BadInput), to Main.
absl::Status Run(int argc, char** argv, const PlanFileSnapshots& plan_files, Ranks& ranks) {
  absl::StatusOr<ParsedCommandLine> parsed = ReadCommandLine(argc, argv);
  if (!parsed.ok()) return BadInput(parsed.status());
  if (absl::Status entered = EnterUserDirectory(); !entered.ok()) return BadInput(entered);
  // Everything is checked before anything is written or any tensor is made.
  absl::StatusOr<Request> request = ReadRequest(*parsed);
  if (!request.ok()) return BadInput(request.status());
  if (request->list) return List();
  request->plan_files = plan_files.Digests();
  request->arguments.assign(argv, argv + argc);
  request->command = CommandOf(argc, argv);
  // A rank that --nproc started does not outlive rank 0.
  if (request->launched) {
    if (absl::Status bound = EndWithLauncher(); !bound.ok()) return BadInput(bound);
  }
  absl::StatusOr<Machine> machine = SetUpMachine(*request);
  if (!machine.ok()) return BadInput(machine.status());
  request->options.threads = machine->threads;
  if (request->explain) {
    if (request->ranks.rank != 0) return absl::OkStatus();  // every rank plans alike: rank 0 tells
    if (absl::Status explained = Explain(request->options, *machine->meter); !explained.ok()) {
      return BadInput(explained);
    }
    return FlushStdout();
  }
  if (request->predict) return PredictAll(*request, *machine);
  return Sweep(*request, *machine, ranks);
}

// The one place the process ends: an error is one line on stderr (and, where ranks this process
// started were still running, which of them failed first), exit status 2 for bad input, 1 for
// any other error, 0 when every output was written.
int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "runs every model x strategy and writes results.csv, report.md and plots; see "
      "README.md.\n  bazel run //experiments:sweep -- --models=heavy_mlp:depth=40 "
      "--strategies=store_all,uniform");
  // Past a file size limit a write fails (EFBIG) and is reported, instead of killing the run.
  std::signal(SIGXFSZ, SIG_IGN);
  const PlanFileSnapshots plan_files;  // each plan file read once, for the whole run
  Ranks ranks;                         // ended before Main returns, on every path
  const absl::Status status = Run(argc, argv, plan_files, ranks);
  if (!status.ok()) {
    Say(status.message());
    if (const std::string failed = ranks.End(); !failed.empty()) Say(failed);
  }
  return ExitStatusOf(status);
}

}  // namespace
}  // namespace ckpt

int main(int argc, char** argv) { return ckpt::Main(argc, argv); }
