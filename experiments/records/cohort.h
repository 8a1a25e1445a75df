// The processes a sweep runs in, as one object: the ranks of a data-parallel run (a
// ProcessGroup, core/dist/data_parallel.h), or this process alone, for which every call answers
// for itself. The sweep reads the same either way, with no "if ranks" in its loops:
//
//   const Cohort cohort(options.group);
//   RETURN_IF_ERROR(cohort.AgreeOn(step.status()));  // every rank stepped alike
//   RETURN_IF_ERROR(cohort.Combine(row, variant_ms)); // bytes the largest rank's, ...
//
// Every call but writes() is a collective: each rank calls it at the same point. An error is
// Aborted, naming this rank (RankError): a rank died, left, or took another path.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dist/data_parallel.h"
#include "experiments/records/results.h"

namespace ckpt {

class Cohort {
 public:
  // `group` may be null (one process); it must outlive the cohort.
  explicit Cohort(ProcessGroup* group) : group_(group) {}

  bool alone() const { return group_ == nullptr; }
  int world_size() const { return group_ == nullptr ? 1 : group_->world_size(); }
  ProcessGroup* group() const { return group_; }

  // OK when every rank's step ended alike (AgreeOnOutcome), so each goes on with its own.
  absl::Status AgreeOn(const absl::Status& local) const;
  // Whether `value` holds on every rank.
  absl::StatusOr<bool> OnEvery(bool value) const;
  // An error naming `what` unless `text` is the same on every rank.
  absl::Status Same(const std::string& text, const std::string& what) const;
  // Rank 0's `text`, or its set of (model, strategy) pairs, on every rank.
  using Pairs = std::set<std::pair<std::string, std::string>>;
  absl::StatusOr<std::string> FromRankZero(const std::string& text) const;
  absl::StatusOr<Pairs> FromRankZero(const Pairs& pairs) const;
  // The ranks' mean and largest of each of `values`, element-wise.
  absl::StatusOr<std::vector<double>> Mean(const std::vector<double>& values) const;
  absl::StatusOr<std::vector<double>> Max(const std::vector<double>& values) const;

  // One configuration's row combined across the ranks, on every rank: each column as its
  // AcrossRanks says (results.h), and each timed round's step (row.step_ms) and `variant_ms`
  // (the same round's step of the configuration's variant) the slowest rank's. Every rank must
  // pass rows of the same rounds.
  absl::Status Combine(ConfigResult& row, std::vector<double>& variant_ms) const;

 private:
  ProcessGroup* group_;
};

}  // namespace ckpt
