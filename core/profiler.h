// The profiler: what each stage of a model costs when it runs stored, measured once, for the
// strategies (which plan from it) and the analytical memory model (which predicts from it).
//
//   ASSIGN_OR_RETURN(ModelProfile profile, ProfileModel(model, batch, *meter, device));
//
// Each stage is measured in isolation but as it sits in the chain: on the input the chain
// gives it, with the input and output tensors owned by the caller as the executor owns them,
// and its backward fed a gradient freshly allocated the way the next stage's backward would.
// See StageProfile (plan.h) for the quantities.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "core/chain_model.h"
#include "core/memory_meter.h"
#include "core/plan.h"

namespace ckpt {

// The model's stages without measurements (zero bytes, zero time): enough for strategies that
// plan from the chain's structure alone, without running anything.
ModelProfile StructureOnlyProfile(const ChainModel& model);

// Whether ProfileModel first runs the chain forward and backward once, unmeasured, so that
// state libraries make on first use and keep in tensor memory is not measured as the first
// stage's. CUDA has such state (cuBLAS's workspace for each thread and stream); the CPU's
// counted memory has none found (the quick preset's predictions are identical without the
// step, which costs 12% of that sweep's time), so by default only CUDA profiles take it.
enum class ProfileWarmUp { kOnCuda, kAlways };

// `options`: per stage (empty: all default), to profile the stages as a plan runs them.
// Leaves no graph and no gradients behind. LibTorch errors become a Status.
absl::StatusOr<ModelProfile> ProfileModel(ChainModel& model, const Batch& batch,
                                          MemoryMeter& meter, c10::Device device,
                                          const std::vector<StageOptions>& options = {},
                                          int repeats = 3,
                                          ProfileWarmUp warm_up = ProfileWarmUp::kOnCuda);

}  // namespace ckpt
