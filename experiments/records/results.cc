#include "experiments/records/results.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"

namespace ckpt {

namespace {
constexpr std::pair<RowStatus, absl::string_view> kRowStatusNames[] = {
    {RowStatus::kOk, "ok"}, {RowStatus::kOom, "oom"}, {RowStatus::kError, "error"}};
}  // namespace

absl::string_view RowStatusName(RowStatus status) {
  for (const auto& [s, name] : kRowStatusNames) {
    if (s == status) return name;
  }
  return "error";
}

std::optional<RowStatus> ParseRowStatus(absl::string_view name) {
  for (const auto& [status, n] : kRowStatusNames) {
    if (n == name) return status;
  }
  return std::nullopt;
}

RowStatus FailureStatus(const absl::Status& why) {
  return why.code() == absl::StatusCode::kResourceExhausted ? RowStatus::kOom : RowStatus::kError;
}

namespace {

using Row = ConfigResult;

// A text column.
ResultColumn Text(std::string name, std::string Row::*field) {
  return {std::move(name), [field](const Row& r) { return r.*field; },
          [field](const std::string& cell, Row& r) {
            r.*field = cell;
            return true;
          }};
}

// `column` with `field` as its number, read and set (Cohort::Combine's way in).
template <typename Number>
ResultColumn WithNumber(ResultColumn column, Number Row::*field) {
  column.get = [field](const Row& r) { return static_cast<double>(r.*field); };
  column.set = [field](Row& r, double v) { r.*field = static_cast<Number>(v); };
  return column;
}

// A numeric column that combines across ranks as `across` says.
ResultColumn Across(AcrossRanks across, ResultColumn column) {
  column.across = across;
  return column;
}

// A whole number of at least 0 written as the columns write it (digits only), into `v`.
bool ReadCount(const std::string& cell, int64_t& v) {
  return !cell.empty() && std::all_of(cell.begin(), cell.end(), absl::ascii_isdigit) &&
         absl::SimpleAtoi(cell, &v);
}

// An integer column of values at least `least`, empty where the row failed (`only_ok`: then an
// ok row must have it) or where it is 0 (`zero_empty`).
template <typename Int>
ResultColumn Integer(std::string name, Int Row::*field, bool only_ok, bool zero_empty = false,
                     int64_t least = 0) {
  ResultColumn column = WithNumber<Int>(
      {std::move(name),
       [=](const Row& r) {
         return (only_ok && !r.ok()) || (zero_empty && r.*field == 0) ? std::string()
                                                                      : absl::StrCat(r.*field);
       },
       [=](const std::string& cell, Row& r) {
         int64_t v = 0;
         if (cell.empty() ? !(only_ok || zero_empty) : !ReadCount(cell, v) || v < least) {
           return false;
         }
         r.*field = static_cast<Int>(v);
         return true;
       }},
      field);
  column.accepted = absl::StrCat("a whole number of at least ", least,
                                 only_ok      ? ", empty where the row failed"
                                 : zero_empty ? ", empty for 0"
                                              : "");
  column.required_if_ok = only_ok;
  return column;
}

// How a real number is written: with `decimals` places, or (-1) the shortest %g, or (-2) %.9g.
std::string Written(double v, int decimals) {
  if (decimals == -1) return absl::StrFormat("%g", v);
  if (decimals == -2) return absl::StrFormat("%.9g", v);
  return absl::StrFormat("%.*f", decimals, v);
}

// A real column, written as Written says, empty where unknown (NaN), where the row failed
// (`only_ok`), or where it is 0 (`zero_empty`; read back as 0). Its values are at least 0 (inf
// too), unless `any_sign` (a loss, a difference of two times): then any number.
ResultColumn Real(std::string name, double Row::*field, int decimals, bool only_ok,
                  bool zero_empty = false, bool any_sign = false) {
  ResultColumn column = WithNumber<double>(
      {std::move(name),
       [=](const Row& r) {
         const double v = r.*field;
         if (std::isnan(v) || (only_ok && !r.ok()) || (zero_empty && v == 0)) {
           return std::string();
         }
         return Written(v, decimals);
       },
       [=](const std::string& cell, Row& r) {
         r.*field = zero_empty ? 0 : Row::kUnknown;
         if (cell.empty()) return true;
         // Infinite as the sweep may write it: a loss or a gradient difference that overflowed, a
         // ratio to a store_all of 0 bytes.
         if (cell == "inf" || (any_sign && cell == "-inf")) {
           r.*field = cell == "inf" ? HUGE_VAL : -HUGE_VAL;
           return true;
         }
         const bool written = std::all_of(cell.begin(), cell.end(), [](char c) {
           return absl::ascii_isdigit(c) || c == '.' || c == 'e' || c == '+' || c == '-';
         });
         return written && (absl::ascii_isdigit(cell[0]) || (any_sign && cell[0] == '-')) &&
                absl::SimpleAtod(cell, &(r.*field)) && std::isfinite(r.*field) &&
                (any_sign || r.*field >= 0);
       }},
      field);
  column.accepted = any_sign ? "a number (inf and -inf too), or empty where unknown"
                             : "a number of at least 0 (inf too), or empty where unknown";
  return column;
}

const std::vector<ResultColumn>& Columns() {
  static const auto* columns = new std::vector<ResultColumn>{
      Text("model", &Row::model),
      Text("strategy", &Row::strategy),
      Text("device", &Row::device),
      {"status", [](const Row& r) { return std::string(RowStatusName(r.status)); },
       [](const std::string& cell, Row& r) {
         const std::optional<RowStatus> status = ParseRowStatus(cell);
         if (status.has_value()) r.status = *status;
         return status.has_value();
       },
       AcrossRanks::kAlike, nullptr, nullptr, "ok, oom or error"},
      Across(AcrossRanks::kLargest,
             Integer("baseline_bytes", &Row::baseline_bytes, /*only_ok=*/true)),
      Across(AcrossRanks::kLargest, Integer("activation_bytes", &Row::activation_bytes, true)),
      Across(AcrossRanks::kLargest, Integer("peak_bytes", &Row::peak_bytes, true)),
      // Derived from the two before it: written for readers of the file, not read back.
      {"peak_above_baseline_bytes",
       [](const Row& r) { return r.ok() ? absl::StrCat(r.peak_bytes - r.baseline_bytes) : ""; },
       [](const std::string&, Row&) { return true; }},
      {"predicted_activation_bytes",
       [](const Row& r) { return r.ok() ? absl::StrCat(r.predicted.activation_bytes) : ""; },
       [](const std::string& cell, Row& r) {
         return cell.empty() || ReadCount(cell, r.predicted.activation_bytes);
       },
       AcrossRanks::kAlike, nullptr, nullptr, "a whole number, empty where the row failed",
       /*required_if_ok=*/true},
      // Absolute, as peak_bytes; the row holds it above the baseline (read before it).
      {"predicted_peak_bytes",
       [](const Row& r) {
         return r.ok() ? absl::StrCat(r.baseline_bytes + r.predicted.peak_bytes) : "";
       },
       [](const std::string& cell, Row& r) {
         int64_t absolute = 0;
         if (cell.empty()) return true;
         if (!ReadCount(cell, absolute) || absolute < r.baseline_bytes) return false;
         r.predicted.peak_bytes = absolute - r.baseline_bytes;
         return true;
       },
       AcrossRanks::kAlike, nullptr, nullptr,
       "a whole number of at least baseline_bytes, empty where the row failed",
       /*required_if_ok=*/true},
      Across(AcrossRanks::kLargest,
             Integer("peak_reserved_bytes", &Row::peak_reserved_bytes, true)),
      Real("predicted_step_ms", &Row::predicted_step_ms, 3, true),
      Real("step_ms_median", &Row::step_ms_median, 3, true),
      Real("step_ms_min", &Row::step_ms_min, 3, true),
      Real("step_ms_max", &Row::step_ms_max, 3, true),
      Real("overhead_vs_store_all", &Row::overhead_vs_store_all, 4, false),
      Real("activation_vs_store_all", &Row::activation_vs_store_all, 4, false),
      Real("peak_vs_store_all", &Row::peak_vs_store_all, 4, false),
      Integer("recompute_forwards", &Row::recompute_forwards, true),
      Across(AcrossRanks::kLargest, Integer("host_peak_bytes", &Row::host_peak_bytes, true)),
      {"predicted_host_peak_bytes",
       [](const Row& r) { return r.ok() ? absl::StrCat(r.predicted.host_peak_bytes) : ""; },
       [](const std::string& cell, Row& r) {
         return cell.empty() || ReadCount(cell, r.predicted.host_peak_bytes);
       },
       AcrossRanks::kAlike, nullptr, nullptr, "a whole number, empty where the row failed",
       /*required_if_ok=*/true},
      Across(AcrossRanks::kLargest, Integer("offloaded_bytes", &Row::offloaded_bytes, true)),
      Real("to_host_gbps", &Row::to_host_gbps, 3, true),
      Real("from_host_gbps", &Row::from_host_gbps, 3, true),
      Real("copy_ms", &Row::copy_ms, 3, true),
      Real("predicted_copy_exposed_ms", &Row::predicted_copy_exposed_ms, 3, true, false,
           /*any_sign=*/true),
      Real("copy_exposed_ms", &Row::copy_exposed_ms, 3, true, false, /*any_sign=*/true),
      Real("max_grad_diff_vs_store_all", &Row::max_grad_diff_vs_store_all, -1, true),
      Text("grad_check", &Row::grad_check),
      Across(AcrossRanks::kMean, Real("loss", &Row::loss, -2, true, false, /*any_sign=*/true)),
      Integer("steps", &Row::steps, false),
      Real("step_gflop", &Row::step_gflop, 4, false, /*zero_empty=*/true),
      Real("achieved_gflops", &Row::achieved_gflops, 2, true),
      Integer("threads", &Row::threads, false),
      Integer("blas_threads", &Row::blas_threads, false, /*zero_empty=*/true),
      Integer("world_size", &Row::world_size, false, false, /*least=*/1),
      Text("backend", &Row::backend),
      Real("allreduce_exposed_ms", &Row::allreduce_exposed_ms, 3, true, false, /*any_sign=*/true),
      Across(AcrossRanks::kLargest, Real("allreduce_alone_ms", &Row::allreduce_alone_ms, 3, true)),
      Text("model_spec", &Row::model_spec),
      Text("strategy_spec", &Row::strategy_spec),
      Text("plan", &Row::plan),
      Text("message", &Row::message),
  };
  return *columns;
}

}  // namespace

const std::vector<ResultColumn>& ResultColumns() { return Columns(); }

std::vector<std::string> ResultColumnNames() {
  std::vector<std::string> names;
  for (const ResultColumn& c : Columns()) names.push_back(c.name);
  return names;
}

std::vector<std::string> ResultCells(const ConfigResult& row) {
  std::vector<std::string> cells;
  for (const ResultColumn& c : Columns()) cells.push_back(c.write(row));
  return cells;
}

absl::Status CheckResultsHeader(const std::string& path,
                                const std::vector<std::vector<std::string>>& csv) {
  const std::vector<std::string> names = ResultColumnNames();
  if (!csv.empty() && csv[0] == names) return absl::OkStatus();
  const std::vector<std::string> header = csv.empty() ? std::vector<std::string>() : csv[0];
  const auto lacking = [](const std::vector<std::string>& a, const std::vector<std::string>& b) {
    std::vector<std::string> out;
    for (const std::string& x : a) {
      if (std::find(b.begin(), b.end(), x) == b.end()) out.push_back(x);
    }
    return out.empty() ? std::string("none") : absl::StrJoin(out, ", ");
  };
  return absl::FailedPreconditionError(absl::StrCat(
      path, " was not written by this version of the sweep, so it cannot be resumed or ",
      "reported (columns missing: ", lacking(names, header), "; not ours: ", lacking(header, names),
      header.size() == names.size() ? "; or in another order" : "", "); pass another --out"));
}

absl::StatusOr<CsvAppender> OpenResults(const std::string& path) {
  absl::StatusOr<std::vector<std::vector<std::string>>> existing = ReadCsv(path);
  if (existing.status().code() == absl::StatusCode::kNotFound) {
    return CsvAppender::Create(path, ResultColumnNames());
  }
  if (!existing.ok()) return existing.status();
  RETURN_IF_ERROR(CheckResultsHeader(path, *existing));
  return CsvAppender::Append(path);
}

absl::StatusOr<std::vector<ConfigResult>> ReadResults(const std::string& path) {
  std::vector<int> lines;
  ASSIGN_OR_RETURN(const auto csv, ReadCsv(path, &lines));
  RETURN_IF_ERROR(CheckResultsHeader(path, csv));
  const std::vector<ResultColumn>& columns = Columns();
  const auto damaged = [&](size_t i, absl::string_view what) {
    return absl::DataLossError(absl::StrCat(path, " line ", lines[i], ": ", what,
                                            "; the file is damaged: mend or remove that line, or "
                                            "pass another --out"));
  };
  std::map<std::pair<std::string, std::string>, int> line_of;  // a configuration's row
  std::vector<ConfigResult> rows;
  for (size_t i = 1; i < csv.size(); ++i) {
    const std::vector<std::string>& cells = csv[i];
    if (cells.size() != columns.size()) {
      return absl::DataLossError(absl::StrCat(
          path, " line ", lines[i],
          cells.size() == 1 && cells[0].empty()
              ? " is blank"
              : absl::StrCat(" has ", cells.size(), " fields, not the header's ", columns.size()),
          "; the file is damaged: mend or remove that line, or pass another --out"));
    }
    ConfigResult row;
    for (size_t c = 0; c < columns.size(); ++c) {
      if (!columns[c].read(cells[c], row)) {
        return damaged(i, absl::StrCat("column ", columns[c].name, " holds '", cells[c],
                                       "'; accepted: ", columns[c].accepted));
      }
    }
    for (size_t c = 0; c < columns.size(); ++c) {
      if (row.ok() && columns[c].required_if_ok && cells[c].empty()) {
        return damaged(i, absl::StrCat("an ok row without its ", columns[c].name));
      }
    }
    const auto [first, added] =
        line_of.emplace(std::make_pair(row.model_spec, row.strategy_spec), lines[i]);
    if (!added) {
      return damaged(i, absl::StrCat("a second row of ", row.model_spec, " under ",
                                     row.strategy_spec, " (line ", first->second, ")"));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace ckpt
