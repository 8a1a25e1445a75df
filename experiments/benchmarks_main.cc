// bazel run //experiments:benchmarks -- [--models=SPEC,...] [--strategies=SPEC,...]
//     [--predict=SPEC,...] [--device=auto|cpu|cuda] [--threads=N] [--blas_threads=N]
//     [--benchmark_filter=REGEX] [--benchmark_format=json]
//
// Google Benchmark over strategies x models: one benchmark per pair, named
// "<strategy>/<model spec>" so --benchmark_filter selects them, timing one training step
// (forward + loss + backward) per iteration, with counters activation_bytes, peak_bytes and
// recompute_forwards. An infeasible configuration (a plan that does not fit, out of memory)
// is skipped with its error. On CUDA the time is the step's CUDA-event time (manual time).
// With --predict, per model there also "predict_cold/<spec>" and "predict_warm/<spec>": the
// sweep's --predict question for it under --strategies, asked in a new folder (its profile
// measured; one iteration) and in one that kept its profile (experiments/kept_profiles.h),
// with a counter `profiled` (1 where the profile was measured).
// Google Benchmark's flags (--benchmark_*) and the project's flags coexist.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/base/files.h"
#include "core/base/printable.h"
#include "core/base/status_macros.h"
#include "core/plan/plan_text.h"
#include "core/plan/strategy.h"
#include "core/run/chain_model.h"
#include "core/run/device.h"
#include "core/run/executor.h"
#include "core/run/memory_meter.h"
#include "core/run/profiler.h"
#include "core/run/torch_status.h"
#include "core/run/workload.h"
#include "experiments/command_line.h"
#include "experiments/kept_profiles.h"
#include "experiments/predict.h"
#include "experiments/presets.h"
#include "experiments/sweep.h"
#include "torch/version.h"

ABSL_FLAG(std::string, models, "",
          "comma-separated model specs (default: the quick preset's, CPU-sized)");
ABSL_FLAG(std::string, strategies, "",
          "comma-separated strategy specs (default: every registered strategy)");
ABSL_FLAG(std::string, predict, "",
          "comma-separated model specs whose --predict question is timed cold and warm");
ABSL_FLAG(std::string, device, "auto", "auto, cpu, cuda or cuda:N");
ABSL_FLAG(std::string, threads, "1",
          "LibTorch's intra-op threads: an integer or auto (OMP_NUM_THREADS where set, else the "
          "usable cores)");
ABSL_FLAG(std::string, blas_threads, "auto",
          "OpenBLAS's threads: an integer or auto (OPENBLAS_NUM_THREADS where set, else the usable "
          "cores)");

namespace ckpt {
namespace {

[[noreturn]] void Die(const absl::Status& status) {
  std::fprintf(stderr, "benchmarks: %s\n", Printable(status.message()).c_str());
  std::exit(2);
}

// One training step of `model` under `strategy` per iteration.
void TrainingStep(benchmark::State& state, const BoundModel& model, const BoundStrategy& strategy,
                  c10::Device device, MemoryMeter* meter) {
  WorkloadOptions options;
  options.device = device;
  absl::StatusOr<Workload> workload = Workload::Build(model, options);
  absl::StatusOr<PlannedRun> run = workload.ok() ? workload->Prepare(strategy, *meter)
                                                 : absl::StatusOr<PlannedRun>(workload.status());
  if (!run.ok()) return state.SkipWithError(Printable(run.status().message()).c_str());
  ChainExecutor& exec = run->executor;
  const Batch& batch = workload->batch();

  StepResult last;
  for (auto _ : state) {
    absl::StatusOr<StepResult> r = exec.Step(batch);
    if (!r.ok()) return state.SkipWithError(Printable(r.status().message()).c_str());
    if (device.is_cuda()) state.SetIterationTime(r->step_ms / 1000.0);
    last = *r;
  }
  using benchmark::Counter;
  state.counters["activation_bytes"] = Counter(static_cast<double>(last.activation_bytes),
                                               Counter::kDefaults, Counter::OneK::kIs1024);
  state.counters["peak_bytes"] =
      Counter(static_cast<double>(last.peak_bytes), Counter::kDefaults, Counter::OneK::kIs1024);
  state.counters["recompute_forwards"] = static_cast<double>(last.recompute_forwards);
  state.SetLabel(PlanToText(run->plan, workload->model()->Stages()));
}

// The sweep's --predict question for `options.models`, with its profiles kept at `path`, per
// iteration; cold: `path` removed before each; warm: as the cold one left it (asked once before
// the timing starts where it is run alone).
void PredictQuestion(benchmark::State& state, const SweepOptions& options, const std::string& path,
                     bool warm, MemoryMeter* meter) {
  const std::string setting = ProfileSetting(WorkloadOptionsFor(options), /*extrapolate=*/true);
  bool profiled = false;
  const auto ask = [&]() -> absl::Status {
    KeptProfiles kept = KeptProfiles::Open(path, setting);
    SweepOptions asked = options;
    asked.kept = &kept;
    std::ostringstream progress;
    ASSIGN_OR_RETURN(
        const std::vector<Prediction> rows,
        Predict(asked, PredictSetting{StatesSetting{}, std::nullopt, /*extrapolate=*/true}, *meter,
                progress));
    profiled = progress.str().find("not measured again") == std::string::npos;
    return absl::OkStatus();
  };
  if (warm) {
    if (absl::Status s = ask(); !s.ok()) return state.SkipWithError(Printable(s.message()).c_str());
  }
  for (auto _ : state) {
    if (!warm) std::remove(path.c_str());  // a new folder's question each time
    if (absl::Status s = ask(); !s.ok()) return state.SkipWithError(Printable(s.message()).c_str());
  }
  state.counters["profiled"] = profiled ? 1 : 0;
}

int Main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // takes the --benchmark_* flags
  absl::StatusOr<ParsedCommandLine> read = ReadCommandLine(argc, argv);  // ours
  if (!read.ok()) Die(read.status());
  const ParsedCommandLine& parsed = *read;
  if (!parsed.positional.empty()) {
    Die(absl::InvalidArgumentError(absl::StrCat("unexpected argument '", parsed.positional[0],
                                                "'; flags are --name=value (see --help)")));
  }
  absl::StatusOr<int> intra_op =
      ParseThreadCount("--threads", absl::GetFlag(FLAGS_threads), "OMP_NUM_THREADS");
  if (!intra_op.ok()) Die(intra_op.status());
  absl::StatusOr<int> blas =
      ParseThreadCount("--blas_threads", absl::GetFlag(FLAGS_blas_threads), "OPENBLAS_NUM_THREADS");
  if (!blas.ok()) Die(blas.status());
  if (absl::Status s = SetComputeThreads({*intra_op, *blas}).status(); !s.ok()) Die(s);
  absl::StatusOr<c10::Device> device = ResolveDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) Die(device.status());
  absl::StatusOr<MemoryMeter*> meter = MemoryMeterFor(*device);
  if (!meter.ok()) Die(meter.status());

  absl::StatusOr<Preset> quick = FindPreset("quick");
  if (!quick.ok()) Die(quick.status());
  SweepOptions options;  // for its validation of every spec before anything runs
  const std::vector<std::string> model_texts =
      absl::GetFlag(FLAGS_models).empty()
          ? quick->models
          : std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_models), ','));
  absl::StatusOr<std::vector<BoundModel>> models = BindModels(model_texts);
  if (!models.ok()) Die(models.status());
  options.models = *std::move(models);
  const std::vector<std::string> strategy_texts =
      absl::GetFlag(FLAGS_strategies).empty()
          ? quick->strategies
          : std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_strategies), ','));
  // Each spec bound here once; the benchmarks are named by the specs as given (what
  // --benchmark_filter matches), and the sweep's order of the strategies is only for its checks.
  std::vector<std::pair<std::string, BoundStrategy>> strategies;
  for (const std::string& text : strategy_texts) {
    absl::StatusOr<BoundStrategy> strategy = BoundStrategy::Bind(text);
    if (!strategy.ok()) Die(strategy.status());
    strategies.emplace_back(text, *std::move(strategy));
  }
  absl::StatusOr<std::vector<BoundStrategy>> ordered = SweepOrder(strategies);
  if (!ordered.ok()) Die(ordered.status());
  options.strategies = *std::move(ordered);
  if (absl::Status s = ValidateSweep(options); !s.ok()) Die(s);

  benchmark::AddCustomContext(
      "libtorch",
      absl::StrCat(TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH));
  benchmark::AddCustomContext("device", device->str());
  benchmark::AddCustomContext("runtime", DescribeRuntime());
  benchmark::AddCustomContext("memory", (*meter)->Describe());
  if (absl::StatusOr<double> gemm = MeasureGemmGflops(*device); gemm.ok()) {
    benchmark::AddCustomContext("gemm_gflops", absl::StrFormat("%.1f", *gemm));
  }
  for (size_t m = 0; m < model_texts.size(); ++m) {
    const BoundModel& model = options.models[m];
    for (const auto& [name, strategy] : strategies) {
      auto* b = benchmark::RegisterBenchmark(
          absl::StrCat(name, "/", model_texts[m]).c_str(),
          [model, strategy = strategy, device = *device, meter = *meter](benchmark::State& state) {
            TrainingStep(state, model, strategy, device, meter);
          });
      b->Unit(benchmark::kMillisecond);
      if (device->is_cuda()) {
        b->UseManualTime();
      } else {
        b->UseRealTime();
      }
    }
  }
  std::optional<ScratchFolder> scratch;  // the questions' kept profiles, removed at exit
  const std::string predict_texts = absl::GetFlag(FLAGS_predict);
  if (!predict_texts.empty()) {
    absl::StatusOr<std::vector<BoundModel>> asked = BindModels(absl::StrSplit(predict_texts, ','));
    if (!asked.ok()) Die(asked.status());
    const char* tmp = std::getenv("TMPDIR");
    absl::StatusOr<ScratchFolder> made =
        ScratchFolder::Make(tmp != nullptr ? tmp : "/tmp", "ckptlab-benchmarks.");
    if (!made.ok()) Die(made.status());
    scratch.emplace(*std::move(made));
    for (const BoundModel& model : *asked) {
      SweepOptions question = options;
      question.device = *device;
      question.models = {model};
      // Shared: the warm question takes the profile the cold one kept.
      const std::string path =
          scratch->Path(absl::StrCat("profiles-", &model - asked->data(), ".txt"));
      for (const bool warm : {false, true}) {
        auto* b = benchmark::RegisterBenchmark(
            absl::StrCat(warm ? "predict_warm/" : "predict_cold/", model.spec()).c_str(),
            [question, path, warm, meter = *meter](benchmark::State& state) {
              PredictQuestion(state, question, path, warm, meter);
            });
        b->Unit(benchmark::kSecond)->UseRealTime();
        if (!warm) b->Iterations(1);
      }
    }
  }
  // A filter that matches nothing is a mistake, not an empty result (Google Benchmark itself
  // prints which regex matched nothing, and exits 0).
  const size_t ran = benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return ran == 0 ? 2 : 0;
}

}  // namespace
}  // namespace ckpt

int main(int argc, char** argv) { return ckpt::Main(argc, argv); }
