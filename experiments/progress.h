// Progress on a stream for the long runs (the sweep, --predict): a line per unit of work with
// the units done of all, the elapsed time and an estimate of the time left, and a profile's
// progress at most every few seconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "absl/strings/str_format.h"
#include "core/base/printable.h"

namespace ckpt {

// Seconds since `start`.
inline double Elapsed(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A line per round, with the steps done, the elapsed time and an estimate of the time left
// (from the average step so far).
class Progress {
 public:
  Progress(std::ostream& out, int64_t total_steps) : out_(out), total_(total_steps) {}
  void Steps(int64_t n) { done_ += n; }
  // Steps found once planning showed them (an offloading plan's twin), or dropped (negative).
  void AddToTotal(int64_t n) { total_ += n; }
  // `what` as a line, escaped (core/base/printable.h).
  void Line(const std::string& what) {
    const double elapsed = Elapsed(start_);
    const double eta = done_ > 0 ? elapsed / done_ * (total_ - done_) : 0;
    out_ << absl::StrFormat("[%d/%d steps] %s  (%.0f s elapsed, ETA %.0f s)\n", done_, total_,
                            Printable(what), elapsed, eta);
    last_line_ = std::chrono::steady_clock::now();
  }
  // `what` as a line where the last was a few seconds ago or more: the start of a piece of work
  // that is usually quick (a plan), said where the work before it was not.
  void Lazily(const std::string& what) {
    if (Elapsed(last_line_) >= kSecondsBetweenLines) Line(what);
  }
  // A profile's progress (ProfileOptions::progress), a line at most every few seconds.
  std::function<void(const char*, int, int)> Profiling(const std::string& model) {
    return [this, model](const char* phase, int done, int stages) {
      if (Elapsed(last_line_) < kSecondsBetweenLines) return;
      Line(absl::StrFormat("profiling %s: %s stage %d of %d", model, phase, done, stages));
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
