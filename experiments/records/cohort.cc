#include "experiments/records/cohort.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace ckpt {
namespace {

// The pairs as text and back, for rank 0 to give them to the others.
std::string EncodePairs(const std::set<std::pair<std::string, std::string>>& pairs) {
  std::string text;
  for (const auto& [a, b] : pairs) absl::StrAppend(&text, a.size(), ":", a, b.size(), ":", b);
  return text;
}
std::set<std::pair<std::string, std::string>> DecodePairs(absl::string_view text) {
  std::set<std::pair<std::string, std::string>> pairs;
  auto next = [&text](std::string& out) {
    const size_t colon = text.find(':');
    size_t n = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(text.substr(0, colon), &n) ||
        colon + 1 + n > text.size()) {
      return false;
    }
    out = std::string(text.substr(colon + 1, n));
    text.remove_prefix(colon + 1 + n);
    return true;
  };
  std::string a, b;
  while (!text.empty() && next(a) && next(b)) pairs.emplace(a, b);
  return pairs;
}

}  // namespace

absl::Status Cohort::AgreeOn(const absl::Status& local) const {
  return AgreeOnOutcome(group_, local);
}

absl::StatusOr<bool> Cohort::OnEvery(bool value) const { return OnEveryRank(group_, value); }

absl::Status Cohort::Same(const std::string& text, const std::string& what) const {
  return SameOnEveryRank(group_, text, what);
}

absl::StatusOr<std::string> Cohort::FromRankZero(const std::string& text) const {
  if (group_ == nullptr) return text;
  absl::StatusOr<std::string> shared = group_->FromRankZero(text);
  if (!shared.ok()) return RankError(*group_, "lost rank 0", shared.status());
  return shared;
}

absl::StatusOr<Cohort::Pairs> Cohort::FromRankZero(const Pairs& pairs) const {
  if (group_ == nullptr) return pairs;
  ASSIGN_OR_RETURN(const std::string text, FromRankZero(EncodePairs(pairs)));
  return DecodePairs(text);
}

absl::StatusOr<std::vector<double>> Cohort::Mean(const std::vector<double>& values) const {
  if (group_ == nullptr) return values;
  absl::StatusOr<std::vector<double>> mean = group_->Mean(values);
  if (!mean.ok()) return RankError(*group_, "lost the other ranks", mean.status());
  return mean;
}

absl::StatusOr<std::vector<double>> Cohort::Max(const std::vector<double>& values) const {
  if (group_ == nullptr) return values;
  absl::StatusOr<std::vector<double>> most = group_->Max(values);
  if (!most.ok()) return RankError(*group_, "lost the other ranks", most.status());
  return most;
}

absl::Status Cohort::Combine(ConfigResult& row, std::vector<double>& variant_ms) const {
  if (group_ == nullptr) return absl::OkStatus();
  std::vector<const ResultColumn*> largest, mean;
  std::vector<double> most, average;
  for (const ResultColumn& column : ResultColumns()) {
    if (column.across == AcrossRanks::kLargest) {
      largest.push_back(&column);
      most.push_back(column.get(row));
    } else if (column.across == AcrossRanks::kMean) {
      mean.push_back(&column);
      average.push_back(column.get(row));
    }
  }
  const size_t rounds = row.step_ms.size();
  most.insert(most.end(), row.step_ms.begin(), row.step_ms.end());
  most.insert(most.end(), variant_ms.begin(), variant_ms.end());
  ASSIGN_OR_RETURN(most, Max(most));
  ASSIGN_OR_RETURN(average, Mean(average));
  for (size_t i = 0; i < largest.size(); ++i) largest[i]->set(row, most[i]);
  for (size_t i = 0; i < mean.size(); ++i) mean[i]->set(row, average[i]);
  const size_t first_round = largest.size();
  for (size_t i = 0; i < rounds; ++i) row.step_ms[i] = most[first_round + i];
  for (size_t i = 0; i < variant_ms.size(); ++i) variant_ms[i] = most[first_round + rounds + i];
  return absl::OkStatus();
}

}  // namespace ckpt
