// The sweep library on tiny models: rows for every configuration, store_all first, ratios
// against it, exact gradients, failures as rows (a plan that does not fit, out of memory).
#include "experiments/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

#include "ATen/ops/tensor.h"
#include "absl/strings/str_join.h"
#include "c10/core/Device.h"
#include "core/base/files.h"
#include "core/base/printable.h"
#include "core/run/memory_meter.h"
#include "core/run/profiler.h"
#include "experiments/gradient_check.h"
#include "experiments/kept_profiles.h"
#include "experiments/output/report.h"
#include "experiments/presets.h"
#include "experiments/progress.h"
#include "experiments/records/results.h"
#include "experiments/records/results_csv.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

using ::testing::HasSubstr;

MemoryMeter& Cpu() { return **MemoryMeterFor(c10::Device(c10::DeviceType::CPU)); }

SweepOptions Tiny() {
  SweepOptions o;
  o.models = BindModels({"heavy_mlp:depth=6:hidden=16:batch=4"}).value();
  o.strategies = BindStrategies({"uniform", "uniform:segments=9", "uniform:segments=3"}).value();
  o.steps = 3;
  o.warmup = 1;
  return o;
}

std::vector<ConfigResult> RunTiny(const SweepOptions& o, std::vector<ConfigResult>* streamed) {
  std::ostringstream progress;
  absl::StatusOr<std::vector<ConfigResult>> results = RunSweep(
      o, Cpu(),
      [&](const ConfigResult& r) {
        streamed->push_back(r);
        return absl::OkStatus();
      },
      progress);
  EXPECT_TRUE(results.ok()) << results.status();
  EXPECT_THAT(progress.str(), HasSubstr("ETA"));
  // The profile's pace is said once its first measurement is done, however quick.
  EXPECT_THAT(progress.str(), HasSubstr("measurements done, about "));
  return results.ok() ? *results : std::vector<ConfigResult>();
}

TEST(Sweep, OneRowPerConfigurationStoreAllFirst) {
  std::vector<ConfigResult> streamed;
  const std::vector<ConfigResult> rows = RunTiny(Tiny(), &streamed);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(streamed.size(), 4u);  // each row was handed over as it finished

  const ConfigResult& store_all = rows[0];
  EXPECT_EQ(store_all.strategy, "store_all");
  EXPECT_EQ(store_all.model, "heavy_mlp:depth=6:hidden=16:batch=4");
  EXPECT_EQ(store_all.status, RowStatus::kOk);
  EXPECT_EQ(store_all.overhead_vs_store_all, 1.0);
  EXPECT_EQ(store_all.step_ms.size(), 3u);
  // A = 4 * 16 * 4 bytes = 256; store_all keeps 6 A + the 4-byte loss.
  EXPECT_EQ(store_all.activation_bytes, 6 * 256 + 4);
  // Blocks round requests up, and the cache holds freed ones: reserved is at least live.
  EXPECT_GE(store_all.peak_reserved_bytes, store_all.peak_bytes);
  EXPECT_GT(store_all.peak_bytes, store_all.baseline_bytes);

  // uniform's default for 6 stages is ceil(sqrt(6)) = 3 segments of 2: (2 + 2) A + 4.
  const ConfigResult& uniform = rows[1];
  EXPECT_EQ(uniform.strategy, "uniform:segments=3");
  EXPECT_EQ(uniform.status, RowStatus::kOk);
  EXPECT_EQ(uniform.activation_bytes, 4 * 256 + 4);
  EXPECT_DOUBLE_EQ(uniform.activation_vs_store_all, (4.0 * 256 + 4) / (6.0 * 256 + 4));
  EXPECT_EQ(uniform.recompute_forwards, 4);
  EXPECT_EQ(uniform.max_grad_diff_vs_store_all, 0.0);  // bitwise on CPU float32
  EXPECT_GT(uniform.overhead_vs_store_all, 0.0);

  // More segments than stages: an error row naming the value; the sweep went on.
  EXPECT_EQ(rows[2].status, RowStatus::kError);
  EXPECT_THAT(rows[2].message, HasSubstr("segments=9 is more than the 6 stages"));
  // The same resolved strategy given twice (uniform = uniform:segments=3) is still measured.
  EXPECT_EQ(rows[3].strategy, "uniform:segments=3");
  EXPECT_EQ(rows[3].status, RowStatus::kOk);
}

// An offloading plan's row has its copies: the profile's measured rates, their time alone,
// what the time model says the step exposes of them (on a CPU, all of it: copies there are part
// of the step) and a measured exposure against the same plan checkpointed. Rows without copies
// have none, and so does an offloading row against an assumed link.
// With kept profiles (experiments/kept_profiles.h), a sweep keeps the profile it planned from
// before stepping, and a second sweep plans from it: the same plans, predictions and measured
// bytes, nothing profiled (Tiny's segments=9 is an error row both times).
TEST(Sweep, ASecondSweepPlansFromTheProfileTheFirstKept) {
  absl::StatusOr<ScratchFolder> dir = ScratchFolder::Make(::testing::TempDir(), "kept.");
  ASSERT_TRUE(dir.ok()) << dir.status();
  SweepOptions o = Tiny();
  o.steps = 1;
  o.warmup = 0;
  std::vector<ConfigResult> rows[2];
  for (int run = 0; run < 2; ++run) {
    KeptProfiles kept =
        KeptProfiles::Open(dir->Path(KeptProfiles::kFile),
                           ProfileSetting(WorkloadOptionsFor(o), /*extrapolate=*/false));
    o.kept = &kept;
    std::ostringstream progress;
    absl::StatusOr<std::vector<ConfigResult>> results = RunSweep(
        o, Cpu(), [](const ConfigResult&) { return absl::OkStatus(); }, progress);
    ASSERT_TRUE(results.ok()) << results.status();
    rows[run] = *results;
    EXPECT_EQ(progress.str().find("measurements done") != std::string::npos, run == 0)
        << progress.str();
    EXPECT_EQ(progress.str().find("not measured again") != std::string::npos, run == 1)
        << progress.str();
  }
  ASSERT_EQ(rows[1].size(), rows[0].size());
  for (size_t k = 0; k < rows[0].size(); ++k) {
    EXPECT_EQ(rows[1][k].status, rows[0][k].status);
    EXPECT_EQ(rows[1][k].plan, rows[0][k].plan);
    EXPECT_EQ(rows[1][k].predicted.activation_bytes, rows[0][k].predicted.activation_bytes);
    if (rows[1][k].status == RowStatus::kOk) {
      EXPECT_EQ(rows[1][k].activation_bytes, rows[1][k].predicted.activation_bytes);
    }
  }
}

TEST(Sweep, AnOffloadingRowHasItsCopiesAloneAndExposed) {
  SweepOptions o = Tiny();
  o.strategies = BindStrategies({"uniform:segments=3:offload=yes"}).value();
  std::vector<ConfigResult> streamed;
  std::vector<ConfigResult> rows = RunTiny(o, &streamed);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(std::isnan(rows[0].copy_ms));
  EXPECT_TRUE(std::isnan(rows[0].copy_exposed_ms));
  const ConfigResult& offloading = rows[1];
  ASSERT_EQ(offloading.status, RowStatus::kOk) << offloading.message;
  // [0,2) [2,4) [4,6): the middle segment's input (4 x 16 floats) goes to the host.
  EXPECT_EQ(offloading.offloaded_bytes, 256);
  EXPECT_GT(offloading.to_host_gbps, 0);
  EXPECT_GT(offloading.from_host_gbps, 0);
  EXPECT_NEAR(offloading.copy_ms,
              256 / (offloading.to_host_gbps * 1e6) + 256 / (offloading.from_host_gbps * 1e6),
              1e-9);
  EXPECT_NEAR(offloading.predicted_copy_exposed_ms, offloading.copy_ms, 1e-9);
  EXPECT_FALSE(std::isnan(offloading.copy_exposed_ms));
  EXPECT_EQ(offloading.max_grad_diff_vs_store_all, 0.0);

  o.link_bytes_per_s = 25000000000;  // 25 GB/s, beside the compute
  rows = RunTiny(o, &streamed);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rows[1].to_host_gbps, 25);
  EXPECT_LT(rows[1].predicted_copy_exposed_ms, rows[1].copy_ms);  // some of it hidden
  EXPECT_TRUE(std::isnan(rows[1].copy_exposed_ms));
}

TEST(Sweep, OutOfMemoryIsARowAndTheSweepGoesOn) {
  SweepOptions o = Tiny();
  o.models =
      BindModels({"heavy_mlp:depth=6:hidden=64:batch=64", "heavy_mlp:depth=2:hidden=8:batch=2"})
          .value();
  o.strategies = BindStrategies({"uniform"}).value();
  // The first model's parameters and batch fit (6*(64*64+64)*4 + 64*64*4 = 115,712 bytes),
  // but store_all's 6 activations of 16 KiB do not; the second model fits entirely.
  const int64_t live = Cpu().Stats().live_bytes;
  ASSERT_TRUE(Cpu().SetCap(live + 150 * 1024).ok());
  std::vector<ConfigResult> streamed;
  std::ostringstream progress;
  absl::StatusOr<std::vector<ConfigResult>> rows = RunSweep(
      o, Cpu(), [](const ConfigResult&) { return absl::OkStatus(); }, progress);
  ASSERT_TRUE(Cpu().SetCap(std::nullopt).ok());
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 4u);
  EXPECT_EQ((*rows)[0].status, RowStatus::kOom);
  EXPECT_THAT((*rows)[0].message, HasSubstr("over the cap"));
  EXPECT_EQ((*rows)[2].status, RowStatus::kOk);
  EXPECT_EQ((*rows)[3].status, RowStatus::kOk);
}

// A cap between two configurations' measured peaks makes exactly those above it oom, and leaves
// the others' bytes as they were uncapped: the cap applies to each configuration's own steps,
// not to the sweep's profiling or to the reference gradients it holds for the check (which
// once made every strategy oom under a cap below store_all's peak). The caps are picked
// between two measured values, as XLA's rematerialization tests pick their budgets.
TEST(Sweep, ACapBetweenTwoPeaksMakesExactlyTheConfigurationsAboveItOom) {
  SweepOptions o;
  o.models = BindModels({"transformer:depth=2:hidden=16:heads=2:seq=48:batch=2"}).value();
  o.strategies =
      BindStrategies({"uniform", "recompute_all", "selective_attention", "chunked_sequence"})
          .value();
  o.steps = 1;
  o.warmup = 1;
  auto run = [&](std::optional<int64_t> cap) {
    o.memory_cap = cap;
    std::ostringstream progress;
    absl::StatusOr<std::vector<ConfigResult>> rows = RunSweep(
        o, Cpu(), [](const ConfigResult&) { return absl::OkStatus(); }, progress);
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? *rows : std::vector<ConfigResult>();
  };
  const std::vector<ConfigResult> uncapped = run(std::nullopt);
  ASSERT_EQ(uncapped.size(), 5u);
  std::vector<int64_t> peaks;
  for (const ConfigResult& r : uncapped) {
    ASSERT_EQ(r.status, RowStatus::kOk) << r.strategy << ": " << r.message;
    peaks.push_back(r.peak_bytes);
  }
  std::sort(peaks.begin(), peaks.end());
  peaks.erase(std::unique(peaks.begin(), peaks.end()), peaks.end());
  ASSERT_GE(peaks.size(), 3u);
  // Between the two lowest peaks, between the middle two, and just below the highest
  // (store_all's, so the others run without their reference).
  for (const int64_t cap :
       {(peaks[0] + peaks[1]) / 2, (peaks[peaks.size() / 2 - 1] + peaks[peaks.size() / 2]) / 2,
        peaks.back() - 1}) {
    const std::vector<ConfigResult> capped = run(cap);
    ASSERT_EQ(capped.size(), uncapped.size());
    for (size_t i = 0; i < capped.size(); ++i) {
      const bool above = uncapped[i].peak_bytes > cap;
      EXPECT_EQ(capped[i].status, above ? RowStatus::kOom : RowStatus::kOk)
          << capped[i].strategy << " peaked at " << uncapped[i].peak_bytes << " uncapped; cap "
          << cap << ": " << capped[i].message;
      if (!above) {
        EXPECT_EQ(capped[i].peak_bytes, uncapped[i].peak_bytes) << capped[i].strategy;
      }
    }
  }
}

// A caching allocator's meter (CUDA's, in miniature) over the CPU's exact one: every block it
// serves stays held after its tensor is freed, so reserved bytes are the most live bytes since
// the cache was last released, until ReleaseCached hands the free ones back.
class CachingMeter final : public MemoryMeter {
 public:
  explicit CachingMeter(MemoryMeter& live) : live_(live) {}
  MemoryStats Stats() const override {
    MemoryStats s = live_.Stats();
    held_ = std::max(held_, s.peak_bytes);
    s.reserved_bytes = s.peak_reserved_bytes = held_;
    return s;
  }
  void ResetPeak() override {
    Stats();  // what the closing window's peak needed stays held
    live_.ResetPeak();
  }
  absl::Status SetCap(std::optional<int64_t> bytes) override { return live_.SetCap(bytes); }
  std::optional<int64_t> Cap() const override { return live_.Cap(); }
  std::string Describe() const override { return "cpu, counted as if it cached"; }
  void ReleaseCached() override {
    live_.ResetPeak();  // the window's earlier peak no longer needs holding
    held_ = live_.Stats().live_bytes;
  }

 private:
  MemoryMeter& live_;
  mutable int64_t held_ = 0;
};

// Under a caching allocator the blocks store_all's step needed stay reserved through every
// strategy after it (and the model before stays reserved through the next model): each
// configuration's reserved peak must be taken from an emptied cache to be its own.
TEST(Sweep, ReservedPeakIsEachConfigurationsOwnUnderACachingAllocator) {
  CachingMeter meter(Cpu());
  SweepOptions o = Tiny();
  // Activations (64 x 16 floats, 4 KiB each) outweigh the parameters, so recompute_all's
  // peak is well below store_all's; the second model is smaller than the first.
  o.models =
      BindModels({"heavy_mlp:depth=6:hidden=16:batch=64", "heavy_mlp:depth=2:hidden=8:batch=2"})
          .value();
  o.strategies = BindStrategies({"recompute_all"}).value();
  std::ostringstream progress;
  absl::StatusOr<std::vector<ConfigResult>> rows = RunSweep(
      o, meter, [](const ConfigResult&) { return absl::OkStatus(); }, progress);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 4u);
  for (const ConfigResult& r : *rows) {
    ASSERT_EQ(r.status, RowStatus::kOk) << r.model << " " << r.strategy << ": " << r.message;
    // Started from an empty cache, the allocator holds at most what the step's peak needed.
    EXPECT_EQ(r.peak_reserved_bytes, r.peak_bytes) << r.model << " " << r.strategy;
  }
  EXPECT_LT((*rows)[1].peak_reserved_bytes, (*rows)[0].peak_reserved_bytes);
  EXPECT_LT((*rows)[2].peak_reserved_bytes, (*rows)[1].peak_reserved_bytes);
}

TEST(Sweep, RejectsBadInputBeforeRunning) {
  SweepOptions o = Tiny();
  EXPECT_THAT(std::string(BindStrategies({"uniform:segmnets=2"}).status().message()),
              HasSubstr("unknown parameter 'segmnets'"));
  EXPECT_THAT(std::string(BindStrategies({"uniform", "uniform:segments=auto"}).status().message()),
              HasSubstr("twice (as 'uniform' and 'uniform:segments=auto')"));
  // Options not made by BindStrategies: without store_all first, or with a strategy twice.
  o = Tiny();
  o.strategies.erase(o.strategies.begin());
  EXPECT_THAT(std::string(ValidateSweep(o).message()), HasSubstr("do not start with store_all"));
  o = Tiny();
  o.strategies.push_back(o.strategies.back());
  EXPECT_THAT(std::string(ValidateSweep(o).message()), HasSubstr("twice"));
  EXPECT_EQ(BindModels({"convnext"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      std::string(BindModels({"heavy_mlp:depth=4", "heavy_mlp:depth=+4"}).status().message()),
      HasSubstr("twice (as 'heavy_mlp:depth=4' and 'heavy_mlp:depth=+4')"));
  o = Tiny();
  o.models.push_back(o.models.back());
  EXPECT_THAT(std::string(ValidateSweep(o).message()), HasSubstr("models list"));
  o = Tiny();
  o.steps = 0;
  EXPECT_THAT(std::string(ValidateSweep(o).message()), HasSubstr("steps=0"));
}

// A ratio that is unknown is left blank, not printed as a number. results.csv leaves the
// *_vs_store_all cells empty when store_all itself failed (out of memory, say); report.md once
// read 0 there and showed every other strategy of the model with a "100.0%" saving and a
// "-100.0%" time overhead.
// --budgets adds each budget planner at each budget, keeping what says how it plans (offload)
// and dropping what the budget chooses (uniform's segments).
TEST(WithBudgets, KeepsHowAPlannerPlansAndDropsWhatTheBudgetChooses) {
  absl::StatusOr<std::vector<BoundStrategy>> out = WithBudgets(
      BindStrategies({"optimal", "optimal:offload=no", "uniform:segments=4:offload=yes"}).value(),
      {int64_t{8} << 20});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(SpecsOf(*out),
              testing::ElementsAre("store_all", *BoundStrategySpec("optimal"),
                                   *BoundStrategySpec("optimal:offload=no"),
                                   *BoundStrategySpec("uniform:segments=4:offload=yes"),
                                   *BoundStrategySpec("optimal:budget=8MiB:offload=yes"),
                                   *BoundStrategySpec("optimal:budget=8MiB:offload=no"),
                                   *BoundStrategySpec("uniform:budget=8MiB:offload=yes")));
  EXPECT_FALSE(WithBudgets(BindStrategies({"optimal"}).value(), {-1}).ok());
}

// The offload section: a row per offloading plan, its hidden share where its copies take enough
// of the step to be timed, and none without offloading rows.
// report.md as WriteReport writes it for `rows`.
std::string ReportOf(const std::vector<ConfigResult>& rows) {
  const std::string dir = ::testing::TempDir() + "/report";
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(WriteReport(dir, rows, RunInfo{}).ok());
  std::ifstream in(dir + "/report.md");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(WriteReport, OffloadCopiesHaveASectionWithTheirHiddenShare) {
  ConfigResult big;
  big.model = "m";
  big.strategy = "big";
  big.offloaded_bytes = 1 << 20;
  big.step_ms_median = 100;
  big.to_host_gbps = big.from_host_gbps = 20;
  big.copy_ms = 10;
  big.predicted_copy_exposed_ms = 3;
  big.copy_exposed_ms = 2.5;
  ConfigResult small = big;
  small.strategy = "small";
  small.copy_ms = 4;  // under 5% of the step
  ConfigResult none;
  none.model = "m";
  none.strategy = "none";
  const std::string md = ReportOf({none, big, small});
  EXPECT_THAT(md, HasSubstr("Offload copies at 20.00 GB/s to the host and 20.00 GB/s back"));
  EXPECT_THAT(md, HasSubstr("| big | 1.00 | 10.000 | 3.000 | 2.500 | 75% |"));
  EXPECT_THAT(md,
              HasSubstr("| small | 1.00 | 4.000 | 3.000 | 2.500 | (copies < 5% of the step) |"));
  EXPECT_THAT(md, ::testing::Not(HasSubstr("| none | 0.00 |")));
  EXPECT_THAT(ReportOf({none}), ::testing::Not(HasSubstr("Offload copies")));
}

TEST(WriteReport, LeavesUnknownRatiosBlank) {
  ConfigResult row;
  row.model = "m";
  row.strategy = "uniform";
  row.activation_bytes = 2097152;
  row.peak_vs_store_all = 0.5;
  // At a line's start: strategy, status, activations MiB, activation saving, peak MiB, peak
  // saving, overhead.
  EXPECT_THAT(ReportOf({row}), HasSubstr("\n| uniform | ok | 2.00 |  | 0.00 | 50.0% |  |"));
}

// The schema is symmetric: what a row writes, reading it back gives, field by field, and a
// failed row's empty cells come back as unknown.
TEST(ResultsSchema, ReadsBackWhatItWrites) {
  const std::string path = ::testing::TempDir() + "/schema_roundtrip.csv";
  std::filesystem::remove(path);
  ConfigResult ok;
  ok.model = "gpt2:size=small:depth=2";
  ok.strategy = "uniform:segments=2";
  ok.device = "cpu";
  ok.baseline_bytes = 1000;
  ok.activation_bytes = 2000;
  ok.peak_bytes = 5000;
  ok.predicted = {2000, 3990};
  ok.peak_reserved_bytes = 6000;
  ok.predicted_step_ms = 1.5;
  ok.step_ms_median = 2.25;
  ok.step_ms_min = 2;
  ok.step_ms_max = 3;
  ok.overhead_vs_store_all = 1.25;
  ok.activation_vs_store_all = 0.5;
  ok.peak_vs_store_all = 0.75;
  ok.recompute_forwards = 7;
  ok.offloaded_bytes = 4096;
  ok.to_host_gbps = 12.5;
  ok.from_host_gbps = 11.25;
  ok.copy_ms = 0.5;
  ok.predicted_copy_exposed_ms = 0.125;
  ok.copy_exposed_ms = 0.25;
  ok.max_grad_diff_vs_store_all = 0;
  ok.loss = 3.125;
  ok.steps = 4;
  ok.step_gflop = 0.5;
  ok.achieved_gflops = 222.25;
  ok.threads = 1;
  ok.blas_threads = 2;
  ok.model_spec = "gpt2:size=small:depth=2:hidden=auto";
  ok.strategy_spec = "uniform:segments=auto:budget=none:offload=no";
  ok.plan = "[0,1) checkpointed, [1,2) stored";
  ok.message = "a, \"quoted\" message";
  ConfigResult failed;
  failed.model = "m";
  failed.strategy = "s";
  failed.status = RowStatus::kOom;
  failed.baseline_bytes = 99;  // not written: a failed row has no bytes
  failed.message = "out of memory";
  {
    absl::StatusOr<CsvAppender> csv = OpenResults(path);
    ASSERT_TRUE(csv.ok()) << csv.status();
    ASSERT_TRUE(csv->Write(ResultCells(ok)).ok());
    ASSERT_TRUE(csv->Write(ResultCells(failed)).ok());
  }
  absl::StatusOr<std::vector<ConfigResult>> rows = ReadResults(path);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ(ResultCells((*rows)[0]), ResultCells(ok));
  const ConfigResult& back = (*rows)[0];
  EXPECT_EQ(back.predicted.peak_bytes, 3990);  // written absolute, read back above the baseline
  EXPECT_EQ(back.message, ok.message);
  EXPECT_EQ(back.blas_threads, 2);
  EXPECT_EQ(ResultCells((*rows)[1]), ResultCells(failed));
  EXPECT_EQ((*rows)[1].baseline_bytes, 0);
  EXPECT_TRUE(std::isnan((*rows)[1].overhead_vs_store_all));
  // A cell that is not what its column writes is a damaged file, named by line and column.
  std::FILE* f = std::fopen(path.c_str(), "a");
  std::vector<std::string> cells = ResultCells(ok);
  cells[4] = "lots";  // baseline_bytes
  std::fputs(CsvLine(cells).c_str(), f);
  std::fclose(f);
  EXPECT_THAT(std::string(ReadResults(path).status().message()),
              HasSubstr("line 4: column baseline_bytes holds 'lots'; accepted: a whole number of "
                        "at least 0, empty where the row failed"));
  // A row whose cells are each what some row could hold, but not this one, is damage too: a
  // status not among the three names, a number not written as the columns write it, an ok row
  // without its bytes, a configuration's second row.
  const auto damaged = [&](const std::vector<std::vector<std::string>>& rows) {
    const std::string other = ::testing::TempDir() + "/damaged.csv";
    std::string text = CsvLine(ResultColumnNames());
    for (const std::vector<std::string>& row : rows) text += CsvLine(row);
    std::FILE* g = std::fopen(other.c_str(), "w");
    std::fputs(text.c_str(), g);
    std::fclose(g);
    absl::StatusOr<std::vector<ConfigResult>> read = ReadResults(other);
    return read.ok() ? std::string("read") : std::string(read.status().message());
  };
  const std::vector<std::string> names = ResultColumnNames();
  const auto at = [&](const std::string& name) {
    return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  };
  const auto edited = [&](const ConfigResult& row, const std::string& name, std::string cell) {
    std::vector<std::string> c = ResultCells(row);
    c.at(at(name)) = std::move(cell);
    return c;
  };
  for (const std::string status : {"OK", "ok ", " ok", "skipped", ""}) {
    EXPECT_THAT(damaged({edited(ok, "status", status)}),
                HasSubstr(absl::StrCat("line 2: column status holds '", status,
                                       "'; accepted: ok, oom or error")));
  }
  for (const auto& [name, cell] : std::vector<std::pair<std::string, std::string>>{
           {"activation_bytes", "-5"},
           {"activation_bytes", "+5"},
           {"activation_bytes", " 5"},
           {"peak_bytes", "0x10"},
           {"predicted_peak_bytes", "3"},  // below the baseline
           {"step_ms_median", "-1"},
           {"step_ms_median", "-inf"},
           {"step_ms_median", "nan"},
           {"steps", "-1"},
           {"steps", ""},
           {"world_size", "0"}}) {
    EXPECT_THAT(damaged({edited(ok, name, cell)}),
                HasSubstr(absl::StrCat("line 2: column ", name, " holds '", cell, "'")));
  }
  EXPECT_EQ(damaged({edited(ok, "loss", "-inf")}), "read");  // a loss may be any number
  // What the sweep writes reads back: a gradient difference or a ratio that overflowed.
  ConfigResult overflowed = ok;
  overflowed.max_grad_diff_vs_store_all = overflowed.activation_vs_store_all = HUGE_VAL;
  EXPECT_EQ(damaged({ResultCells(overflowed)}), "read");
  EXPECT_EQ(damaged({edited(ok, "copy_exposed_ms", "-0.250")}), "read");
  ConfigResult unmeasured = failed;  // a failed row's empty bytes under an ok status
  unmeasured.status = RowStatus::kError;
  EXPECT_THAT(damaged({edited(unmeasured, "status", "ok")}),
              HasSubstr("line 2: an ok row without its baseline_bytes"));
  EXPECT_THAT(damaged({edited(ok, "activation_bytes", "")}),
              HasSubstr("line 2: an ok row without its activation_bytes"));
  EXPECT_THAT(damaged({ResultCells(ok), ResultCells(failed), ResultCells(ok)}),
              HasSubstr(absl::StrCat("line 4: a second row of ", ok.model_spec, " under ",
                                     ok.strategy_spec, " (line 2)")));
  EXPECT_EQ(damaged({ResultCells(ok), ResultCells(failed)}), "read");
  for (RowStatus status : {RowStatus::kOk, RowStatus::kOom, RowStatus::kError}) {
    EXPECT_EQ(ParseRowStatus(RowStatusName(status)), status);
  }
}

// The one median the profiler and the sweep summarize timings with.
TEST(Progress, AProfileSaysItsStageItsPolicyAndItsTimeLeftOnceItHasAPace) {
  std::ostringstream out;
  Progress progress(out, 4);
  std::function<void(const ProfileProgress&)> report = progress.Profiling("m");
  report({"forward", 3, 3, "", 0, 0, 0, 0});
  report({"measuring", 1, 3, "stored", 0, 6, 0, 12});
  EXPECT_EQ(out.str(), "");  // within seconds of the start, and no pace yet
  report({"measuring", 1, 3, "core recomputed", 1, 6, 1, 12});
  EXPECT_THAT(out.str(), HasSubstr("profiling m: measuring stage 1 of 3, core recomputed (1 of 6 "
                                   "measurements done, about "));
  EXPECT_THAT(out.str(), HasSubstr(" s left of the profile)"));
  EXPECT_THAT(out.str(), HasSubstr("no ETA before the first step"));
  report({"measuring", 2, 3, "stored", 2, 6, 2, 12});  // within seconds of the last line
  const std::string lines = out.str();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 1);
}

TEST(Median, OfUnsortedSamplesAndNaNWithoutAny) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);  // even count: the mean of the middle two
  EXPECT_DOUBLE_EQ(Median({7}), 7);
  EXPECT_TRUE(std::isnan(Median({})));
}

TEST(OverheadRatio, IsTheMedianOfPerRoundRatios) {
  // Round 2 is slow for both (the machine was busy): per-round pairing cancels it. Ratios
  // 1.5, 1.5, 1.2 -> median 1.5; the ratio of medians would be 15 / 10 = 1.5 too, but the
  // ratio of means (21 / 13.33) would not.
  EXPECT_DOUBLE_EQ(OverheadRatio({15, 30, 18}, {10, 20, 15}), 1.5);
  // Even count: the mean of the middle two: ratios 1, 2, 3, 4 -> 2.5.
  EXPECT_DOUBLE_EQ(OverheadRatio({1, 4, 6, 12}, {1, 2, 2, 3}), 2.5);
  // Only paired rounds count.
  EXPECT_DOUBLE_EQ(OverheadRatio({2, 2, 100}, {1, 1}), 2.0);
  EXPECT_TRUE(std::isnan(OverheadRatio({}, {})));
}

// The comparison every gradient-equality check goes through (the sweep's grad_max_diff and the
// conformance suite's assertions): a NaN or inf gradient on one side only is a difference.
TEST(MaxGradientDifference, CountsNonFiniteValuesAndShapeMismatchesAsInfinite) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::nan("");
  const auto t = [](const std::vector<double>& v) { return at::tensor(v, at::kDouble); };
  EXPECT_EQ(MaxGradientDifference({t({1, 2}), t({3})}, {t({1, 2.5}), t({1})}), 2.0);
  EXPECT_EQ(MaxGradientDifference({t({1, nan})}, {t({1, 2})}), inf);
  EXPECT_EQ(MaxGradientDifference({t({1, 2})}, {t({1, nan})}), inf);
  EXPECT_EQ(MaxGradientDifference({t({1, inf})}, {t({1, 2})}), inf);
  EXPECT_EQ(MaxGradientDifference({t({1, inf})}, {t({1, -inf})}), inf);
  EXPECT_EQ(MaxGradientDifference({t({1, nan})}, {t({1, inf})}), inf);
  // The same non-finite value at the same place is no difference; the finite rest still counts.
  EXPECT_EQ(MaxGradientDifference({t({0.5, nan, inf})}, {t({1, nan, inf})}), 0.5);
  // Broadcasting must not make different shapes comparable.
  EXPECT_EQ(MaxGradientDifference({t({1})}, {t({1, 1})}), inf);
  EXPECT_EQ(MaxGradientDifference({t({1}), at::Tensor()}, {t({1}), t({1})}), inf);
  EXPECT_EQ(MaxGradientDifference({t({1})}, {t({1}), t({1})}), inf);
  EXPECT_EQ(MaxGradientDifference({at::Tensor(), t({})}, {at::Tensor(), t({})}), 0.0);
}

// A results.csv from another version of the sweep (here: one without a column this version
// added) is refused by name, with what differs and what to do, by the reader and the appender.
TEST(CheckResultsHeader, NamesTheColumnsThatDiffer) {
  std::vector<std::string> older = ResultColumnNames();
  older.erase(std::find(older.begin(), older.end(), "peak_reserved_bytes"));
  older.push_back("gpu_name");
  const absl::Status s = CheckResultsHeader("old/results.csv", {older, {"1"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(s.message()),
      HasSubstr("old/results.csv was not written by this version of the sweep, so it "
                "cannot be resumed or reported (columns missing: peak_reserved_bytes; not ours: "
                "gpu_name; or in another order); pass another --out"));
  std::vector<std::string> swapped = ResultColumnNames();
  std::swap(swapped[0], swapped[1]);
  EXPECT_THAT(std::string(CheckResultsHeader("p", {swapped}).message()),
              HasSubstr("missing: none; not ours: none; or in another order"));
  EXPECT_THAT(std::string(CheckResultsHeader("p", {}).message()), HasSubstr("missing: model, "));
  EXPECT_TRUE(CheckResultsHeader("p", {ResultColumnNames()}).ok());

  const std::string path = ::testing::TempDir() + "/older.csv";
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fputs((absl::StrJoin(older, ",") + "\n").c_str(), f);
  std::fclose(f);
  EXPECT_THAT(std::string(ReadResults(path).status().message()), HasSubstr("peak_reserved_bytes"));
  EXPECT_THAT(std::string(OpenResults(path).status().message()), HasSubstr("peak_reserved_bytes"));
}

TEST(ParetoFront, KeepsThePointsNothingBeatsOnBothAxes) {
  // (time, memory): b is beaten by a (slower and bigger), d by c; e ties c's time with more
  // memory.
  const std::vector<std::pair<double, double>> points = {{1.0, 10.0}, {2.0, 11.0}, {1.5, 6.0},
                                                         {3.0, 7.0},  {1.5, 8.0},  {4.0, 2.0}};
  EXPECT_EQ(ParetoFront(points), (std::vector<size_t>{0, 2, 5}));
  EXPECT_TRUE(ParetoFront({}).empty());
}

// Bytes near CSV (quotes, separators, line breaks, control bytes, C1, ill-formed UTF-8), sometimes
// under results.csv's own header: ReadCsv and ReadResults give rows whose cells are printable, or
// an error whose message is, never a crash.
RC_GTEST_PROP(ReadCsv, AnyBytesAreRowsOrAnError, ()) {
  const std::vector<std::string> pieces =
      *rc::gen::container<std::vector<std::string>>(rc::gen::oneOf(
          rc::gen::element<std::string>(
              ",", "\"", "\"\"", "\n", "\r\n", "\r", "a", "1", "-1", "1e999", "nan", "ok", "oom",
              "\x1b[2J", std::string(1, '\0'), "\x7f", "\xc2\x9b", "\xff", "\xc3\xa9", "\xe2\x82"),
          rc::gen::map(rc::gen::arbitrary<std::vector<unsigned char>>(),
                       [](const std::vector<unsigned char>& b) {
                         return std::string(b.begin(), b.end());
                       })));
  std::string text = absl::StrJoin(pieces, "");
  if (*rc::gen::arbitrary<bool>()) text = CsvLine(ResultColumnNames()) + text;
  const std::string path = ::testing::TempDir() + "/fuzz.csv";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
  }
  absl::StatusOr<std::vector<std::vector<std::string>>> rows = ReadCsv(path);
  if (rows.ok()) {
    for (const std::vector<std::string>& row : *rows) {
      for (const std::string& cell : row) RC_ASSERT(FindUnprintable(cell) == -1);
    }
  } else {
    RC_ASSERT(FindUnprintable(rows.status().message()) == -1);
  }
  absl::StatusOr<std::vector<ConfigResult>> results = ReadResults(path);
  if (!results.ok()) RC_ASSERT(FindUnprintable(results.status().message()) == -1);
}

TEST(ReadCsv, ReadsBackWhatTheAppenderWrote) {
  const std::string path = ::testing::TempDir() + "/roundtrip.csv";
  {
    absl::StatusOr<CsvAppender> csv = CsvAppender::Create(path, ResultColumnNames());
    ASSERT_TRUE(csv.ok()) << csv.status();
    std::vector<std::string> row(ResultColumns().size(), "x");
    row[0] = "a, \"quoted\"\nline";
    ASSERT_TRUE(csv->Write(row).ok());
  }
  absl::StatusOr<std::vector<std::vector<std::string>>> rows = ReadCsv(path);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0], ResultColumnNames());
  // Commas and quotes come back; a control character (a LibTorch message's line break) is
  // written as a space, since no cell may hold one when read back (below).
  EXPECT_EQ((*rows)[1][0], "a, \"quoted\" line");
  // Appending checks the header; a file with another one is refused.
  EXPECT_TRUE(CsvAppender::Append(path).ok());
  const std::string other = ::testing::TempDir() + "/other.csv";
  std::FILE* f = std::fopen(other.c_str(), "w");
  std::fputs("a,b\n1,2\n", f);
  std::fclose(f);
  EXPECT_EQ(OpenResults(other).status().code(), absl::StatusCode::kFailedPrecondition);
  f = std::fopen(other.c_str(), "w");
  std::fputs("a,b\n1,", f);  // cut short
  std::fclose(f);
  EXPECT_EQ(ReadCsv(other).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadCsv(other + ".missing").status().code(), absl::StatusCode::kNotFound);
  // No cell read back holds a control character: a quoted line break (which would end a line of
  // a gnuplot script) or an escape, named by line and field.
  for (const auto& [text, what] : std::vector<std::pair<std::string, std::string>>{
           {"a,b\n1,\"x\nsystem('touch y')\"\n", "line 2 holds a line break in field 2"},
           {"a,b\n1,x\x1b[2J\n", "line 2 holds a control character (byte 0x1b) in field 2"},
           {"a,b\n1,x\xc2\x9b"
            "2J\n",
            "line 2 holds a C1 control character (U+009B) in field 2"},
           {"a,b\n\xff,x\n", "line 2 holds a byte that is not UTF-8 (0xff) in field 1"}}) {
    f = std::fopen(other.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    EXPECT_EQ(ReadCsv(other).status().code(), absl::StatusCode::kDataLoss) << text;
    EXPECT_THAT(std::string(ReadCsv(other).status().message()), HasSubstr(what)) << text;
  }
}

TEST(Presets, EveryPresetExistsAndValidates) {
  for (const std::string& name : PresetNames()) {
    absl::StatusOr<Preset> preset = FindPreset(name);
    ASSERT_TRUE(preset.ok());
    SweepOptions o;
    absl::StatusOr<std::vector<BoundModel>> models = BindModels(preset->models);
    ASSERT_TRUE(models.ok()) << name << ": " << models.status();
    o.models = *models;
    o.strategies = BindStrategies(preset->strategies).value();
    EXPECT_TRUE(ValidateSweep(o).ok()) << name << ": " << ValidateSweep(o);
  }
  EXPECT_EQ(PresetNames(), (std::vector<std::string>{"quick", "paper", "seed004"}));
  // seed004 is predicted only, and carries a documents' figure for each of its models.
  const Preset seed004 = *FindPreset("seed004");
  EXPECT_TRUE(seed004.predict_only);
  EXPECT_FALSE(FindPreset("quick")->predict_only);
  ASSERT_EQ(seed004.published.size(), seed004.models.size());
  for (size_t i = 0; i < seed004.models.size(); ++i) {
    EXPECT_EQ(seed004.models[i].substr(0, seed004.models[i].find(':')), seed004.published[i].model);
    EXPECT_GT(seed004.published[i].without_gb, seed004.published[i].with_gb);
  }
  absl::StatusOr<Preset> bad = FindPreset("huge");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("accepted: quick, paper"));
}

TEST(Sweep, ResumeSkipsCompletedModelsAndReportsOnlyMissingRows) {
  SweepOptions o = Tiny();
  o.models =
      BindModels({"heavy_mlp:depth=2:hidden=4:batch=2", "heavy_mlp:depth=3:hidden=4:batch=2"})
          .value();
  o.strategies = BindStrategies({"uniform"}).value();
  // Rows written under other spellings of the same specs count: specs compare canonically.
  std::vector<ConfigResult> done(3);
  done[0].model_spec = "heavy_mlp:depth=2:hidden=4:batch=2";
  done[0].strategy_spec = "store_all";
  done[1].model_spec = "heavy_mlp:batch=2:hidden=4:depth=+2";
  done[1].strategy_spec = "uniform:segments=auto";
  done[2].model_spec = "heavy_mlp:depth=3:hidden=4:batch=2";
  done[2].strategy_spec = "store_all";
  o.completed = CompletedPairs(done).value();
  done[2].model_spec = "heavy_mlp:depth=3:hidden=four";
  EXPECT_THAT(std::string(CompletedPairs(done).status().message()),
              HasSubstr("holds a row whose spec is not one"));
  std::vector<ConfigResult> streamed;
  std::ostringstream progress;
  absl::StatusOr<std::vector<ConfigResult>> rows = RunSweep(
      o, Cpu(),
      [&](const ConfigResult& r) {
        streamed.push_back(r);
        return absl::OkStatus();
      },
      progress);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(streamed.size(), 1u);  // the first model skipped; of the second, only uniform
  EXPECT_EQ(streamed[0].model_spec, "heavy_mlp:depth=3:hidden=4:batch=2");
  EXPECT_EQ(streamed[0].strategy_spec, "uniform:segments=auto:budget=none:offload=no");
  EXPECT_EQ(streamed[0].status, RowStatus::kOk);
  EXPECT_THAT(progress.str(), HasSubstr("already in results.csv, skipped"));
}

TEST(Sweep, TimeLimitStopsStartingModelsButAlwaysRunsTheFirst) {
  SweepOptions o = Tiny();
  o.models = BindModels({"heavy_mlp:depth=2:hidden=4:batch=2", "heavy_mlp:depth=3:hidden=4:batch=2",
                         "heavy_mlp:depth=4:hidden=4:batch=2"})
                 .value();
  o.strategies = BindStrategies({"uniform"}).value();
  o.time_limit_s = 1e-9;  // spent by the time the first model is done
  std::ostringstream progress;
  absl::StatusOr<std::vector<ConfigResult>> rows = RunSweep(
      o, Cpu(), [](const ConfigResult&) { return absl::OkStatus(); }, progress);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);  // store_all and uniform of the first model only
  EXPECT_EQ((*rows)[1].model_spec, "heavy_mlp:depth=2:hidden=4:batch=2");
  EXPECT_THAT(progress.str(), HasSubstr("models 2..3 not started"));

  o.time_limit_s = 3600;
  rows = RunSweep(
      o, Cpu(), [](const ConfigResult&) { return absl::OkStatus(); }, progress);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), 6u);

  o.time_limit_s = -1;
  EXPECT_THAT(std::string(ValidateSweep(o).message()), HasSubstr("time limit -1 s"));
}

TEST(ResultCells, HasEveryColumnAndQuotesWhatNeedsIt) {
  ConfigResult r;
  r.model = "m";
  r.strategy = "s";
  r.message = "a, \"b\"";
  EXPECT_EQ(ResultCells(r).size(), ResultColumns().size());
  EXPECT_EQ(CsvField(r.message), "\"a, \"\"b\"\"\"");
  EXPECT_EQ(CsvField("plain"), "plain");
}

}  // namespace
}  // namespace ckpt
