#include "experiments/output/report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/base/bytes.h"
#include "core/base/files.h"
#include "core/base/printable.h"
#include "core/base/status_macros.h"
#include "experiments/output/gnuplot.h"
#include "experiments/records/results.h"
#include "experiments/records/results_csv.h"

namespace ckpt {
namespace {

std::string Pct(double ratio) {
  return std::isnan(ratio) ? "" : absl::StrFormat("%+.1f%%", (ratio - 1) * 100);
}
std::string Saving(double ratio) {
  return std::isnan(ratio) ? "" : absl::StrFormat("%.1f%%", (1 - ratio) * 100);
}
std::string Ratio(double a, double b) {
  return std::isnan(a) || std::isnan(b) || b == 0 ? "" : absl::StrFormat("%.4f", a / b);
}

// Models in order of first appearance.
std::vector<std::string> ModelsOf(const std::vector<ConfigResult>& rows) {
  std::vector<std::string> models;
  for (const ConfigResult& r : rows) {
    if (std::find(models.begin(), models.end(), r.model) == models.end()) {
      models.push_back(r.model);
    }
  }
  return models;
}

// The strategy a row of a budget planner run at a given budget (--budgets) belongs to, whose
// points form a frontier: its spec without the budget ("optimal:offload=no" for
// "optimal:budget=12MiB:offload=no"); empty for a strategy run at its own budget ("auto") or
// none. The budget parameter is "budget" in every planner.
std::string FrontierFamily(const std::string& strategy_spec) {
  const size_t at = strategy_spec.find(":budget=");
  if (at == std::string::npos) return "";
  const size_t begin = at + 8;
  const size_t end = std::min(strategy_spec.find(':', begin), strategy_spec.size());
  const std::string value = strategy_spec.substr(begin, end - begin);
  if (value == "auto" || value == "none") return "";
  return strategy_spec.substr(0, at) + strategy_spec.substr(end);
}

std::string ReadFirstMatch(const std::string& path, const std::string& key) {
  // A system file, read as every file is (core/base/files.h): /proc/cpuinfo is a regular file.
  absl::StatusOr<std::string> text = ReadRegularFile(path, int64_t{16} << 20);
  if (!text.ok()) return "unknown";
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (absl::StartsWith(line, key)) {
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos) return std::string(line);
      const size_t value = line.find_first_not_of(" \t", colon + 1);
      return value == absl::string_view::npos ? "" : std::string(line.substr(value));
    }
  }
  return "unknown";
}

// The data-parallel figures of `model`'s rows run by several ranks: what the gradients'
// all-reduce costs alone and what it added to the step. Empty when one process ran them.
std::string DataParallelSection(const std::string& model, const std::vector<ConfigResult>& rows) {
  std::string table;
  int world_size = 1;
  std::string backend;
  for (const ConfigResult& r : rows) {
    if (r.model != model || r.world_size <= 1) continue;
    world_size = r.world_size;
    backend = r.backend;
    if (!r.ok()) continue;
    absl::StrAppend(&table, "| ", r.strategy, " | ", absl::StrFormat("%.3f", r.step_ms_median),
                    " | ", absl::StrFormat("%.3f", r.allreduce_alone_ms), " | ",
                    absl::StrFormat("%.3f", r.allreduce_exposed_ms), " | ",
                    Ratio(r.allreduce_exposed_ms, r.allreduce_alone_ms), " |\n");
  }
  if (world_size <= 1) return "";
  return absl::StrCat(
      "\nData parallel: ", world_size, " ranks (", backend,
      "), each on its share of the batch. Bytes are per rank (the largest rank's; the baseline "
      "holds the reducer's gradient buckets, as many bytes as the parameters), step times the "
      "slowest rank's, one configuration at a time. The gradients' all-reduce: alone, with "
      "nothing beside it; exposed, what it added to the step (the step with the reducer minus "
      "the same step without it, median over rounds). Exposed / alone: 0 where backward hid it "
      "all, 1 where it hid none, above 1 where copying into the buckets and the ranks' "
      "contention cost more than the all-reduce itself.\n\n"
      "| strategy | step ms | all-reduce alone ms | exposed ms | exposed / alone |\n"
      "| --- | ---: | ---: | ---: | ---: |\n",
      table);
}

// Below this share of the step, a plan's copies are within the rounds' timing noise (a percent
// or two of the step on this project's machines), and their hidden share is not given.
constexpr double kLeastTimedCopyShare = 0.05;

// The copies of `model`'s offloading rows: what they take alone at the profile's rates and
// what the step exposed of them, predicted and measured against the same plan checkpointed.
// Empty when no row offloads.
std::string OffloadSection(const std::string& model, const std::vector<ConfigResult>& rows) {
  std::string table;
  double to_host = ConfigResult::kUnknown, from_host = ConfigResult::kUnknown;
  auto ms = [](double v) { return std::isnan(v) ? std::string() : absl::StrFormat("%.3f", v); };
  for (const ConfigResult& r : rows) {
    if (r.model != model || !r.ok() || r.offloaded_bytes == 0) continue;
    to_host = r.to_host_gbps;
    from_host = r.from_host_gbps;
    const double hidden = 1 - r.copy_exposed_ms / r.copy_ms;
    std::string hidden_cell;
    if (r.copy_ms < kLeastTimedCopyShare * r.step_ms_median) {
      hidden_cell = absl::StrFormat("(copies < %.0f%% of the step)", 100 * kLeastTimedCopyShare);
    } else if (!std::isnan(hidden)) {
      hidden_cell = absl::StrFormat("%.0f%%", 100 * hidden);
    }
    absl::StrAppend(&table, "| ", r.strategy, " | ", FormatMib(r.offloaded_bytes, 2), " | ",
                    ms(r.copy_ms), " | ", ms(r.predicted_copy_exposed_ms), " | ",
                    ms(r.copy_exposed_ms), " | ", hidden_cell, " |\n");
  }
  if (table.empty()) return "";
  return absl::StrCat(
      "\nOffload copies",
      std::isnan(to_host) ? std::string(" (no copy rates in the profile)")
                          : absl::StrFormat(" at %.2f GB/s to the host and %.2f GB/s back (the "
                                            "profile's rates; see the run's copies line above)",
                                            to_host, from_host),
      ". Alone: the plan's copies each step at those rates, with nothing beside them. Exposed: "
      "what they added to the step, the step less the same plan's with every offloaded segment "
      "checkpointed instead (predicted by the time model; measured as the median over rounds, "
      "each twin timed right after its plan). Hidden: 1 - measured exposed / alone; near 0 "
      "where the step waits for its copies (a CPU's memcpys), near 100% where the compute hid "
      "them; not given where the copies take under ",
      absl::StrFormat("%.0f%%", 100 * kLeastTimedCopyShare),
      " of the step, within the timing noise.\n\n"
      "| strategy | moved each way MiB | copies alone ms | exposed ms, predicted | exposed ms, "
      "measured | hidden |\n| --- | ---: | ---: | ---: | ---: | ---: |\n",
      table);
}

// The machine: CPU model, cores, memory, OS (from /proc and uname).
std::string DescribeMachine() {
  utsname u{};
  uname(&u);
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const int64_t memory = int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGESIZE);
  return absl::StrFormat("%s, %ld cores, %s GiB; %s %s %s",
                         ReadFirstMatch("/proc/cpuinfo", "model name"), cores, FormatGib(memory, 1),
                         u.sysname, u.release, u.machine);
}

}  // namespace

absl::Status WriteReport(const std::string& dir, const std::vector<ConfigResult>& rows,
                         const RunInfo& info, const std::string& appendix) {
  std::string md = "# ckptlab sweep report\n\n";
  absl::StrAppend(&md, "- machine: ", DescribeMachine(), "\n- runtime: ", info.runtime,
                  info.gemm_gflops > 0
                      ? absl::StrFormat("\n- float32 matrix products: %.1f GFLOP/s measured at "
                                        "start-up (1024^3, the median of repeated products)",
                                        info.gemm_gflops)
                      : std::string(),
                  "\n- memory: ", info.meter, info.cap.empty() ? "" : "; ", info.cap,
                  info.copies.empty() ? "" : "\n- offload copies: ", info.copies,
                  info.precision.empty() ? "" : "\n- precision: ", info.precision, "\n- command: `",
                  info.command, "`\n\n");
  absl::StrAppend(&md,
                  "Savings and overheads are against store_all on the same model, measured "
                  "side by side (timing interleaved, ratio per round, median). Peak = highest "
                  "live tensor bytes above the baseline (parameters, batch) during a step. "
                  "Predicted = the analytical memory model (core/plan/memory_model.h) and the time "
                  "model (core/plan/time_model.h). Raw data: results.csv.\n\n");
  for (const std::string& model : ModelsOf(rows)) {
    absl::StrAppend(&md, "## ", model, "\n\n");
    for (const ConfigResult& r : rows) {
      // The hardware's share: store_all's useful work per second against the GEMM rate.
      const double achieved = r.achieved_gflops;
      if (r.model != model || r.strategy != "store_all" || std::isnan(achieved)) continue;
      absl::StrAppend(&md, absl::StrFormat("store_all runs %.4f GFLOP of matrix products a step "
                                           "at %.1f GFLOP/s",
                                           r.step_gflop, achieved));
      if (info.gemm_gflops > 0) {
        absl::StrAppend(&md, absl::StrFormat(", %.0f%% of the measured matrix-product rate",
                                             100 * achieved / info.gemm_gflops));
      }
      absl::StrAppend(&md, ".\n\n");
    }
    absl::StrAppend(
        &md,
        "| strategy | status | activations MiB | activation saving | peak MiB | peak saving | "
        "time overhead | step ms | predicted / measured step | recomputed stages | "
        "predicted / measured activations | predicted / measured peak | host peak MiB | "
        "max abs grad diff |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
        "---: | ---: |\n");
    for (const ConfigResult& r : rows) {
      if (r.model != model) continue;
      if (!r.ok()) {
        absl::StrAppend(&md, "| ", r.strategy, " | ", RowStatusName(r.status), " | ",
                        absl::StrReplaceAll(r.message, {{"|", "/"}}), " |||||||||||||\n");
        continue;
      }
      absl::StrAppend(
          &md, "| ", r.strategy, " | ok | ", FormatMib(r.activation_bytes, 2), " | ",
          Saving(r.activation_vs_store_all), " | ", FormatMib(r.peak_above_baseline_bytes(), 2),
          " | ", Saving(r.peak_vs_store_all), " | ", Pct(r.overhead_vs_store_all), " | ",
          absl::StrFormat("%.3f", r.step_ms_median), " | ",
          Ratio(r.predicted_step_ms, r.step_ms_median), " | ", r.recompute_forwards, " | ",
          Ratio(r.predicted.activation_bytes, r.activation_bytes), " | ",
          Ratio(r.predicted.peak_bytes, r.peak_above_baseline_bytes()), " | ",
          r.host_peak_bytes > 0 ? FormatMib(r.host_peak_bytes, 2) : std::string(), " | ",
          std::isnan(r.max_grad_diff_vs_store_all)
              ? std::string()
              : absl::StrFormat("%g", r.max_grad_diff_vs_store_all),
          " |\n");
    }
    absl::StrAppend(&md, OffloadSection(model, rows), DataParallelSection(model, rows));
    for (const ConfigResult& r : rows) {
      if (r.model == model && !r.plan.empty()) {
        absl::StrAppend(&md, "\n- `", r.strategy, "`: `", r.plan, "`");
      }
    }
    absl::StrAppend(&md, "\n\n");
  }
  absl::StrAppend(&md, "![memory against time](pareto.png)\n\n", appendix);
  return WriteFileAtomically(dir + "/report.md", Printable(md, LineBreaks::kKeep));
}

std::vector<size_t> ParetoFront(const std::vector<std::pair<double, double>>& points) {
  std::vector<size_t> order(points.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return points[a].first < points[b].first ||
           (points[a].first == points[b].first && points[a].second < points[b].second);
  });
  std::vector<size_t> front;
  double best_memory = INFINITY;
  for (size_t i : order) {
    if (points[i].second < best_memory) {
      front.push_back(i);
      best_memory = points[i].second;
    }
  }
  return front;
}

absl::Status WriteParetoPlot(const std::string& dir, const std::vector<ConfigResult>& rows) {
  const std::vector<std::string> models = ModelsOf(rows);
  std::string data;
  // Each strategy a marker of its own, named in the panel's key: names written beside the points
  // would overlap wherever strategies land close.
  std::string gp = absl::StrCat(
      PanelsPreamble("pareto", models.size(), 2, 820, 440,
                     "'Peak memory against step time (lower left is better)'"),
      "set key outside right top vertical Left reverse font ',8' spacing 0.9\nset grid\n",
      // From zero on both axes, so that heights and widths compare as ratios.
      "set xrange [0:*]\nset yrange [0:*]\nset offsets 0, graph 0.05, graph 0.05, 0\n",
      "set xlabel 'step time, ms (median)'\n", "set ylabel 'peak above baseline, MiB'\n");
  int block = 0;
  for (const std::string& model : models) {
    std::vector<std::pair<double, double>> points;
    std::vector<std::string> names;
    // A strategy run at several budgets ("optimal:budget=8MiB", ...) is a frontier: its points
    // by peak, joined.
    std::map<std::string, std::vector<std::pair<double, double>>> frontiers;
    for (const ConfigResult& r : rows) {
      if (r.model != model || !r.ok()) continue;
      const std::pair<double, double> point(r.step_ms_median,
                                            r.peak_above_baseline_bytes() / 1048576.0);
      points.push_back(point);
      const std::string family = FrontierFamily(r.strategy_spec);
      if (!family.empty()) {
        frontiers[family].push_back(point);
        names.push_back("");  // the frontier's line names them
      } else {
        names.push_back(r.strategy);
      }
    }
    if (points.empty()) continue;
    absl::StrAppend(&data, "# ", GpDataLabel(model), "\n");
    for (size_t i = 0; i < points.size(); ++i) {
      absl::StrAppend(&data, absl::StrFormat("%.4f %.6f ", points[i].first, points[i].second),
                      GpDataLabel(names[i]), "\n");
    }
    absl::StrAppend(&data, "\n\n# Pareto front\n");
    for (size_t i : ParetoFront(points)) {
      absl::StrAppend(&data, absl::StrFormat("%.4f %.6f\n", points[i].first, points[i].second));
    }
    absl::StrAppend(&data, "\n\n");
    // Filled markers first; a color and a marker each, so that no two strategies look alike.
    constexpr int kPointTypes[] = {7, 5, 9, 11, 13, 15, 1, 2, 3, 4, 6, 8, 10, 12, 14};
    constexpr int kNumPointTypes = sizeof(kPointTypes) / sizeof(kPointTypes[0]);
    std::vector<std::string> plots = {
        absl::StrCat("'pareto.dat' index ", block + 1,
                     " using 1:2 with linespoints lw 2 dt 2 lc 'gray40' pt 6 ps 2.4 "
                     "title 'Pareto front'")};
    for (size_t i = 0, k = 0; i < points.size(); ++i) {
      if (names[i].empty()) continue;  // on its frontier's line
      plots.push_back(absl::StrCat("'' index ", block, " every ::", i, "::", i,
                                   " using 1:2 with points pt ", kPointTypes[k % kNumPointTypes],
                                   " ps 1.5 lc ", k % 8 + 1, " title ", GpLiteral(names[i]),
                                   " noenhanced"));
      ++k;
    }
    block += 2;
    for (auto& [family, line] : frontiers) {
      std::sort(line.begin(), line.end(),
                [](const auto& a, const auto& b) { return a.second < b.second; });
      absl::StrAppend(&data, "# ", GpDataLabel(family), " at each budget\n");
      for (const auto& [ms, mib] : line)
        absl::StrAppend(&data, absl::StrFormat("%.4f %.6f\n", ms, mib));
      absl::StrAppend(&data, "\n\n");
      plots.push_back(absl::StrCat("'' index ", block++, " using 1:2 with linespoints lw 2 pt 5 ",
                                   "title ", GpLiteral(family + " at each budget"), " noenhanced"));
    }
    absl::StrAppend(&gp, Panel(model, plots));
  }
  return DrawPanels(dir, "pareto", data, gp);
}

absl::Status WriteDepthPlot(const std::string& dir, const std::vector<DepthPoint>& points) {
  std::string csv = "model,strategy,depth,activation_bytes\n";
  std::vector<std::string> models, strategies;
  for (const DepthPoint& p : points) {
    absl::StrAppend(&csv, CsvField(p.model), ",", CsvField(p.strategy), ",", p.depth, ",",
                    p.activation_bytes, "\n");
    if (std::find(models.begin(), models.end(), p.model) == models.end()) models.push_back(p.model);
    if (std::find(strategies.begin(), strategies.end(), p.strategy) == strategies.end()) {
      strategies.push_back(p.strategy);
    }
  }
  // One data block per (model, strategy).
  std::string data;
  std::string gp = absl::StrCat(
      PanelsPreamble(
          "depth", models.size(), models.size(), 640, 460,
          "'Activation bytes after forward against depth (log-log): O(L), O(sqrt L), O(1)'"),
      "set logscale xy 2\nset grid\nset key outside bottom center horizontal\n",
      "set xlabel 'depth parameter of the model'\n", "set ylabel 'activations, KiB'\n");
  int block = 0;
  for (const std::string& model : models) {
    std::vector<std::string> plots;
    for (const std::string& strategy : strategies) {
      absl::StrAppend(&data, "# ", GpDataLabel(model), " ", GpDataLabel(strategy), "\n");
      for (const DepthPoint& p : points) {
        if (p.model == model && p.strategy == strategy) {
          absl::StrAppend(&data, p.depth, " ", std::max(p.activation_bytes, int64_t{1}) / 1024.0,
                          "\n");
        }
      }
      absl::StrAppend(&data, "\n\n");
      plots.push_back(absl::StrCat("'depth.dat' index ", block++,
                                   " using 1:2 with linespoints lw 2 title ", GpLiteral(strategy),
                                   " noenhanced"));
    }
    absl::StrAppend(&gp, Panel(model, plots));
  }
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/depth.csv", csv));
  return DrawPanels(dir, "depth", data, gp);
}

}  // namespace ckpt
