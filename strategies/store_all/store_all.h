// store_all: no checkpointing, the baseline every other strategy is measured against.
//
// Keeps: every activation autograd saves, for every stage (one stored segment).
// Recomputes: nothing. Memory O(L) activations, compute 1 forward + 1 backward.
#pragma once

#include <memory>
#include <vector>

#include "core/plan/strategy.h"

namespace ckpt {

class StoreAll : public Strategy {
 public:
  static constexpr char kId[] = "store_all";
  static constexpr char kSummary[] =
      "no checkpointing: every activation is stored for backward (the baseline)";
  static std::vector<ParamDef> Params() { return {}; }
  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params);

  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override;
};

}  // namespace ckpt
