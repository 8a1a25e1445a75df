// deep_mlp: Linear(1024, hidden), (depth - 2) x Linear(hidden, hidden), Linear(hidden, 10),
// ReLU between, cross-entropy on random class labels. One stage per Linear (with its ReLU).
// Parameters: depth (20, at least 2), hidden (1024), batch (32).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan/spec.h"
#include "core/run/chain_model.h"
#include "models/module_model.h"
#include "torch/nn/module.h"
#include "torch/nn/modules/linear.h"

namespace ckpt {

struct DeepMlpOptions {
  DeepMlpOptions(int64_t depth, int64_t hidden) : depth_(depth), hidden_(hidden) {}
  TORCH_ARG(int64_t, depth);
  TORCH_ARG(int64_t, hidden);
  TORCH_ARG(int64_t, in_features) = 1024;
  TORCH_ARG(int64_t, classes) = 10;
};

class DeepMlpImpl : public torch::nn::Module {
 public:
  explicit DeepMlpImpl(const DeepMlpOptions& options);
  // Layer i, with the ReLU after it unless it is the last (which gives the logits).
  at::Tensor forward_layer(int64_t i, const at::Tensor& x);
  at::Tensor forward(at::Tensor x);

  DeepMlpOptions options;

 private:
  std::vector<torch::nn::Linear> layers_;
};
TORCH_MODULE(DeepMlp);

class DeepMlpModel : public ModuleModel<DeepMlp> {
 public:
  static constexpr char kId[] = "deep_mlp";
  static constexpr char kSummary[] =
      "Linear(1024, hidden), (depth-2) x Linear(hidden, hidden), Linear(hidden, 10), ReLU "
      "between, cross-entropy on random labels";
  static constexpr char kQuickSpec[] = "";  // the quick preset's MLP is heavy_mlp
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context);
  static std::vector<std::string> PaperSpecs();
  static std::string SmallSpec(const SpecChooser& choose);

  using ModuleModel::ModuleModel;
  static std::vector<StageInfo> StagesFor(const ParamValues& params);
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& inputs,
                                   const StageParts& parts, const Batch& batch) override;
  at::Tensor Loss(const std::vector<at::Tensor>& outputs, const Batch& batch) override;
  Batch MakeBatch(uint64_t seed) override;
};

}  // namespace ckpt
