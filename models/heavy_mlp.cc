#include "models/heavy_mlp.h"

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/Context.h"
#include "ATen/ops/randn.h"
#include "ATen/ops/relu.h"
#include "absl/strings/str_cat.h"
#include "models/model_init.h"

namespace ckpt {
namespace {
const ModelRegistration<HeavyMlpModel> registration;
}  // namespace

HeavyMlpImpl::HeavyMlpImpl(const HeavyMlpOptions& options_) : options(options_) {
  for (int64_t i = 0; i < options.depth(); ++i) {
    layers_.push_back(register_module(
        absl::StrCat("linear", i),
        torch::nn::Linear(torch::nn::LinearOptions(options.hidden(), options.hidden()))));
  }
}

at::Tensor HeavyMlpImpl::forward_block(int64_t i, const at::Tensor& x) {
  return at::relu(layers_[i]->forward(x));
}

at::Tensor HeavyMlpImpl::forward(at::Tensor x) {
  for (int64_t i = 0; i < options.depth(); ++i) x = forward_block(i, x);
  return x;
}

std::vector<ParamDef> HeavyMlpModel::Params() {
  return {IntParam("depth", "20", "number of Linear+ReLU blocks").Min(1).Max(100000),
          IntParam("hidden", "4096", "width of every block").Min(1).Max(1 << 20),
          IntParam("batch", "32", "rows per batch").Min(1).Max(1 << 24)};
}

absl::StatusOr<std::shared_ptr<ChainModel>> HeavyMlpModel::Create(const ParamValues& params,
                                                                  const ModelContext& context) {
  HeavyMlp mlp = InitSeeded(context.init_seed, [&] {
    return HeavyMlp(HeavyMlpOptions(params.Int("depth"), params.Int("hidden")));
  });
  mlp->to(context.device);
  return std::make_shared<HeavyMlpModel>(params, params.Canonical(), std::move(mlp),
                                         params.Int("batch"), context.device);
}

std::vector<std::string> HeavyMlpModel::PaperSpecs() {
  return {"heavy_mlp:depth=20:hidden=4096:batch=32", "heavy_mlp:depth=40:hidden=4096:batch=64"};
}

std::string HeavyMlpModel::SmallSpec(const SpecChooser& choose) {
  return absl::StrCat("heavy_mlp:depth=", choose("depth", 1, 6),
                      ":hidden=", choose("hidden", 1, 24), ":batch=", choose("batch", 1, 6));
}

std::vector<StageInfo> HeavyMlpModel::StagesFor(const ParamValues& params) {
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

std::vector<at::Tensor> HeavyMlpModel::RunStage(int index, const std::vector<at::Tensor>& in,
                                                const StageParts& parts, const Batch&) {
  return parts.RunChunked(
      "rows",
      [this, index](const std::vector<at::Tensor>& x, int64_t) {
        return std::vector<at::Tensor>{module_->forward_block(index, x[0])};
      },
      in, {true}, /*dim=*/0);
}

at::Tensor HeavyMlpModel::Loss(const std::vector<at::Tensor>& outputs, const Batch&) {
  const at::Tensor& y = outputs.at(0);
  return y.sum().div(y.size(0));
}

Batch HeavyMlpModel::MakeBatch(uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor x = at::randn({batch_, module_->options.hidden()}, gen).to(device_);
  x.requires_grad_(true);
  return {{x}, {}};
}

}  // namespace ckpt
