// heavy_mlp: `depth` blocks of Linear(hidden, hidden) + ReLU; loss = the sum of the output
// over its features, averaged over the rows (so ranks sharing a batch average to its loss).
//
// The classic checkpointing demonstration: every block keeps one batch x hidden float32
// tensor for backward (ReLU's output, which is also the next Linear's saved input), so
// store_all holds depth x batch x hidden x 4 bytes of activations after forward.
//
//   HeavyMlp mlp(HeavyMlpOptions(/*depth=*/20, /*hidden=*/4096));
//   at::Tensor y = mlp->forward(x);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan/spec.h"
#include "core/run/chain_model.h"
#include "models/module_model.h"
#include "torch/arg.h"
#include "torch/nn/module.h"
#include "torch/nn/modules/linear.h"
#include "torch/nn/pimpl.h"

namespace ckpt {

struct HeavyMlpOptions {
  HeavyMlpOptions(int64_t depth, int64_t hidden) : depth_(depth), hidden_(hidden) {}
  TORCH_ARG(int64_t, depth);
  TORCH_ARG(int64_t, hidden);
};

class HeavyMlpImpl : public torch::nn::Module {
 public:
  explicit HeavyMlpImpl(const HeavyMlpOptions& options);
  // Block i: relu(linear_i(x)).
  at::Tensor forward_block(int64_t i, const at::Tensor& x);
  at::Tensor forward(at::Tensor x);

  HeavyMlpOptions options;

 private:
  std::vector<torch::nn::Linear> layers_;
};
TORCH_MODULE(HeavyMlp);

// heavy_mlp as a chain for the executor: one stage per block.
class HeavyMlpModel : public ModuleModel<HeavyMlp> {
 public:
  static constexpr char kId[] = "heavy_mlp";
  static constexpr char kSummary[] =
      "depth x (Linear(hidden, hidden) + ReLU), loss = the output's sum per row, averaged";
  static constexpr char kQuickSpec[] = "heavy_mlp:depth=16:hidden=1024:batch=64";
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context);
  static std::vector<std::string> PaperSpecs();
  static std::string SmallSpec(const SpecChooser& choose);

  static std::vector<StageInfo> StagesFor(const ParamValues& params);

  using ModuleModel::ModuleModel;
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& inputs,
                                   const StageParts& parts, const Batch& batch) override;
  at::Tensor Loss(const std::vector<at::Tensor>& outputs, const Batch& batch) override;
  Batch MakeBatch(uint64_t seed) override;
};

}  // namespace ckpt
