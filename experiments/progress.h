// Progress on a stream for the long runs (the sweep, --predict): a line per unit of work with
// the units done of all, the elapsed time and an estimate of the time left, and a profile's
// progress at most every few seconds, with the profile's own estimate.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/printable.h"
#include "core/run/profiler.h"

namespace ckpt {

// Seconds since `start`.
inline double Elapsed(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A line per round, with the steps done, the elapsed time and an estimate of the time left
// (from the average step so far; none before the first step).
class Progress {
 public:
  Progress(std::ostream& out, int64_t total_steps) : out_(out), total_(total_steps) {}
  void Steps(int64_t n) { done_ += n; }
  // Steps found once planning showed them (an offloading plan's twin), or dropped (negative).
  void AddToTotal(int64_t n) { total_ += n; }
  // `what` as a line, escaped (core/base/printable.h).
  void Line(const std::string& what) {
    const double elapsed = Elapsed(start_);
    const std::string eta = done_ > 0
                                ? absl::StrFormat("ETA %.0f s", elapsed / done_ * (total_ - done_))
                                : std::string("no ETA before the first step");
    out_ << absl::StrFormat("[%d/%d steps] %s  (%.0f s elapsed, %s)\n", done_, total_,
                            Printable(what), elapsed, eta);
    last_line_ = std::chrono::steady_clock::now();
  }
  // `what` as a line where the last was a few seconds ago or more: the start of a piece of work
  // that is usually quick (a plan), said where the work before it was not.
  void Lazily(const std::string& what) {
    if (Elapsed(last_line_) >= kSecondsBetweenLines) Line(what);
  }
  // A profile's progress (ProfileOptions::progress), a line at most every few seconds: the
  // stage and the policy being measured, and the time left of the profile's measurements at
  // the pace of those done, each weighed by its stage's forward time (ProfileProgress::work);
  // the first line after one is done says it whenever it comes.
  std::function<void(const ProfileProgress&)> Profiling(const std::string& model) {
    std::chrono::steady_clock::time_point measuring_since;
    bool paced = false;  // whether a line has given the pace yet
    return [this, model, measuring_since, paced](const ProfileProgress& p) mutable {
      if (p.work_done == 0) measuring_since = std::chrono::steady_clock::now();
      const bool first_pace = p.work_done > 0 && !paced;
      if (!first_pace && Elapsed(last_line_) < kSecondsBetweenLines) return;
      std::string line =
          absl::StrFormat("profiling %s: %s stage %d of %d", model, p.phase, p.stage, p.stages);
      if (!p.policy.empty()) absl::StrAppend(&line, ", ", p.policy);
      if (p.measurements > 0) {
        absl::StrAppendFormat(&line, " (%d of %d measurements done", p.measurements_done,
                              p.measurements);
        if (p.work_done > 0) {
          paced = true;
          absl::StrAppendFormat(&line, ", about %.0f s left of the profile",
                                Elapsed(measuring_since) / p.work_done * (p.work - p.work_done));
        }
        line += ")";
      }
      Line(line);
    };
  }

 private:
  static constexpr double kSecondsBetweenLines = 5;
  std::ostream& out_;
  int64_t total_;
  int64_t done_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_line_ = start_;
};

}  // namespace ckpt
