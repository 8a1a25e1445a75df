// heavy_mlp: `depth` blocks of Linear(hidden, hidden) + ReLU; loss = the sum of the output
// over its features, averaged over the rows (so ranks sharing a batch average to its loss).
//
// The classic checkpointing demonstration: every block keeps one batch x hidden float32
// tensor for backward (ReLU's output, which is also the next Linear's saved input), so
// store_all holds depth x batch x hidden x 4 bytes of activations after forward.

#include <memory>
#include <string>
#include <vector>

#include "ATen/CPUGeneratorImpl.h"
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

// heavy_mlp as a chain for the executor: one stage per block.
class HeavyMlpModel : public ModuleModel<LinearStack> {
 public:
  static std::vector<ParamDef> Params() {
    return {IntParam("depth", "20", "number of Linear+ReLU blocks").Min(1).Max(100000),
            IntParam("hidden", "4096", "width of every block").Min(1).Max(1 << 20),
            IntParam("batch", "32", "rows per batch").Min(1).Max(1 << 24).Scales(1)};
  }
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context) {
    const std::vector<int64_t> widths(params.Int("depth") + 1, params.Int("hidden"));
    std::unique_ptr<LinearStack> mlp = InitSeeded(context.init_seed, [&] {
      return std::make_unique<LinearStack>(widths, /*relu_last=*/true);
    });
    return std::make_shared<HeavyMlpModel>(params, params.Canonical(), std::move(mlp),
                                           params.Int("batch"), context.device);
  }
  static std::vector<std::string> PaperSpecs() {
    return {"heavy_mlp:depth=20:hidden=4096:batch=32", "heavy_mlp:depth=40:hidden=4096:batch=64"};
  }
  static std::string SmallSpec(const SpecChooser& choose) {
    return absl::StrCat("heavy_mlp:depth=", choose("depth", 1, 6),
                        ":hidden=", choose("hidden", 1, 24), ":batch=", choose("batch", 1, 6));
  }

  static std::vector<StageInfo> StagesFor(const ParamValues& params) {
    const int64_t batch = params.Int("batch");
    const double hidden = static_cast<double>(params.Int("hidden"));
    std::vector<StageInfo> stages;
    for (int64_t i = 0; i < params.Int("depth"); ++i) {
      // Rows are independent: the chunkable axis is the batch's.
      stages.push_back({absl::StrCat("block", i),
                        StageKind::kMlp,
                        /*stochastic=*/false,
                        {SequencePart(batch, "rows")},
                        2 * static_cast<double>(batch) * hidden * hidden,
                        /*repeat_key=*/"block"});
    }
    return stages;
  }

  using ModuleModel::ModuleModel;
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& in,
                                   const StageParts& parts, const Batch&) override {
    return module_->RunLayer(index, in, parts);
  }
  at::Tensor Loss(const std::vector<at::Tensor>& outputs, const Batch&) override {
    const at::Tensor& y = outputs.at(0);
    return y.sum().div(y.size(0));
  }
  Batch MakeBatch(uint64_t seed) override {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    at::Tensor x = at::randn({batch_, params_.Int("hidden")}, gen).to(device_);
    x.requires_grad_(true);
    return {{x}, {}};
  }
};

const ModelRegistration<HeavyMlpModel> registration(
    "heavy_mlp",
    "depth x (Linear(hidden, hidden) + ReLU), loss = the output's sum per row, averaged",
    "heavy_mlp:depth=16:hidden=1024:batch=64");

}  // namespace
}  // namespace ckpt
