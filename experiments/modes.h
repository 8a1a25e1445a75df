// What the sweep does in each mode, once its request is read and its machine set up
// (experiments/sweep_main.cc reads the flags): --list, --explain, --predict, and the sweep itself
// (which --report_only ends at the report). Every error is a Status for the main, bad input
// marked BadInput.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/run/memory_meter.h"
#include "experiments/ranks.h"
#include "experiments/request.h"
#include "experiments/sweep_options.h"

namespace ckpt {

// A line on standard error, "sweep: " and `text`, which is escaped (core/base/printable.h):
// whatever a path, a spec, a file or a library's message holds, it is one line and rewrites no
// terminal.
void Say(absl::string_view text);
// What was printed is an output too: an error when standard output could not be written (a
// closed pipe, a full disk).
absl::Status FlushStdout();

// --list: the presets, strategies, models and part actions of this build.
absl::Status List();
// --explain: each strategy's plan for each model as a tree, with its predicted memory. Its errors
// are bad input, as they were found before anything is written.
absl::Status Explain(const SweepOptions& options, MemoryMeter& meter);
// --predict: every strategy's memory and step time for each model at full size, into
// predict.csv and predict.md.
absl::Status PredictAll(const Request& request, const Machine& machine);
// The sweep proper, on every rank: the ranks joined and the folder opened (rank 0's), the rows
// measured, then the report; the others' exits checked and the closing line.
absl::Status Sweep(Request& request, const Machine& machine, Ranks& ranks);

}  // namespace ckpt
