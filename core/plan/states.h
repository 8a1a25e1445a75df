// The training state around the activations, per data-parallel rank: parameters, their
// gradients and AdamW's two moments, replicated on every rank (DDP) or sharded across them
// (ZeRO stages 1 to 3, FSDP), and what sharding changes in one rank's step. The layouts, their
// sources and the accounting are docs/training-state.md's.
//
//   ASSIGN_OR_RETURN(RankStates states, StatesPerRank(profile, setting));  // --states, ...
//   ASSIGN_OR_RETURN(ModelProfile rank, RankProfile(profile, setting));
//   ... a strategy plans on `rank`; PredictMemory and PredictStepMs predict one rank's step.
//
// A stage is the sharding unit; a parameter's shard is ceil(elements / N) of its elements, in
// its own dtype. The optimizer step is outside the step, as everywhere here.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/plan/profile.h"

namespace ckpt {

enum class StateLayout { kReplicated, kZero1, kZero2, kZero3 };

// "replicated", "zero1", "zero2" or "zero3"; InvalidArgument naming the text and those.
absl::StatusOr<StateLayout> ParseStateLayout(absl::string_view text);
std::string StateLayoutName(StateLayout layout);

struct StatesSetting {
  StateLayout layout = StateLayout::kReplicated;
  int world_size = 1;  // ranks the state is spread over (1..kMostRanks)
  // The collectives' rate per rank, bytes per ms; 0: collectives are not timed.
  double collective_bytes_per_ms = 0;
};
inline constexpr int kMostRanks = 1 << 20;

// The setting checked: InvalidArgument naming the value and what is accepted.
absl::Status ValidateStatesSetting(const StatesSetting& setting);

// One rank's training state, bytes (the table above).
struct RankStates {
  int64_t parameters = 0;
  int64_t gradients = 0;  // at the end of backward (of the parameters that get one)
  int64_t optimizer = 0;  // AdamW's two moments (of the same)
  // zero3: the most parameter bytes one stage gathers beyond the rank's shard.
  int64_t largest_gather = 0;
};

// The state of one rank of `setting` training the model of `profile` (its stages' parameter
// gradients name every parameter's index and bytes; parameters no stage takes a gradient for are
// sharded as one more tensor, and have neither gradients nor AdamW state).
absl::StatusOr<RankStates> StatesPerRank(const ModelProfile& profile, const StatesSetting& setting);

// `profile` as one rank of `setting` sees its step (above): what strategies plan on and the
// memory and time models predict from. The profile itself for replicated state over one rank.
absl::StatusOr<ModelProfile> RankProfile(const ModelProfile& profile, const StatesSetting& setting);

}  // namespace ckpt
