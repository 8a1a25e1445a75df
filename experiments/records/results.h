// The results schema, declared once: what a configuration's row holds (ConfigResult) and its
// columns in results.csv, each a name and how its field is written and read back. The sweep
// writes rows through it, --resume and --report_only read them back through it into the same
// struct, and the report and the plots read the struct's fields: no column is named twice.
//
//   ASSIGN_OR_RETURN(CsvAppender csv, OpenResults(path));
//   RETURN_IF_ERROR(csv.Write(ResultCells(row)));
//   ASSIGN_OR_RETURN(std::vector<ConfigResult> rows, ReadResults(path));
//
// The columns are documented in docs/sweep.md ("results.csv").
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/plan/memory_model.h"
#include "experiments/records/results_csv.h"

namespace ckpt {

// How a row ended: a configuration's, a prediction's, a training curve's. Its name is what
// results.csv, predict.csv and curves.csv write.
enum class RowStatus {
  kOk,     // "ok"
  kOom,    // "oom": the configuration, or its plan, does not fit
  kError,  // "error": it failed otherwise; the row's message says why
};
absl::string_view RowStatusName(RowStatus status);
// The status `name` names (RowStatusName's inverse), or nullopt.
std::optional<RowStatus> ParseRowStatus(absl::string_view name);
// A failure's status: kOom for ResourceExhausted, else kError.
RowStatus FailureStatus(const absl::Status& why);

// One configuration's measurements: a row of results.csv.
struct ConfigResult {
  static constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  std::string model;     // canonical spec, resolved for the model (gpt2's size's shape)
  std::string strategy;  // canonical spec, parameters resolved for this model
  std::string device;
  RowStatus status = RowStatus::kOk;
  int64_t baseline_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t peak_bytes = 0;
  MemoryPrediction predicted;  // the analytical model's, above the baseline
  // What the allocator held at most in the configuration's first round (a warm-up round
  // unless --warmup=0), started with its cache emptied: what this configuration alone makes
  // the process occupy (CUDA); = peak_bytes on CPU.
  int64_t peak_reserved_bytes = 0;
  double predicted_step_ms = kUnknown;  // the time model's (core/plan/time_model.h)
  double step_ms_median = kUnknown;     // over the timed rounds
  double step_ms_min = kUnknown;
  double step_ms_max = kUnknown;
  // Against store_all; NaN (an empty cell) where either failed or there is nothing to compare.
  double overhead_vs_store_all = kUnknown;  // median over rounds of (this / store_all)
  double activation_vs_store_all = kUnknown;
  double peak_vs_store_all = kUnknown;  // of peak_bytes - baseline_bytes
  int64_t recompute_forwards = 0;
  // The host pool's (core/run/host_pool.h): its highest bytes above its own baseline during a step,
  // and the bytes copied to it each step (as many come back). 0 without offloading.
  int64_t host_peak_bytes = 0;
  int64_t offloaded_bytes = 0;
  // Offloading plans' copies (docs/offload.md): the profile's copy rates each way in GB/s
  // (measured on the device, or the assumed link), what the plan's copies take each step at
  // those rates with nothing beside them, and what of that the step exposes: predicted (the
  // time model's step less its step for the same plan checkpointed, Plan::WithoutOffload), and
  // measured (the median over rounds of the step less that twin's, timed right after it in the
  // same round; one process, with measured copy rates, not an assumed link's). Unknown without
  // offloading.
  double to_host_gbps = kUnknown;
  double from_host_gbps = kUnknown;
  double copy_ms = kUnknown;
  double predicted_copy_exposed_ms = kUnknown;
  double copy_exposed_ms = kUnknown;
  double max_grad_diff_vs_store_all = kUnknown;  // max |g - g_store_all| over every gradient
  // What the gradients were compared in (experiments/sweep.cc, CheckGradients): the run's dtype
  // ("float32", "float32 under bfloat16 autocast"), or "float64 twin" where the plan sums in
  // another order and that decided. Empty where they were not compared.
  std::string grad_check;
  double loss = 0;
  int64_t steps = 0;  // timed rounds measured
  // The model's matrix-product GFLOP per training step (three times the forward's, as the
  // stages declare them; 0 when they declare none): the same for every strategy, so its rate
  // is useful work per second, recomputation not counted.
  double step_gflop = 0;
  double achieved_gflops = kUnknown;  // step_gflop over the median step
  int threads = 0;                    // LibTorch's intra-op threads, as run
  int blas_threads = 0;               // OpenBLAS's, as run (0: not OpenBLAS, unknown)
  // Data parallel (core/dist/data_parallel.h): the ranks that ran it together and their backend
  // ("none" for one process). Bytes are then per rank (the largest rank's), step times the
  // slowest rank's in each round, the loss the mean of the ranks' (the global batch's): each
  // column's AcrossRanks says which.
  int world_size = 1;
  std::string backend = "none";
  // With world_size > 1: the median over rounds of what the gradients' all-reduce added to the
  // step (the step with the reducer minus the same step without it, each the slowest rank's),
  // and what the all-reduce of the buckets takes alone; 1 - exposed / alone of it overlapped
  // backward.
  double allreduce_exposed_ms = kUnknown;
  double allreduce_alone_ms = kUnknown;
  // The specs as bound, canonical (BoundModel::spec, BoundStrategy::spec): what --resume
  // matches, whatever writing a later command line uses.
  std::string model_spec;
  std::string strategy_spec;
  std::string plan;  // the plan as text (core/plan/plan_text.h)
  std::string message;

  // Not in results.csv: the timed rounds' step times, from which the sweep computes the
  // medians and the overheads.
  std::vector<double> step_ms;

  bool ok() const { return status == RowStatus::kOk; }
  double peak_above_baseline_bytes() const {
    return static_cast<double>(peak_bytes - baseline_bytes);
  }
};

// How a column's value combines across the ranks of a data-parallel run
// (experiments/records/cohort.h).
enum class AcrossRanks {
  kAlike,    // the same on every rank (a spec, a plan, a prediction from the ranks' mean
             // profile), or derived after combining (medians and ratios of the rounds)
  kLargest,  // the largest rank's: bytes, and times that the slowest rank sets
  kMean,     // the ranks' mean: the loss, which is then the global batch's
};

// A column: its name, its cell for a row, and how a cell read back sets the row (false: the
// cell is not what the column writes). A column of one number field also reads and sets it
// through `get` and `set`; only such a column combines across ranks (not kAlike).
struct ResultColumn {
  std::string name;
  std::function<std::string(const ConfigResult&)> write;
  std::function<bool(const std::string&, ConfigResult&)> read;
  AcrossRanks across = AcrossRanks::kAlike;
  std::function<double(const ConfigResult&)> get = nullptr;
  std::function<void(ConfigResult&, double)> set = nullptr;
  // What its cells hold, as a message refusing one says; and whether an ok row must have one.
  std::string accepted = "any text";
  bool required_if_ok = false;
};

// results.csv's columns, in order.
const std::vector<ResultColumn>& ResultColumns();
std::vector<std::string> ResultColumnNames();

// The row's cells, in column order.
std::vector<std::string> ResultCells(const ConfigResult& row);

// OK if the first row of `csv` (read from `path`) is the columns' names. Otherwise
// FailedPrecondition naming the file, the columns it lacks and those this version does not
// write (a results.csv from another version of the sweep cannot be resumed or reported), and
// what to do.
absl::Status CheckResultsHeader(const std::string& path,
                                const std::vector<std::vector<std::string>>& csv);

// Opens `path` to append rows to: an existing results.csv whose header is checked, or a new
// one made with its header alone (CsvAppender's errors otherwise).
absl::StatusOr<CsvAppender> OpenResults(const std::string& path);

// The rows of a results.csv, read back (ReadCsv's errors; CheckResultsHeader's; DataLoss naming
// the line, and the column of a cell that is not what its column writes and what it accepts, an
// ok row without its bytes, or a second row of one configuration).
absl::StatusOr<std::vector<ConfigResult>> ReadResults(const std::string& path);

}  // namespace ckpt
