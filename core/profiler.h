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

// The median of `samples`, NaN when there are none: how the profiler and the sweep summarize
// repeated timings.
double Median(std::vector<double> samples);

// The model's stages without measurements (zero bytes, zero time): enough for strategies that
// plan from the chain's structure alone, without running anything.
ModelProfile StructureOnlyProfile(const ChainModel& model);

// `options`: per stage (empty: all default), to profile the stages as a plan runs them.
// Leaves no graph and no gradients behind. LibTorch errors become a Status.
absl::StatusOr<ModelProfile> ProfileModel(ChainModel& model, const Batch& batch,
                                          MemoryMeter& meter, c10::Device device,
                                          const std::vector<StageOptions>& options = {},
                                          int repeats = 3);

}  // namespace ckpt
