// The sweep: every model x strategy, measured side by side on one device.
//
// For each model: build it once (same parameters and batch for every strategy), profile it,
// plan every strategy, then time all strategies interleaved (A B C C B A A B C ...) after
// warm-up so that machine drift and a place in the round hit them alike, and finally check each
// strategy's gradients against store_all's. store_all always runs first: it is the reference for
// every ratio. A configuration that fails (bad plan, out of memory) becomes a row with its status
// and message; the sweep goes on.
#pragma once

#include <functional>
#include <ostream>
#include <vector>

#include "absl/status/statusor.h"
#include "core/run/memory_meter.h"
#include "experiments/output/report.h"
#include "experiments/records/results.h"
#include "experiments/sweep_options.h"

namespace ckpt {

// Runs the sweep. `on_result` is called as each configuration finishes (the CSV append);
// an error from it stops the sweep. Progress lines go to `progress`. With a group, an error
// ends the sweep when a rank fails, disagrees or cannot be reached.
absl::StatusOr<std::vector<ConfigResult>> RunSweep(
    const SweepOptions& options, MemoryMeter& meter,
    const std::function<absl::Status(const ConfigResult&)>& on_result, std::ostream& progress);

// The depth scan: for each model, its `depth` parameter set to each of `depths`, one step of
// every strategy, activation bytes measured (failures are skipped and reported on `out`).
absl::StatusOr<std::vector<DepthPoint>> RunDepthScan(const SweepOptions& options,
                                                     const std::vector<int>& depths,
                                                     MemoryMeter& meter, std::ostream& out);

// The time overhead of a strategy against the reference timed in the same rounds: the median
// over rounds of (its time / the reference's time in that round). Pairing by round cancels
// drift that hits a whole round (another process, clock changes). NaN without rounds.
double OverheadRatio(const std::vector<double>& step_ms, const std::vector<double>& reference_ms);

// A fixed-width table of the results, grouped by model.
std::string FormatTable(const std::vector<ConfigResult>& results);

}  // namespace ckpt
