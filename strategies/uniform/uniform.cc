#include "strategies/uniform/uniform.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ckpt {
namespace {
const StrategyRegistration<Uniform> registration;

// ceil(sqrt(n)) in integers, exact for every int.
int CeilSqrt(int n) {
  int r = static_cast<int>(std::sqrt(static_cast<double>(n)));
  while (r * r > n) --r;
  while (r * r < n) ++r;
  return r;
}
}  // namespace

std::vector<ParamDef> Uniform::Params() {
  return {IntParam("segments", "auto",
                   "number of segments, 1..L; auto = ceil(sqrt(L)); 1 = no checkpointing")
              .Min(1)
              .AllowAuto()};
}

absl::StatusOr<std::unique_ptr<Strategy>> Uniform::Create(const ParamValues& params) {
  std::optional<int> segments;
  if (!params.IsAuto("segments")) segments = static_cast<int>(params.Int("segments"));
  return std::make_unique<Uniform>(segments);
}

absl::StatusOr<Plan> Uniform::MakePlan(const ModelProfile& profile) const {
  const int n = static_cast<int>(profile.stages.size());
  const int k = segments_.value_or(CeilSqrt(n));
  if (k > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("uniform: segments=", k, " is more than the ", n, " stages of ",
                     profile.model, "; accepted: 1..", n, " or auto"));
  }
  Plan plan;
  plan.strategy = absl::StrCat(kId, ":segments=", k);
  // The first n % k segments get one stage more, so sizes differ by at most one.
  int begin = 0;
  for (int s = 0; s < k; ++s) {
    const int size = n / k + (s < n % k ? 1 : 0);
    const bool last = s == k - 1;
    plan.segments.push_back(
        {begin, begin + size, last ? SegmentMode::kStored : SegmentMode::kCheckpointed});
    begin += size;
  }
  plan.summary = absl::StrCat(k, " segments of ", n / k, n % k ? "-" : "",
                              n % k ? absl::StrCat(n / k + 1) : "",
                              " stages; all but the last keep only their input");
  if (!segments_.has_value()) absl::StrAppend(&plan.summary, " (k = ceil(sqrt(", n, ")))");
  return plan;
}

}  // namespace ckpt
