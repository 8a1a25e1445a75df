// uniform: cut the chain into `segments` contiguous segments of near-equal stage counts and
// checkpoint each, as PyTorch's checkpoint_sequential and Chen et al. 2016 ("Training Deep
// Nets with Sublinear Memory Cost", arXiv:1604.06174) do.
//
// Keeps: the input of every segment, plus the stored activations of the last segment.
// Recomputes: every stage of the checkpointed segments, once, during backward.
// Memory: with k segments of L/k stages, about k segment inputs + L/k stages' activations at
// the backward peak, minimised at k = sqrt(L) (the default, ceil(sqrt(L))): O(sqrt(L)).
// Compute: one extra forward of the first L - L/k stages.
//
// The last segment is not checkpointed (as in checkpoint_sequential): backward starts with
// it, so it would be recomputed right after the forward that just dropped its activations.
// Storing it costs no extra peak memory and saves that recomputation.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/strategy.h"

namespace ckpt {

class Uniform : public Strategy {
 public:
  static constexpr char kId[] = "uniform";
  static constexpr char kSummary[] =
      "checkpoint sequential: k near-equal segments keep only their inputs (default k = "
      "ceil(sqrt(L)))";
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params);

  // `segments` empty means ceil(sqrt(L)).
  explicit Uniform(std::optional<int> segments) : segments_(segments) {}

  // InvalidArgument if segments > L (naming both).
  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override;

 private:
  std::optional<int> segments_;
};

}  // namespace ckpt
