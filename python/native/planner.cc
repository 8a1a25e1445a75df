// ckptlab's planner and size reader for Python, as a C ABI that python/ckptlab/native.py loads
// through ctypes (no LibTorch, no Python headers: a process with any torch loads it): the chain
// solver (strategies/chain_solver.h) on a chain whose stages are stored, each under one of its
// options, at every budget of a grid; and ParseByteSize, the one reader of sizes.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/base/bytes.h"
#include "strategies/chain_solver.h"

namespace {

constexpr int kMaxUnits = 1 << 14;

int Refuse(char* message, int size, const std::string& why) {
  if (message != nullptr && size > 0) std::snprintf(message, size, "%s", why.c_str());
  return 1;
}

}  // namespace

// For a chain of `stages` stages that the model's own code runs in order: boundaries[0..stages]
// (x_0 .. x_n: what stage i takes and returns, in bytes), options[i] (at least one way to run
// stage i), and per option, stage after stage: its forward and backward ms, the bytes it keeps
// until its backward (its output's included), and its forward's and backward's peak above them.
// Bytes are counted in units of `unit` (rounded to nearest). For each budget u = 0..max_units
// units: time_ms[u] (infinity where nothing fits) and chosen[u * stages + i], stage i's option
// (-1 where nothing fits). 0, or 1 with `message` saying which argument is out of range.
extern "C" int ckptlab_plan_options(int stages, const int64_t* boundaries, const int* options,
                                    const double* forward_ms, const double* backward_ms,
                                    const int64_t* kept, const int64_t* forward_transient,
                                    const int64_t* backward_transient, int64_t unit, int max_units,
                                    int* chosen, double* time_ms, char* message, int message_size) {
  using ckpt::chain::kMaxSolverStages;
  if (stages < 1 || stages > kMaxSolverStages) {
    return Refuse(message, message_size,
                  "stages=" + std::to_string(stages) + "; accepted: 1 to " +
                      std::to_string(kMaxSolverStages));
  }
  if (unit < 1 || max_units < 0 || max_units > kMaxUnits) {
    return Refuse(message, message_size,
                  "unit=" + std::to_string(unit) + ", max_units=" + std::to_string(max_units) +
                      "; accepted: a unit of at least 1 byte, 0 to " + std::to_string(kMaxUnits) +
                      " units");
  }
  ckpt::chain::Chain chain;
  chain.checkpoints = false;
  for (int i = 0; i <= stages; ++i) {
    if (boundaries[i] < 0) return Refuse(message, message_size, "a negative boundary");
  }
  int at = 0;
  for (int i = 0; i < stages; ++i) {
    if (options[i] < 1 || options[i] > 16) {
      return Refuse(message, message_size,
                    "stage " + std::to_string(i) + " has " + std::to_string(options[i]) +
                        " options; accepted: 1 to 16");
    }
    ckpt::chain::Stage stage;
    stage.first = stage.last = i;
    stage.input = boundaries[i];
    stage.output = boundaries[i + 1];
    for (int k = 0; k < options[i]; ++k, ++at) {
      if (kept[at] < 0 || forward_transient[at] < 0 || backward_transient[at] < 0 ||
          !std::isfinite(forward_ms[at]) || !std::isfinite(backward_ms[at]) || forward_ms[at] < 0 ||
          backward_ms[at] < 0) {
        return Refuse(message, message_size,
                      "stage " + std::to_string(i) + "'s option " + std::to_string(k) +
                          " has a negative or infinite figure");
      }
      ckpt::chain::Option option;
      option.policy_index = k;
      option.forward_ms = forward_ms[at];
      option.backward_ms = backward_ms[at];
      option.kept = kept[at];
      option.forward_transient = forward_transient[at];
      option.backward_transient = option.held_backward_transient = backward_transient[at];
      stage.options.push_back(option);
    }
    chain.stages.push_back(stage);
  }
  const ckpt::chain::Solver solver(ckpt::chain::Quantize(chain, unit), max_units);
  for (int u = 0; u <= max_units; ++u) {
    time_ms[u] = solver.Time(u);
    const bool fits = solver.Feasible(u);
    const std::vector<int> picked = fits ? solver.ScheduleAt(u).options : std::vector<int>();
    for (int i = 0; i < stages; ++i) chosen[u * stages + i] = fits ? picked[i] : -1;
  }
  return 0;
}

// `text` (NUL-terminated) read by ckpt::ParseByteSize into *bytes: 0, or 1 with `message` saying
// why (the text named, control bytes escaped).
extern "C" int ckptlab_parse_bytes(const char* text, int64_t* bytes, char* message,
                                   int message_size) {
  absl::StatusOr<int64_t> parsed = ckpt::ParseByteSize(text);
  if (!parsed.ok()) return Refuse(message, message_size, std::string(parsed.status().message()));
  *bytes = *parsed;
  return 0;
}
