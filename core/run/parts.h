// The one helper through which a model runs the named parts of a stage, applying the policy
// the plan chose for each (core/plan/stage.h) by its action's mechanism: stored, a part is a plain
// call; recomputed, it runs under the checkpoint primitive (a norm's output dropped until
// backward too, CheckpointDroppingOutput); chunked, the stage's work runs in chunks along the
// part's axis, each under the checkpoint primitive. Models never see a plan:
//
//   std::vector<at::Tensor> TransformerModel::RunStage(int i, const std::vector<at::Tensor>& x,
//                                                      const StageParts& parts, ...) {
//     auto chunk = [&](const std::vector<at::Tensor>& in, int64_t offset) {
//       ...
//       at::Tensor context = parts.Run("core", attention_core, {q, k, v})[0];
//       ...
//     };
//     return parts.RunChunked("sequence", chunk, {x, k, v}, {true, false, false}, /*dim=*/1);
//   }
//
// A StageParts is cheap to copy (it shares its immutable data), and closures that run again in
// backward should hold a copy, not a reference. A part draws no random numbers of its own: a stage
// draws its dropout seeds before running its parts (counter-based dropout, models/layers.h), so a
// recomputed or chunked part reproduces its forward without an RNG snapshot. Naming a part the
// stage did not declare, or running a part by a call its policy cannot go through, is a model
// bug: it throws, naming the part.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/strings/string_view.h"
#include "core/plan/stage.h"
#include "core/run/checkpoint.h"

namespace ckpt {

class StageParts {
 public:
  // Every part of `stage` stored, or as `policy` says.
  explicit StageParts(const StageInfo& stage, StagePolicy policy = {});

  // Whether the plan runs the part `name` by its fused kernel: the model's fn for the part then
  // calls that kernel (Run makes it a plain call).
  bool Fused(absl::string_view name) const;

  // Runs fn(inputs) as the part `name`: a plain call when stored or fused, under Checkpoint when
  // recomputed. A chunked part is an axis (RunChunked); a part whose output may be dropped until
  // backward (a norm) goes through RunConsumed.
  std::vector<at::Tensor> Run(absl::string_view name, const TensorFn& fn,
                              const std::vector<at::Tensor>& inputs) const;

  // Runs `consumer` on the outputs of the part `name`, fn(inputs), and returns the consumer's:
  // the layers of the stage that read the part's output (a pre-norm block's projections after
  // its norm). Under kDropOutput the part's output is dropped once they have run and rerun when
  // backward reaches them; otherwise as Run, then the consumer.
  std::vector<at::Tensor> RunConsumed(absl::string_view name, const TensorFn& fn,
                                      const std::vector<at::Tensor>& inputs,
                                      const TensorFn& consumer) const;

  // Runs fn on the inputs marked in `split`, sliced into the part's chunks along `dim` (the
  // others whole), each under Checkpoint, when the part `name` is chunked (ChunkedCheckpoint);
  // fn(inputs, 0) otherwise.
  std::vector<at::Tensor> RunChunked(absl::string_view name, const ChunkFn& fn,
                                     const std::vector<at::Tensor>& inputs,
                                     const std::vector<bool>& split, int64_t dim) const;

 private:
  PartPolicy PolicyOf(absl::string_view name) const;  // throws for an undeclared part

  struct Data {
    std::vector<PartInfo> parts;
    StagePolicy policy;
    std::string stage;
  };
  std::shared_ptr<const Data> data_;
};

}  // namespace ckpt
