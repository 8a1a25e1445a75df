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

#include <memory>
#include <string>
#include <vector>

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/TensorOperators.h"
#include "ATen/ops/batch_norm.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/max_pool2d.h"
#include "ATen/ops/randint.h"
#include "ATen/ops/randn.h"
#include "ATen/ops/relu.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/plan/spec.h"
#include "core/run/chain_model.h"
#include "core/run/checkpoint.h"
#include "models/model_init.h"
#include "models/module_model.h"
#include "models/nn.h"

namespace ckpt {
namespace {

// He et al.'s bottleneck blocks per layer for ResNet-50 and ResNet-152.
std::vector<int64_t> BlocksOfSize(const std::string& size) {
  return size == "152" ? std::vector<int64_t>{3, 8, 36, 3} : std::vector<int64_t>{3, 4, 6, 3};
}

Conv2d Conv(ParamSet& set, int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return Conv2d(set, in, out, kernel, stride, /*padding=*/kernel / 2, /*with_bias=*/false);
}

// BatchNorm in training with the batch's statistics, updating the running statistics and the
// batch counter on a step's first run only (InRerun); in evaluation with the running ones.
at::Tensor BatchNorm(const BatchNorm2d& bn, bool training, const at::Tensor& x) {
  const bool update = training && !InRerun();
  if (update) bn.num_batches_tracked.add_(1);
  const at::Tensor running_mean = training && !update ? at::Tensor() : bn.running_mean;
  const at::Tensor running_var = training && !update ? at::Tensor() : bn.running_var;
  return at::batch_norm(x, bn.weight, bn.bias, running_mean, running_var, training,
                        BatchNorm2d::kMomentum, BatchNorm2d::kEps, /*cudnn_enabled=*/true);
}

// A convolution's output side for an input side `in`.
int64_t ConvOut(int64_t in, int64_t kernel, int64_t stride) {
  return (in + 2 * (kernel / 2) - kernel) / stride + 1;
}

struct ResnetOptions {
  std::vector<int64_t> blocks = {3, 4, 6, 3};  // bottleneck blocks per layer
  int64_t width = 64;  // the first layer's bottleneck width; doubled per layer, output 4x
  int64_t channels = 3, classes = 1000;
};

// The size's blocks per layer with the spec's overrides.
ResnetOptions Resolved(const ParamValues& params) {
  ResnetOptions o;
  o.blocks = BlocksOfSize(params.Text("size"));
  o.blocks.resize(params.Int("layers"));
  if (!params.IsAuto("depth")) {
    for (int64_t& b : o.blocks) b = params.Int("depth");
  }
  o.width = params.Int("width");
  o.channels = params.Int("channels");
  o.classes = params.Int("classes");
  return o;
}

// 1x1, 3x3 (with `stride`) and 1x1 convolutions, each followed by BatchNorm, ReLU after the
// first two and after the sum with the skip connection, which is projected when the shape
// changes.
class Bottleneck {
 public:
  Bottleneck(ParamSet& set, int64_t in, int64_t width, int64_t stride)
      : project_(stride != 1 || in != 4 * width) {
    conv1_ = Conv(set, in, width, 1, 1);
    bn1_ = BatchNorm2d(set, width);
    conv2_ = Conv(set, width, width, 3, stride);
    bn2_ = BatchNorm2d(set, width);
    conv3_ = Conv(set, width, 4 * width, 1, 1);
    bn3_ = BatchNorm2d(set, 4 * width);
    if (project_) {
      project_conv_ = Conv(set, in, 4 * width, 1, stride);
      project_bn_ = BatchNorm2d(set, 4 * width);
    }
  }
  at::Tensor operator()(const at::Tensor& x, bool training) const {
    at::Tensor y = at::relu(BatchNorm(bn1_, training, conv1_(x)));
    y = at::relu(BatchNorm(bn2_, training, conv2_(y)));
    y = BatchNorm(bn3_, training, conv3_(y));
    const at::Tensor skip = project_ ? BatchNorm(project_bn_, training, project_conv_(x)) : x;
    return at::relu(y + skip);
  }

 private:
  bool project_;
  Conv2d conv1_, conv2_, conv3_, project_conv_;
  BatchNorm2d bn1_, bn2_, bn3_, project_bn_;
};

class Resnet : public ParamSet {
 public:
  explicit Resnet(const ResnetOptions& options_) : options(options_) {
    const int64_t stem = options.width;
    stem_conv_ = Conv(*this, options.channels, stem, 7, 2);
    stem_bn_ = BatchNorm2d(*this, stem);
    int64_t in = stem;
    for (size_t layer = 0; layer < options.blocks.size(); ++layer) {
      const int64_t width = options.width << layer;
      for (int64_t b = 0; b < options.blocks[layer]; ++b) {
        const int64_t stride = layer > 0 && b == 0 ? 2 : 1;
        blocks_.emplace_back(*this, in, width, stride);
        in = 4 * width;
      }
    }
    head_ = Linear(*this, in, options.classes);
  }
  at::Tensor Stem(const at::Tensor& images) {
    const at::Tensor y = at::relu(BatchNorm(stem_bn_, is_training(), stem_conv_(images)));
    return at::max_pool2d(y, /*kernel_size=*/{3, 3}, /*stride=*/{2, 2}, /*padding=*/{1, 1});
  }
  at::Tensor Block(int64_t index, const at::Tensor& x) { return blocks_[index](x, is_training()); }

  at::Tensor HeadLoss(const at::Tensor& x, const at::Tensor& labels) {
    return at::cross_entropy_loss(head_(x.mean({2, 3})), labels);
  }
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }

  const ResnetOptions options;

 private:
  Conv2d stem_conv_;
  BatchNorm2d stem_bn_;
  std::vector<Bottleneck> blocks_;
  Linear head_;
};

class ResnetModel : public HeadLossModel<Resnet> {
 public:
  static std::vector<ParamDef> Params() {
    return {
        ChoiceParam("size", {"50", "152"}, "50",
                    "bottleneck blocks per layer: 50: 3, 4, 6, 3; 152: 3, 8, 36, 3"),
        IntParam("depth", "auto", "bottleneck blocks in every layer; auto = the size's")
            .Min(1)
            .Max(1000)
            .AllowAuto(),
        IntParam("layers", "4", "how many of the four layers (the first ones)").Min(1).Max(4),
        IntParam("width", "64", "the first layer's bottleneck width (doubled per layer)")
            .Min(1)
            .Max(4096),
        IntParam("image", "224", "image side in pixels").Min(1).Max(1 << 14),
        IntParam("channels", "3", "image channels").Min(1).Max(64),
        IntParam("classes", "1000", "classes of the classifier").Min(2).Max(1 << 20),
        IntParam("batch", "8", "images per batch").Min(1).Max(1 << 16).Scales(1),
    };
  }
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context) {
    const ResnetOptions o = Resolved(params);
    std::unique_ptr<Resnet> net =
        InitSeeded(context.init_seed, [&] { return std::make_unique<Resnet>(o); });
    return std::make_shared<ResnetModel>(params, params.Canonical(), std::move(net),
                                         context.device);
  }
  static std::vector<std::string> PaperSpecs() { return {"resnet:size=50:batch=8"}; }

  static std::string SmallSpec(const SpecChooser& choose) {
    // At least two images: a BatchNorm over a single value per channel has no variance.
    // At least 5 pixels: then the second layer's strided 1x1 projection never reads a single
    // pixel, where LibTorch 1.13's bfloat16 weight gradient reads memory it did not write (an
    // occasional NaN under --amp, whatever the strategy; docs/testing.md).
    return absl::StrCat("resnet:depth=", choose("depth", 1, 2), ":layers=", choose("layers", 1, 2),
                        ":width=", choose("width", 1, 3), ":image=", choose("image", 5, 12),
                        ":channels=", choose("channels", 1, 3),
                        ":classes=", choose("classes", 2, 6), ":batch=", choose("batch", 2, 3));
  }

  static std::vector<StageInfo> StagesFor(const ParamValues& params) {
    const ResnetOptions o = Resolved(params);
    const double batch = static_cast<double>(params.Int("batch"));
    // 2 x batch x output pixels x out x in x kernel^2 for a convolution.
    auto conv_flops = [batch](int64_t side, int64_t in, int64_t out, int64_t kernel) {
      return 2 * batch * static_cast<double>(side * side) * static_cast<double>(out * in) *
             static_cast<double>(kernel * kernel);
    };
    std::vector<StageInfo> stages;
    int64_t side = ConvOut(params.Int("image"), 7, 2);
    const double stem_flops = conv_flops(side, o.channels, o.width, 7);
    side = ConvOut(side, 3, 2);  // the max-pool
    stages.push_back({"stem",
                      StageKind::kOther,
                      /*stochastic=*/false,
                      {},
                      stem_flops,
                      "",
                      /*updates_state=*/true,
                      BatchNorm2d::StateBytes(o.width)});
    int64_t in = o.width;
    for (size_t layer = 0; layer < o.blocks.size(); ++layer) {
      const int64_t width = o.width << layer;
      for (int64_t b = 0; b < o.blocks[layer]; ++b) {
        const int64_t stride = layer > 0 && b == 0 ? 2 : 1;
        const int64_t out_side = ConvOut(side, 3, stride);
        const bool project = stride != 1 || in != 4 * width;
        const double flops = conv_flops(side, in, width, 1) +
                             conv_flops(out_side, width, width, 3) +
                             conv_flops(out_side, width, 4 * width, 1) +
                             (project ? conv_flops(out_side, in, 4 * width, 1) : 0);
        stages.push_back({absl::StrCat("layer", layer + 1, ".block", b),
                          StageKind::kOther,
                          /*stochastic=*/false,
                          {},
                          flops,
                          absl::StrCat("layer", layer + 1, project ? ".projection" : ".bottleneck"),
                          /*updates_state=*/true,
                          2 * BatchNorm2d::StateBytes(width) +
                              (project ? 2 : 1) * BatchNorm2d::StateBytes(4 * width)});
        side = out_side;
        in = 4 * width;
      }
    }
    stages.push_back({"head",
                      StageKind::kHead,
                      /*stochastic=*/false,
                      {},
                      2 * batch * static_cast<double>(in * o.classes),
                      ""});
    return stages;
  }

  ResnetModel(ParamValues params, std::string spec, std::unique_ptr<Resnet> net, c10::Device device)
      : HeadLossModel(params, std::move(spec), std::move(net), params.Int("batch"), device),
        image_(params.Int("image")) {}
  std::vector<StageInfo> Stages() const override { return StagesFor(params_); }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& in, const StageParts&,
                                   const Batch& batch) override {
    if (index == 0) return {module_->Stem(in.at(0))};
    if (index == module_->num_blocks() + 1)
      return {module_->HeadLoss(in.at(0), batch.targets.at(0))};
    return {module_->Block(index - 1, in.at(0))};
  }
  Batch MakeBatch(uint64_t seed) override {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const ResnetOptions& o = module_->options;
    const at::Tensor images = at::randn({batch_, o.channels, image_, image_}, gen);
    const at::Tensor labels = at::randint(o.classes, {batch_}, gen, at::kLong);
    return {{images.to(device_)}, {labels.to(device_)}};
  }

 private:
  int64_t image_;
};

const ModelRegistration<ResnetModel> registration(
    "resnet",
    "ResNet: stem, bottleneck blocks with BatchNorm (a stage each, skip inside), pooled "
    "classifier head with its loss",
    "resnet:size=50:depth=1:width=16:image=64:classes=100:batch=8");

}  // namespace
}  // namespace ckpt
