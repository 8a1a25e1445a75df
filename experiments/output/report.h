// The sweep's human-facing outputs, made from results.csv (so a resumed sweep reports every
// row): report.md, a table per model with savings and overheads against store_all, and plots
// rendered by gnuplot (pareto.png: memory against step time per model, the Pareto front
// marked; depth.png: activation bytes against depth, log-log).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "experiments/records/results.h"

namespace ckpt {

struct RunInfo {
  std::string command;     // the command line
  std::string runtime;     // LibTorch, BLAS, threads, CUDA (DescribeRuntime)
  std::string meter;       // how memory was counted
  std::string cap;         // the memory caps in force, in words
  std::string copies;      // where offload copy times come from, in words (empty: not said)
  std::string precision;   // what the steps ran in, in words (empty: not said)
  double gemm_gflops = 0;  // the device's measured float32 matrix-product rate (0: not measured)
};

// Writes `dir`/report.md (whole or not at all: core/base/files.h), with `appendix`
// (more markdown, e.g. the training section) at the end.
absl::Status WriteReport(const std::string& dir, const std::vector<ConfigResult>& rows,
                         const RunInfo& info, const std::string& appendix = "");

// The Pareto front of (time, memory) points: indices of the points that no other point beats
// on both (ties: the earlier one), in order of time.
std::vector<size_t> ParetoFront(const std::vector<std::pair<double, double>>& points);

// Writes pareto.dat and pareto.gp to `dir` and draws pareto.png from them (RenderPlot's errors:
// Unavailable if gnuplot is not installed, the data files written anyway).
absl::Status WriteParetoPlot(const std::string& dir, const std::vector<ConfigResult>& rows);

// One point of the depth scan: a strategy's activation bytes at a depth.
struct DepthPoint {
  std::string model;  // the model spec without its depth
  std::string strategy;
  int depth = 0;
  int64_t activation_bytes = 0;
};

// Writes depth.csv, depth.gp and (with gnuplot) depth.png: activation bytes against depth per
// strategy, log-log, one panel per model.
absl::Status WriteDepthPlot(const std::string& dir, const std::vector<DepthPoint>& points);

}  // namespace ckpt
