// bazel run //experiments:sweep -- --models=SPEC[,SPEC...] --strategies=SPEC[,SPEC...]
//     [--device=auto|cpu|cuda] [--steps=N] [--warmup=N] [--threads=N] [--out=DIR]
//     [--memory_cap=BYTES|NGiB|NMiB] [--seed=N] [--explain] [--list]
//
// Runs every model x strategy, checks each strategy's gradients against store_all's, writes
// DIR/results.csv (one row per configuration, appended as each finishes) and prints a table.
// Bad input is a one-line error naming the value and the accepted ones, exit status 2, and
// nothing written.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/chain_model.h"
#include "core/device.h"
#include "core/profiler.h"
#include "core/memory_meter.h"
#include "core/memory_model.h"
#include "core/status_macros.h"
#include "core/strategy.h"
#include "core/torch_status.h"
#include "experiments/results_csv.h"
#include "experiments/sweep.h"

// The quick default: CPU-friendly sizes of an MLP, an encoder and a decoder that still show
// the trade-off, with every strategy (about a minute on 2 cores).
ABSL_FLAG(std::string, models,
          "heavy_mlp:depth=16:hidden=1024:batch=64,"
          "transformer:depth=4:hidden=256:heads=4:seq=128:batch=4,"
          "gpt2:depth=4:hidden=256:heads=4:seq=128:batch=2:vocab=8192",
          "comma-separated model specs (see --list)");
ABSL_FLAG(std::string, strategies,
          "store_all,uniform,recompute_all,selective_attention,chunked_sequence",
          "comma-separated strategy specs (see --list); store_all always runs as the reference");
ABSL_FLAG(std::string, device, "auto", "auto (CUDA if available), cpu, cuda or cuda:N");
ABSL_FLAG(int, steps, 10, "timed training steps per configuration");
ABSL_FLAG(int, warmup, 2, "untimed steps per configuration before timing");
ABSL_FLAG(int, threads, 1,
          "LibTorch and OpenBLAS threads; 1 is fastest on small machines (see README)");
ABSL_FLAG(std::string, out, "",
          "output directory (default: results/sweep-<timestamp> in the workspace)");
ABSL_FLAG(std::string, memory_cap, "",
          "cap on tensor memory: bytes, or with a unit (16GiB, 512MiB); configurations past it "
          "are oom rows");
ABSL_FLAG(uint64_t, seed, 0, "seed for parameters, batches and dropout");
ABSL_FLAG(bool, explain, false, "print each strategy's plan for each model, then exit");
ABSL_FLAG(bool, list, false, "list the strategies and models with their parameters, then exit");

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

absl::StatusOr<std::optional<int64_t>> ParseBytes(const std::string& text) {
  if (text.empty()) return std::optional<int64_t>();
  absl::string_view number = text;
  int64_t unit = 1;
  for (const auto& [suffix, factor] : std::vector<std::pair<std::string, int64_t>>{
           {"GiB", int64_t{1} << 30}, {"MiB", int64_t{1} << 20}, {"KiB", int64_t{1} << 10},
           {"B", 1}}) {
    if (absl::ConsumeSuffix(&number, suffix)) {
      unit = factor;
      break;
    }
  }
  double value = 0;
  if (!absl::SimpleAtod(number, &value) || value < 0 || value * unit > 9.2e18) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory_cap='", text,
                     "' is not accepted; accepted: a byte count, or a number with GiB, MiB, "
                     "KiB (e.g. 16GiB)"));
  }
  return std::optional<int64_t>(static_cast<int64_t>(value * unit));
}

std::string DefaultOutDir() {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return absl::StrCat(workspace != nullptr ? workspace : ".", "/results/sweep-", stamp);
}

// Prints each strategy's plan for each model (--explain). Builds the models to profile them.
absl::Status Explain(const SweepOptions& options, MemoryMeter& meter) {
  for (const std::string& model_spec : options.models) {
    ModelContext context;
    context.device = options.device;
    ASSIGN_OR_RETURN(std::shared_ptr<ChainModel> model, CreateModel(model_spec, context));
    ASSIGN_OR_RETURN(Batch batch, RunTorch([&] { return model->MakeBatch(options.seed); }));
    ASSIGN_OR_RETURN(ModelProfile profile,
                     ProfileModel(*model, batch, meter, options.device, {}, /*repeats=*/1));
    std::printf("%s (%zu stages)\n", model->spec().c_str(), profile.stages.size());
    for (const std::string& strategy_spec : options.strategies) {
      ASSIGN_OR_RETURN(std::unique_ptr<Strategy> strategy, CreateStrategy(strategy_spec));
      absl::StatusOr<Plan> plan = strategy->MakePlan(profile);
      if (!plan.ok()) {
        std::printf("  %s: %s\n", strategy_spec.c_str(), std::string(plan.status().message()).c_str());
        continue;
      }
      ASSIGN_OR_RETURN(ModelProfile plan_profile,
                       ProfileModel(*model, batch, meter, options.device, plan->stage_options,
                                    /*repeats=*/1));
      const MemoryPrediction predicted = PredictMemory(plan_profile, *plan);
      std::printf("  %s: %s\n    %s\n    predicted: %.2f MiB of activations after forward, "
                  "peak %.2f MiB above the baseline\n",
                  plan->strategy.c_str(), plan->summary.c_str(), plan->Describe().c_str(),
                  predicted.activation_bytes / 1048576.0, predicted.peak_bytes / 1048576.0);
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "runs every model x strategy and writes results.csv; see README.md.\n"
      "  bazel run //experiments:sweep -- --models=heavy_mlp:depth=40 "
      "--strategies=store_all,uniform");
  absl::ParseCommandLine(argc, argv);

  if (absl::GetFlag(FLAGS_list)) {
    std::printf("strategies:\n%s\nmodels:\n%s", Strategies().Describe().c_str(),
                Models().Describe().c_str());
    return 0;
  }

  // Everything is checked before anything is written or any tensor is made.
  SweepOptions options;
  options.models = SplitList(absl::GetFlag(FLAGS_models));
  options.strategies = SplitList(absl::GetFlag(FLAGS_strategies));
  options.steps = absl::GetFlag(FLAGS_steps);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  options.seed = absl::GetFlag(FLAGS_seed);
  if (absl::Status s = ValidateSweep(options); !s.ok()) Die(s);
  absl::StatusOr<std::optional<int64_t>> cap = ParseBytes(absl::GetFlag(FLAGS_memory_cap));
  if (!cap.ok()) Die(cap.status());
  if (absl::Status s = SetComputeThreads(absl::GetFlag(FLAGS_threads)); !s.ok()) {
    Die(absl::InvalidArgumentError(absl::StrCat("--threads: ", s.message())));
  }
  absl::StatusOr<c10::Device> device = ResolveDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) Die(device.status());
  options.device = *device;
  absl::StatusOr<MemoryMeter*> meter = MemoryMeterFor(options.device);
  if (!meter.ok()) Die(meter.status());
  if (absl::Status s = (*meter)->SetCap(*cap); !s.ok()) Die(s);

  if (absl::GetFlag(FLAGS_explain)) {
    if (absl::Status s = Explain(options, **meter); !s.ok()) Die(s);
    return 0;
  }

  const std::string out_dir =
      absl::GetFlag(FLAGS_out).empty() ? DefaultOutDir() : absl::GetFlag(FLAGS_out);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    Die(absl::PermissionDeniedError(
        absl::StrCat("--out='", out_dir, "' cannot be created: ", ec.message())));
  }
  absl::StatusOr<CsvAppender> csv = CsvAppender::Create(out_dir + "/results.csv");
  if (!csv.ok()) Die(csv.status());

  const int threads = absl::GetFlag(FLAGS_threads);
  std::cerr << "sweep: " << DescribeRuntime() << "; memory: " << (*meter)->Describe() << "\n";
  absl::StatusOr<std::vector<ConfigResult>> results = RunSweep(
      options, **meter,
      [&](const ConfigResult& r) { return csv->Append(CsvRow(r, threads)); }, std::cerr);
  if (!results.ok()) {
    std::fprintf(stderr, "sweep: %s\n", results.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\nresults: %s/results.csv\n", FormatTable(*results).c_str(), out_dir.c_str());
  return 0;
}

}  // namespace
}  // namespace ckpt

int main(int argc, char** argv) { return ckpt::Main(argc, argv); }
