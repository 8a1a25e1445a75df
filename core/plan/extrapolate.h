// A profile measured at small sizes, extrapolated exactly to the size asked for: how --predict
// answers for a model too large to run here without running it at full size.
//
// A model declares the sizes its bytes grow with (ParamDef::Scales: a batch with degree 1, a
// sequence with 2 for its attention scores). Along such an axis each tensor's bytes are a
// polynomial in the size, so every byte count of a profile is one as well. A transient peak is
// the largest of such counts, one per allocation in its window (MemoryMeter::PeakCandidates).
// Each of those is extrapolated on its own, and the largest is taken at the target, so a peak
// whose largest term changes between the samples and the target stays exact (a head's
// parameter-sized gradient against its logits).
//
// The samples lie on a grid: degree + 1 points along each axis at equal steps, and one point
// beyond, held out. Every count and candidate extrapolated to it from the grid must equal what
// was measured there; otherwise the extrapolation is refused, and the caller measures at full
// size. Extrapolation is exact integer arithmetic (Newton's forward differences at whole steps).
//
//   std::vector<ScaleAxis> axes = ScaleAxes(model.params(), model.values(), /*chunks=*/4);
//   for (const std::vector<int64_t>& point : SamplePoints(axes)) { ...profile there, traced... }
//   ASSIGN_OR_RETURN(ModelProfile full, Extrapolate(axes, samples, model.spec(), model.Stages()));
//
// Needs no LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan/profile.h"
#include "core/plan/spec.h"
#include "core/plan/stage.h"

namespace ckpt {

// One size to extrapolate along: samples at first, first + step, ... (degree + 1 of them), the
// held-out one at first + (degree + 1) step, and the target further on, a whole number of steps
// from first.
struct ScaleAxis {
  std::string param;
  int degree = 1;
  int64_t first = 0;
  int64_t step = 1;
  int64_t target = 0;
};

// The axes to extrapolate `values` along: each parameter declared with Scales whose value lies
// beyond its held-out sample. Each step is the parameter's unit times `chunks`, so that a
// sequence split into that many chunks splits alike at every sample and at the target. Each
// first sample is the least value of at least four steps that is a whole number of steps from
// the target: smaller, kernels take other paths (a ResNet block's forward allocates 43 times at
// batch 8 on these 2 cores, 52 at 16, 20 and 24). Empty: nothing is large enough to extrapolate;
// measure at the size asked.
std::vector<ScaleAxis> ScaleAxes(const std::vector<ParamDef>& defs, const ParamValues& values,
                                 int chunks);

// The axes' values at each sample, in the order Extrapolate takes samples: the grid, the last
// axis changing fastest, then the held-out point.
std::vector<std::vector<int64_t>> SamplePoints(const std::vector<ScaleAxis>& axes);

// The transients a profile measures as peaks (core/plan/profile.h's fields of those names).
enum class Transient {
  kNograd,
  kForward,
  kBackward,
  kBackwardInputHeld,
  kBackwardInputOutputHeld,
  kBackwardHeld,
  kLossForward,
  kLossBackward,
};

// Where a transient was measured: the stage and the index of its measurement in
// ModelProfile::measured[stage] (the loss: stage -1, index 0).
struct PeakKey {
  int stage = -1;
  int measurement = 0;
  Transient transient = Transient::kNograd;
  friend bool operator<(const PeakKey& a, const PeakKey& b) {
    return std::tie(a.stage, a.measurement, a.transient) <
           std::tie(b.stage, b.measurement, b.transient);
  }
};

// Per transient, its candidates less what the profiler subtracted from the peak: the transient
// is the largest of them.
using PeakTraces = std::map<PeakKey, std::vector<int64_t>>;

struct ProfileSample {
  ModelProfile profile;
  PeakTraces peaks;
};

// The profile of `model`, whose stages are `stages`, at the axes' targets, from `samples` (one
// for each of SamplePoints(axes), in that order). Every byte count is extrapolated. Times are the
// held-out sample's, scaled per stage by its matrix-product FLOPs at the target over those at the
// sample (StageInfo::forward_flops), or where it declares none by its stored activation bytes;
// the loss's by its input's bytes. Those are estimates, not measurements; the copy rates are the
// sample's. Policies that run a part by a fused kernel are left out (its scratch grows by blocks
// of the sequence, not as a polynomial): the planners plan without them, and
// ModelProfile::extrapolated says so. FailedPrecondition naming the first difference between
// samples (the policies measured, the storages kept), the first count whose held-out sample
// differs from its extrapolation, or one that overflows.
absl::StatusOr<ModelProfile> Extrapolate(const std::vector<ScaleAxis>& axes,
                                         const std::vector<ProfileSample>& samples,
                                         std::string model, std::vector<StageInfo> stages);

}  // namespace ckpt
