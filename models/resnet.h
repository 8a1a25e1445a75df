// resnet: a ResNet of bottleneck blocks with BatchNorm (He et al. 2016, torchvision's v1.5:
// the stride on the 3x3 convolution) classifying synthetic images.
//
// Stages: the stem (7x7 convolution with stride 2, BatchNorm, ReLU, 3x3 max-pool with stride
// 2); one stage per bottleneck block, its skip connection inside it (1x1, 3x3 and 1x1
// convolutions each with BatchNorm, ReLU between; the first block of a layer projects the skip
// with a strided 1x1 convolution and a BatchNorm); last the head: global average pooling, a
// linear classifier and the cross-entropy against the labels, so the head stage returns the
// loss. Sizes 50 and 152 at 224 px are torchvision's resnet50 and resnet152 (25,557,032 and
// 60,192,808 parameters with 1000 classes). The images need no gradient.
//
// BatchNorm normalises with the batch's statistics in training and updates its running mean,
// running variance and batch counter, which evaluation uses. Those updates happen on a step's
// first run of a stage only (StageInfo::updates_state, InRerun), so a plan that reruns a block
// leaves the statistics exactly as store_all does (PyTorch's checkpoint updates them twice,
// pytorch issue #96136). No stage offers parts: chunking a BatchNorm's batch would change its
// statistics.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan/spec.h"
#include "core/run/chain_model.h"
#include "models/module_model.h"
#include "torch/nn/module.h"
#include "torch/nn/modules/batchnorm.h"
#include "torch/nn/modules/conv.h"
#include "torch/nn/modules/linear.h"

namespace ckpt {

struct ResnetOptions {
  std::vector<int64_t> blocks = {3, 4, 6, 3};  // bottleneck blocks per layer
  int64_t width = 64;  // the first layer's bottleneck width; doubled per layer, output 4x
  int64_t channels = 3, classes = 1000;
};

// 1x1, 3x3 (with `stride`) and 1x1 convolutions, each followed by BatchNorm, ReLU after the
// first two and after the sum with the skip connection, which is projected when the shape
// changes.
class BottleneckImpl : public torch::nn::Module {
 public:
  BottleneckImpl(int64_t in, int64_t width, int64_t stride);
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr}, project_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr}, project_bn_{nullptr};
};
TORCH_MODULE(Bottleneck);

class ResnetImpl : public torch::nn::Module {
 public:
  explicit ResnetImpl(const ResnetOptions& options);
  at::Tensor Stem(const at::Tensor& images);
  at::Tensor Block(int64_t index, const at::Tensor& x);  // the blocks of every layer in order
  at::Tensor HeadLoss(const at::Tensor& x, const at::Tensor& labels);
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }

  const ResnetOptions options;

 private:
  torch::nn::Conv2d stem_conv_{nullptr};
  torch::nn::BatchNorm2d stem_bn_{nullptr};
  std::vector<Bottleneck> blocks_;
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Resnet);

class ResnetModel : public HeadLossModel<Resnet> {
 public:
  static constexpr char kId[] = "resnet";
  static constexpr char kSummary[] =
      "ResNet: stem, bottleneck blocks with BatchNorm (a stage each, skip inside), pooled "
      "classifier head with its loss";
  static constexpr char kQuickSpec[] =
      "resnet:size=50:depth=1:width=16:image=64:classes=100:batch=8";
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context);
  static std::vector<std::string> PaperSpecs();
  static std::string SmallSpec(const SpecChooser& choose);

  static std::vector<StageInfo> StagesFor(const ParamValues& params);

  ResnetModel(ParamValues params, std::string spec, Resnet net, c10::Device device)
      : HeadLossModel(params, std::move(spec), std::move(net), params.Int("batch"), device),
        image_(params.Int("image")) {}
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& inputs,
                                   const StageParts& parts, const Batch& batch) override;
  Batch MakeBatch(uint64_t seed) override;

 private:
  int64_t image_;
};

}  // namespace ckpt
