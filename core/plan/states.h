// The training state around the activations, per data-parallel rank: parameters, their
// gradients and AdamW's two moments, replicated on every rank (DDP) or sharded across them
// (ZeRO stages 1 to 3, FSDP), and what sharding changes in one rank's step.
//
//   ASSIGN_OR_RETURN(StatesSetting setting, ...);  // --states, --world_size,
//   --collective_bandwidth ASSIGN_OR_RETURN(RankStates states, StatesPerRank(profile, setting));
//   ASSIGN_OR_RETURN(ModelProfile rank, RankProfile(profile, setting));
//   ... a strategy plans on `rank`; PredictMemory and PredictStepMs predict one rank's step.
//
// Layouts (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models", 2020, section 5 and figure 1; PyTorch's FullyShardedDataParallel documentation:
// FULL_SHARD is ZeRO-3, SHARD_GRAD_OP ZeRO-2), with P the parameters' bytes and N ranks:
//
//   layout      parameters  gradients  AdamW moments  gathered in the step
//   replicated  P           P          2P             nothing
//   zero1       P           P          2P/N           nothing
//   zero2       P           P/N        2P/N           each stage's gradients until reduced
//   zero3       P/N         P/N        2P/N           each stage's parameters and gradients
//
// Sharding is per parameter, ceil(elements / N) elements each (FSDP2 shards each parameter on
// its first dimension, padding it; ZeRO's flat buffers pad the whole, at most N - 1 elements
// fewer). Parameters keep their dtype: under autocast (--amp) they are the float32 master
// weights, and the bfloat16 working copies are autocast's casts, which the profile measured as
// activations where a graph saves them (docs/training-state.md compares this with ZeRO's
// mixed-precision accounting, whose working copies and gradients are bfloat16 state).
//
// One rank's step (RankProfile): a stage is the sharding unit. Under zero2 and zero3 a stage's
// backward makes its parameters' gradients whole, as measured, and reduce-scatters them when it
// ends, keeping its shard: the profile's parameter gradients become shards, the whole ones stay
// in the measured backward peak. Under zero3 every run of a stage (forward, a checkpoint's
// forward without a graph, a rerun, its backward) first all-gathers its parameters, which live
// until it ends: their bytes beyond the rank's shard join each of its transients. With a
// collective rate, each stage's times gain its collectives as ring algorithms move them, one
// rank's bytes over the rate, none hidden behind compute: all-gathers of (N - 1)/N of its
// parameters before every run under zero3 (so recomputing a stage costs its gather again, and
// planners weigh that), and in its backward the gradients' all-reduce (2 (N - 1)/N of them;
// replicated, zero1) or reduce-scatter ((N - 1)/N; zero2, zero3). The optimizer step, and the
// parameters' all-gather after it under zero1 and zero2, are outside the step, as the optimizer
// is in every prediction here.
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
  int64_t gradients = 0;  // at the end of backward
  int64_t optimizer = 0;  // AdamW's two moments
  // zero3: the most parameter bytes one stage gathers beyond the rank's shard.
  int64_t largest_gather = 0;
};

// The state of one rank of `setting` training the model of `profile` (its stages' parameter
// gradients name every parameter's index and bytes; parameters no stage takes a gradient for are
// sharded as one more tensor).
absl::StatusOr<RankStates> StatesPerRank(const ModelProfile& profile, const StatesSetting& setting);

// `profile` as one rank of `setting` sees its step (above): what strategies plan on and the
// memory and time models predict from. The profile itself for replicated state over one rank.
absl::StatusOr<ModelProfile> RankProfile(const ModelProfile& profile, const StatesSetting& setting);

}  // namespace ckpt
