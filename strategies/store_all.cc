// store_all: no checkpointing, the baseline every other strategy is measured against.
//
// Keeps: every activation autograd saves, for every stage (one stored segment).
// Recomputes: nothing. Memory O(L) activations, compute 1 forward + 1 backward.
#include "core/plan/strategy.h"
#include "strategies/plan_builders.h"

namespace ckpt {
namespace {

absl::StatusOr<Plan> StoreAll(const ModelProfile& profile) {
  Plan plan = AllStored(profile.num_stages());
  plan.summary = "every stage stored; nothing is recomputed";
  return plan;
}

const PlannerRegistration registration(
    "store_all", "no checkpointing: every activation is stored for backward (the baseline)",
    StoreAll);

}  // namespace
}  // namespace ckpt
