#include "models/deep_mlp.h"

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/randint.h"
#include "ATen/ops/randn.h"
#include "ATen/ops/relu.h"
#include "absl/strings/str_cat.h"
#include "models/model_init.h"

namespace ckpt {
namespace {
const ModelRegistration<DeepMlpModel> registration;
}  // namespace

DeepMlpImpl::DeepMlpImpl(const DeepMlpOptions& options_) : options(options_) {
  const int64_t depth = options.depth();
  for (int64_t i = 0; i < depth; ++i) {
    const int64_t in = i == 0 ? options.in_features() : options.hidden();
    const int64_t out = i == depth - 1 ? options.classes() : options.hidden();
    layers_.push_back(register_module(absl::StrCat("linear", i), torch::nn::Linear(in, out)));
  }
}

at::Tensor DeepMlpImpl::forward_layer(int64_t i, const at::Tensor& x) {
  at::Tensor y = layers_[i]->forward(x);
  return i == options.depth() - 1 ? y : at::relu(y);
}

at::Tensor DeepMlpImpl::forward(at::Tensor x) {
  for (int64_t i = 0; i < options.depth(); ++i) x = forward_layer(i, x);
  return x;
}

std::vector<ParamDef> DeepMlpModel::Params() {
  return {IntParam("depth", "20", "number of Linear layers, at least 2").Min(2).Max(100000),
          IntParam("hidden", "1024", "width of the hidden layers").Min(1).Max(1 << 20),
          IntParam("batch", "32", "rows per batch").Min(1).Max(1 << 24)};
}

absl::StatusOr<std::shared_ptr<ChainModel>> DeepMlpModel::Create(const ParamValues& params,
                                                                 const ModelContext& context) {
  DeepMlp mlp = InitSeeded(context.init_seed, [&] {
    return DeepMlp(DeepMlpOptions(params.Int("depth"), params.Int("hidden")));
  });
  mlp->to(context.device);
  return std::make_shared<DeepMlpModel>(params, params.Canonical(), std::move(mlp),
                                        params.Int("batch"), context.device);
}

std::vector<std::string> DeepMlpModel::PaperSpecs() {
  return {"deep_mlp:depth=20:hidden=1024:batch=32"};
}

std::string DeepMlpModel::SmallSpec(const SpecChooser& choose) {
  return absl::StrCat("deep_mlp:depth=", choose("depth", 2, 5), ":hidden=", choose("hidden", 1, 24),
                      ":batch=", choose("batch", 1, 4));
}

std::vector<StageInfo> DeepMlpModel::StagesFor(const ParamValues& params) {
  std::vector<StageInfo> stages;
  const DeepMlpOptions o(params.Int("depth"), params.Int("hidden"));
  const int64_t batch = params.Int("batch");
  for (int64_t i = 0; i < o.depth(); ++i) {
    const bool last = i == o.depth() - 1;
    const double in = static_cast<double>(i == 0 ? o.in_features() : o.hidden());
    const double out = static_cast<double>(last ? o.classes() : o.hidden());
    stages.push_back({absl::StrCat(last ? "head" : "layer", i),
                      last ? StageKind::kHead : StageKind::kMlp,
                      /*stochastic=*/false,
                      {SequencePart(batch, "rows")},
                      2 * static_cast<double>(batch) * in * out,
                      // The first layer's weights differ in shape when in_features does.
                      /*repeat_key=*/i == 0 || last ? "" : "layer"});
  }
  return stages;
}

std::vector<at::Tensor> DeepMlpModel::RunStage(int index, const std::vector<at::Tensor>& in,
                                               const StageParts& parts, const Batch&) {
  return parts.RunChunked(
      "rows",
      [this, index](const std::vector<at::Tensor>& x, int64_t) {
        return std::vector<at::Tensor>{module_->forward_layer(index, x[0])};
      },
      in, {true}, /*dim=*/0);
}

at::Tensor DeepMlpModel::Loss(const std::vector<at::Tensor>& outputs, const Batch& batch) {
  return at::cross_entropy_loss(outputs.at(0), batch.targets.at(0));
}

Batch DeepMlpModel::MakeBatch(uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor x = at::randn({batch_, module_->options.in_features()}, gen).to(device_);
  at::Tensor labels = at::randint(module_->options.classes(), {batch_}, gen, at::kLong).to(device_);
  x.requires_grad_(true);
  return {{x}, {labels}};
}

}  // namespace ckpt
