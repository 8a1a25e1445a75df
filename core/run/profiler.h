// The profiler: what each stage of a model costs under each policy it offers, measured once,
// for the strategies (which plan from it) and the analytical memory model (which predicts from
// it). See core/plan/profile.h for the quantities.
//
//   ASSIGN_OR_RETURN(ModelProfile profile, ProfileModel(model, batch, *meter, device));
//   ...
//   RETURN_IF_ERROR(ExtendProfile(model, batch, *meter, device, plan, profile));
//
// Each stage is measured in isolation but as it sits in the chain: on the input the chain
// gives it, with the input and output tensors owned by the caller as the executor owns them,
// and its backward fed a gradient freshly allocated and laid out as the next stage's backward
// hands it back (a concatenation's backward hands back strided views into its own gradient),
// its input's gradient left as its backward makes it. Its times are medians of repeated runs on
// the run's device (CUDA events on a GPU), repeated until they add up to a minimum duration, so
// that noise stays small. The work is linear in the number of stages: one forward and backward
// of each to find its input, its own parameters (the leaves of its graph) and how it hands back
// its input's gradient, then the measurements of each distinct stage, which touch only its
// parameters.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "c10/core/ScalarType.h"
#include "core/plan/extrapolate.h"
#include "core/plan/plan.h"
#include "core/plan/profile.h"
#include "core/run/chain_model.h"
#include "core/run/memory_meter.h"

namespace ckpt {

// Whether profiling first runs the chain forward and backward once, unmeasured, so that
// state libraries make on first use and keep in tensor memory is not measured as the first
// stage's. CUDA has such state (cuBLAS's workspace for each thread and stream); the CPU's
// counted memory has none (docs/memory-model.md), so by default only CUDA profiles take it.
enum class ProfileWarmUp { kOnCuda, kAlways };

// Where a profile is, for progress lines.
struct ProfileProgress {
  const char* phase = "";  // "forward": the pass that finds every stage's input; "measuring"
  int stage = 0;           // the stage at work or just done, from 1, of `stages`
  int stages = 0;
  std::string policy;  // measuring: the policy about to be measured (DescribePolicy), or ""
  // measuring: the stage-policy pairs measured so far, of `measurements` (a repeated stage's
  // copies of its twin's are not measured, and not counted); and the same weighted by each
  // stage's forward time in ms (measurements of a wide stage take longer), of `work`.
  int measurements_done = 0;
  int measurements = 0;
  double work_done = 0;
  double work = 0;
};

struct ProfileOptions {
  // The chunk count of the chunking policies in every stage's menu (PolicyMenu).
  int chunks = 4;
  // Time each stage (StageCosts' times); without it only bytes are measured.
  bool timed = true;
  // Each stage's forward and backward are repeated at least `min_repeats` times and until
  // they add up to `min_time_ms`.
  int min_repeats = 3;
  double min_time_ms = 20;
  ProfileWarmUp warm_up = ProfileWarmUp::kOnCuda;
  // Stages with the same StageInfo::repeat_key whose inputs and parameters have the same
  // shapes and types are measured once, the others given copies of those measurements (their
  // own parameters' indices): profiling then costs a forward of every stage plus the
  // measurement of each distinct one. Off: every stage is measured (tests compare the two).
  bool reuse_repeated = true;
  // > 0: offload copies are taken at this rate each way, beside the compute (an assumed link,
  // ModelProfile::link_assumed), instead of being measured on the device in use.
  double link_bytes_per_ms = 0;
  // Every stage's forward (and every rerun of its parts) and the loss run under autocast to
  // this dtype on the profile's device, as ChainExecutor runs them under StepOptions::autocast:
  // what autocast casts and saves (a linear layer's bfloat16 copies of its input and weight) is
  // measured as any tensor is. Backward runs outside it, as in a step.
  std::optional<c10::ScalarType> autocast;
  // If set, called as the profile goes: after each stage of each phase, and before each of a
  // stage's measurements.
  std::function<void(const ProfileProgress&)>
      progress;  // If set, each transient's peak candidates land here (core/plan/extrapolate.h), a
                 // stage
  // that takes its twin's measurements taking its twin's candidates too: what extrapolating the
  // profile to a larger size needs. Only a meter that keeps them (the CPU's) can be traced.
  PeakTraces* peaks = nullptr;
};

// The model's stages without measurements (zero bytes, zero time): enough for strategies that
// plan from the chain's structure alone, without running anything.
ModelProfile StructureOnlyProfile(const ChainModel& model);

// The profile of every stage under every policy of its menu (PolicyMenu with
// `options.chunks`), and of the loss. Leaves no graph and no gradients behind, and the model's
// state (ChainModel::State) as it found it. LibTorch errors become a Status.
absl::StatusOr<ModelProfile> ProfileModel(ChainModel& model, const Batch& batch, MemoryMeter& meter,
                                          c10::Device device, const ProfileOptions& options = {});

// Measures the policies `plan` gives stages that `profile` (of this model) has not measured
// yet, so that the memory model can predict the plan.
absl::Status ExtendProfile(ChainModel& model, const Batch& batch, MemoryMeter& meter,
                           c10::Device device, const Plan& plan, ModelProfile& profile,
                           const ProfileOptions& options = {});

}  // namespace ckpt
