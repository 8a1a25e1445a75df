#include "strategies/store_all/store_all.h"

namespace ckpt {
namespace {
const StrategyRegistration<StoreAll> registration;
}  // namespace

absl::StatusOr<std::unique_ptr<Strategy>> StoreAll::Create(const ParamValues&) {
  return std::make_unique<StoreAll>();
}

absl::StatusOr<Plan> StoreAll::MakePlan(const ModelProfile& profile) const {
  Plan plan;
  const int n = static_cast<int>(profile.stages.size());
  if (n > 0) plan.segments.push_back({0, n, SegmentMode::kStored});
  plan.summary = "every stage stored; nothing is recomputed";
  return plan;
}

}  // namespace ckpt
