// deep_mlp: Linear(1024, hidden), (depth - 2) x Linear(hidden, hidden), Linear(hidden, 10),
// ReLU between, cross-entropy on random class labels. One stage per Linear (with its ReLU).
// Parameters: depth (20, at least 2), hidden (1024), batch (32).

#include <memory>
#include <string>
#include <vector>

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/randint.h"
#include "ATen/ops/randn.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/plan/spec.h"
#include "core/run/chain_model.h"
#include "models/layers.h"
#include "models/model_init.h"
#include "models/module_model.h"

namespace ckpt {
namespace {

constexpr int64_t kInFeatures = 1024;
constexpr int64_t kClasses = 10;

// The layers' widths: kInFeatures, (depth - 1) x hidden, kClasses.
std::vector<int64_t> Widths(const ParamValues& params) {
  std::vector<int64_t> widths(params.Int("depth") + 1, params.Int("hidden"));
  widths.front() = kInFeatures;
  widths.back() = kClasses;
  return widths;
}

class DeepMlpModel : public ModuleModel<LinearStack> {
 public:
  static std::vector<ParamDef> Params() {
    return {IntParam("depth", "20", "number of Linear layers, at least 2").Min(2).Max(100000),
            IntParam("hidden", "1024", "width of the hidden layers").Min(1).Max(1 << 20),
            IntParam("batch", "32", "rows per batch").Min(1).Max(1 << 24).Scales(1)};
  }
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context) {
    std::unique_ptr<LinearStack> mlp = InitSeeded(context.init_seed, [&] {
      return std::make_unique<LinearStack>(Widths(params), /*relu_last=*/false);
    });
    return std::make_shared<DeepMlpModel>(params, params.Canonical(), std::move(mlp),
                                          params.Int("batch"), context.device);
  }
  static std::vector<std::string> PaperSpecs() {
    return {"deep_mlp:depth=20:hidden=1024:batch=32"};
  }
  static std::string SmallSpec(const SpecChooser& choose) {
    return absl::StrCat("deep_mlp:depth=", choose("depth", 2, 5),
                        ":hidden=", choose("hidden", 1, 24), ":batch=", choose("batch", 1, 4));
  }

  using ModuleModel::ModuleModel;
  static std::vector<StageInfo> StagesFor(const ParamValues& params) {
    std::vector<StageInfo> stages;
    const std::vector<int64_t> widths = Widths(params);
    const int64_t batch = params.Int("batch"), depth = params.Int("depth");
    for (int64_t i = 0; i < depth; ++i) {
      const bool last = i == depth - 1;
      const double in = static_cast<double>(widths[i]), out = static_cast<double>(widths[i + 1]);
      stages.push_back({absl::StrCat(last ? "head" : "layer", i),
                        last ? StageKind::kHead : StageKind::kMlp,
                        /*stochastic=*/false,
                        {SequencePart(batch, "rows")},
                        2 * static_cast<double>(batch) * in * out,
                        // The first layer's weights differ in shape when kInFeatures does.
                        /*repeat_key=*/i == 0 || last ? "" : "layer"});
    }
    return stages;
  }
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& in,
                                   const StageParts& parts, const Batch&) override {
    return module_->RunLayer(index, in, parts);
  }
  at::Tensor Loss(const std::vector<at::Tensor>& outputs, const Batch& batch) override {
    return at::cross_entropy_loss(outputs.at(0), batch.targets.at(0));
  }
  Batch MakeBatch(uint64_t seed) override {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    at::Tensor x = at::randn({batch_, kInFeatures}, gen).to(device_);
    at::Tensor labels = at::randint(kClasses, {batch_}, gen, at::kLong).to(device_);
    x.requires_grad_(true);
    return {{x}, {labels}};
  }
};

const ModelRegistration<DeepMlpModel> registration(
    "deep_mlp",
    "Linear(1024, hidden), (depth-2) x Linear(hidden, hidden), Linear(hidden, 10), ReLU "
    "between, cross-entropy on random labels",
    /*quick_spec=*/"");  // the quick preset's MLP is heavy_mlp

}  // namespace
}  // namespace ckpt
