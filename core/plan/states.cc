#include "core/plan/states.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace ckpt {
namespace {

constexpr const char* kLayoutNames[] = {"replicated", "zero1", "zero2", "zero3"};

// Every parameter's bytes by its index, from the stages' gradients (the stored policy's), and
// the bytes of parameters no stage takes a gradient for.
struct Parameters {
  std::map<int, int64_t> bytes;
  int64_t untracked = 0;
};
Parameters ParametersOf(const ModelProfile& profile) {
  Parameters out;
  int64_t tracked = 0;
  for (const std::vector<StageProfile>& menu : profile.measured) {
    if (menu.empty()) continue;
    for (const auto& [param, bytes] : menu.front().param_grads) {
      if (out.bytes.emplace(param, bytes).second) tracked += bytes;
    }
  }
  out.untracked = std::max<int64_t>(0, profile.param_bytes - tracked);
  return out;
}

// One rank's shard of a tensor of `bytes`: ceil(elements / ranks) elements.
int64_t Shard(int64_t bytes, int64_t element_bytes, int ranks) {
  const int64_t elements = (bytes + element_bytes - 1) / element_bytes;
  return (elements + ranks - 1) / ranks * element_bytes;
}

// The bytes of a stage's parameters beyond one rank's shards: what zero3 gathers to run it.
int64_t GatheredBytes(const StageProfile& stage, int64_t element_bytes, int ranks) {
  int64_t gather = 0;
  for (const auto& [param, bytes] : stage.param_grads) {
    gather += bytes - Shard(bytes, element_bytes, ranks);
  }
  return gather;
}

bool ShardsGradients(StateLayout layout) {
  return layout == StateLayout::kZero2 || layout == StateLayout::kZero3;
}

}  // namespace

absl::StatusOr<StateLayout> ParseStateLayout(absl::string_view text) {
  for (int i = 0; i < 4; ++i) {
    if (text == kLayoutNames[i]) return static_cast<StateLayout>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--states=", text, " is not accepted; accepted: replicated, zero1, zero2, zero3"));
}

std::string StateLayoutName(StateLayout layout) { return kLayoutNames[static_cast<int>(layout)]; }

absl::Status ValidateStatesSetting(const StatesSetting& setting) {
  if (setting.world_size < 1 || setting.world_size > kMostRanks) {
    return absl::InvalidArgumentError(absl::StrCat("--world_size=", setting.world_size,
                                                   " is not accepted; accepted: 1..", kMostRanks));
  }
  if (!(setting.collective_bytes_per_ms >= 0)) {  // NaN too
    return absl::InvalidArgumentError(
        absl::StrCat("a collective rate of ", setting.collective_bytes_per_ms,
                     " bytes per ms is not accepted; accepted: a positive rate, or 0 for none"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RankStates> StatesPerRank(const ModelProfile& profile,
                                         const StatesSetting& setting) {
  RETURN_IF_ERROR(ValidateStatesSetting(setting));
  const Parameters params = ParametersOf(profile);
  const int n = setting.world_size;
  const int64_t element = std::max<int64_t>(1, profile.param_element_bytes);
  // Gradients and AdamW's moments are those of the parameters that get a gradient (the tracked
  // ones): PyTorch's AdamW keeps no state for a parameter whose gradient is None (a frozen
  // teacher's, one the step never reads).
  int64_t tracked = 0, tracked_sharded = 0;
  for (const auto& [param, bytes] : params.bytes) {
    tracked += bytes;
    tracked_sharded += Shard(bytes, element, n);
  }
  const int64_t sharded = tracked_sharded + Shard(params.untracked, element, n);
  RankStates states;
  const StateLayout layout = setting.layout;
  states.parameters = layout == StateLayout::kZero3 ? sharded : profile.param_bytes;
  states.gradients = ShardsGradients(layout) ? tracked_sharded : tracked;
  states.optimizer = 2 * (layout == StateLayout::kReplicated ? tracked : tracked_sharded);
  if (layout == StateLayout::kZero3) {
    for (const std::vector<StageProfile>& menu : profile.measured) {
      if (menu.empty()) continue;
      states.largest_gather =
          std::max(states.largest_gather, GatheredBytes(menu.front(), element, n));
    }
  }
  return states;
}

absl::StatusOr<ModelProfile> RankProfile(const ModelProfile& profile,
                                         const StatesSetting& setting) {
  RETURN_IF_ERROR(ValidateStatesSetting(setting));
  ModelProfile rank = profile;
  const int n = setting.world_size;
  if (n == 1) return rank;
  const int64_t element = std::max<int64_t>(1, profile.param_element_bytes);
  const StateLayout layout = setting.layout;
  const double ring = static_cast<double>(n - 1) / n;  // of a tensor, each rank's share moved
  const double rate = setting.collective_bytes_per_ms;
  for (std::vector<StageProfile>& menu : rank.measured) {
    for (StageProfile& s : menu) {
      const int64_t gather = GatheredBytes(s, element, n);
      int64_t whole = 0;  // the stage's parameters (and their gradients)
      for (const auto& [param, bytes] : s.param_grads) {
        whole += bytes;
        if (ShardsGradients(layout)) rank.kept_gradient_bytes[param] = Shard(bytes, element, n);
      }
      const int64_t kept = whole - gather;  // of their gradients, after the reduce-scatter
      if (ShardsGradients(layout)) s.costs.param_grad_bytes = kept;
      if (layout == StateLayout::kZero3) {
        for (int64_t* t :
             {&s.forward_transient_bytes, &s.nograd_transient_bytes, &s.backward_transient_bytes,
              &s.backward_input_held_transient_bytes, &s.backward_input_output_held_transient_bytes,
              &s.backward_held_transient_bytes, &s.costs.forward_transient_bytes,
              &s.costs.nograd_transient_bytes, &s.costs.backward_transient_bytes}) {
          *t += gather;
        }
      }
      if (rate <= 0) continue;
      const double gather_ms = layout == StateLayout::kZero3 ? ring * whole / rate : 0;
      const double reduce_ms = (ShardsGradients(layout) ? 1 : 2) * ring * whole / rate;
      s.costs.forward_ms += gather_ms;
      s.costs.nograd_forward_ms += gather_ms;
      s.costs.backward_ms += gather_ms + reduce_ms;
    }
  }
  return rank;
}

}  // namespace ckpt
