// The model registry: every model models/models.bzl lists is registered (a forgotten alwayslink
// fails here, naming it), and each declares, from its parameters alone, the stages its built
// instances have, the buffers they hold among them. And the named sizes are the published
// models'.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/run/chain_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/model_cases.h"

namespace ckpt {
namespace {

using ::testing::HasSubstr;

// Generated from models/models.bzl: the ids //models:all links.
const std::vector<std::string> kAggregateIds = {
#include "testing/aggregate_model_ids.inc"
};

TEST(ModelRegistry, EveryModelInModelsBzlIsRegistered) {
  std::vector<std::string> expected = kAggregateIds;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(Models().Ids(), expected)
      << "a model listed in models/models.bzl did not register (missing alwayslink = 1 or "
         "ModelRegistration), or one registered without being listed";
}

TEST(ModelRegistry, UnknownIdListsTheKnownOnes) {
  absl::StatusOr<std::vector<StageInfo>> stages = ModelStages("resnet9000");
  ASSERT_FALSE(stages.ok());
  EXPECT_EQ(stages.status().code(), absl::StatusCode::kNotFound);
  for (const std::string& id : kAggregateIds) {
    EXPECT_THAT(std::string(stages.status().message()), HasSubstr(id));
  }
}

// A built model's spec names what it built: a size's shape resolved where the spec left it
// "auto" (a TorchScript file's vocab=auto stays: the file decides), and building from that
// spec builds the same spec again.
TEST(ModelRegistry, ABuiltModelsSpecIsItsResolvedShapeAndReadsBackToItself) {
  std::vector<std::pair<std::string, std::string>> cases = {
      {"gpt2:size=medium:depth=1:seq=8:vocab=64:context=8", ":hidden=1024:heads=16:"},
      {"llama:size=tiny:seq=8:vocab=64", ":depth=2:hidden=64:heads=4:kv_heads=2:mlp=172:"},
      {"vit:size=b16:depth=1:image=32", ":hidden=768:heads=12:"}};
  for (const std::string& id : Models().Ids()) cases.emplace_back(testing::FixedSmallSpec(id), "");
  for (const auto& [spec, resolved] : cases) {
    absl::StatusOr<std::shared_ptr<ChainModel>> model = CreateModel(spec, ModelContext{});
    ASSERT_TRUE(model.ok()) << spec << ": " << model.status();
    const std::string built = (*model)->spec();
    EXPECT_THAT(built, HasSubstr(resolved)) << spec;
    if (!resolved.empty()) {
      EXPECT_THAT(built, ::testing::Not(HasSubstr("=auto"))) << spec;
    }
    absl::StatusOr<std::shared_ptr<ChainModel>> again = CreateModel(built, ModelContext{});
    ASSERT_TRUE(again.ok()) << built << ": " << again.status();
    EXPECT_EQ((*again)->spec(), built);
  }
}

// What a plan file is checked against before anything runs is what the model runs.
TEST(ModelRegistry, StagesDeclaredFromParametersAreTheBuiltModelsStages) {
  for (const std::string& id : Models().Ids()) {
    const std::string spec = testing::FixedSmallSpec(id);
    absl::StatusOr<std::vector<StageInfo>> declared = ModelStages(spec);
    absl::StatusOr<std::shared_ptr<ChainModel>> model = CreateModel(spec, ModelContext{});
    ASSERT_TRUE(declared.ok() && model.ok()) << spec;
    const std::vector<StageInfo> built = (*model)->Stages();
    ASSERT_EQ(declared->size(), built.size()) << spec;
    for (size_t i = 0; i < built.size(); ++i) {
      const StageInfo& a = (*declared)[i];
      const StageInfo& b = built[i];
      EXPECT_EQ(a.name, b.name) << spec;
      EXPECT_EQ(a.kind, b.kind) << spec << " " << a.name;
      EXPECT_EQ(a.stochastic, b.stochastic) << spec << " " << a.name;
      EXPECT_EQ(a.forward_flops, b.forward_flops) << spec << " " << a.name;
      EXPECT_EQ(a.repeat_key, b.repeat_key) << spec << " " << a.name;
      EXPECT_EQ(a.updates_state, b.updates_state) << spec << " " << a.name;
      EXPECT_EQ(a.buffer_bytes, b.buffer_bytes) << spec << " " << a.name;
      ASSERT_EQ(a.parts.size(), b.parts.size()) << spec << " " << a.name;
      for (size_t k = 0; k < a.parts.size(); ++k) {
        EXPECT_EQ(a.parts[k].name, b.parts[k].name) << spec << " " << a.name;
        EXPECT_EQ(a.parts[k].kind, b.parts[k].kind) << spec << " " << a.name;
        EXPECT_EQ(a.parts[k].extent, b.parts[k].extent) << spec << " " << a.name;
      }
    }
  }
}

// The buffers its stages declare are what the built model holds besides its parameters: every
// storage of its state once, none of a parameter's (a training step's total counts them).
TEST(ModelRegistry, StagesDeclareTheBuffersTheModelHolds) {
  for (const std::string& id : Models().Ids()) {
    for (const std::string& spec :
         {testing::FixedSmallSpec(id), Models().Find(id).value()->traits.quick_spec}) {
      if (spec.empty()) continue;
      absl::StatusOr<std::vector<StageInfo>> declared = ModelStages(spec);
      absl::StatusOr<std::shared_ptr<ChainModel>> model = CreateModel(spec, ModelContext{});
      ASSERT_TRUE(declared.ok() && model.ok()) << spec;
      std::set<const c10::StorageImpl*> seen;
      for (const at::Tensor& p : (*model)->Parameters())
        seen.insert(p.storage().unsafeGetStorageImpl());
      int64_t held = 0;
      for (const at::Tensor& b : (*model)->State()) {
        if (seen.insert(b.storage().unsafeGetStorageImpl()).second) held += b.storage().nbytes();
      }
      int64_t sum = 0;
      for (const StageInfo& stage : *declared) sum += stage.buffer_bytes;
      EXPECT_EQ(sum, held) << spec;
    }
  }
}

// The parameters of `spec`'s model at its size's own depth, counted without building the full
// depth: a model of depth d has e + d b parameters, so two shallow ones give e and b. The depth
// comes from the stages (declared without building it): the embedding, an attention and an MLP
// stage per block, the head.
int64_t ParametersAtFullDepth(const std::string& spec) {
  auto count = [](const std::string& spec) -> int64_t {
    absl::StatusOr<std::shared_ptr<ChainModel>> model = CreateModel(spec, ModelContext{});
    EXPECT_TRUE(model.ok()) << spec << ": " << model.status();
    if (!model.ok()) return -1;
    int64_t n = 0;
    for (const at::Tensor& p : (*model)->Parameters()) n += p.numel();
    return n;
  };
  const int64_t one = count(spec + ":depth=1"), two = count(spec + ":depth=2");
  absl::StatusOr<std::vector<StageInfo>> stages = ModelStages(spec);
  EXPECT_TRUE(stages.ok()) << stages.status();
  if (!stages.ok()) return -1;
  const int64_t depth = (static_cast<int64_t>(stages->size()) - 2) / 2;
  return one + (depth - 1) * (two - one);
}

// The named sizes have the published parameter counts: GPT-2's four (Radford et al., as the
// released checkpoints have them: tied head, 1024 positions, vocabulary 50257), ViT-B/16 and
// ViT-L/16 at 224 px with 1000 classes (torchvision's vit_b_16 and vit_l_16: convolutional
// patch embedding, class token, learned positions).
TEST(ModelSizes, TransformerSizesHaveThePublishedParameterCounts) {
  const std::vector<std::pair<std::string, int64_t>> published = {
      {"gpt2:size=small:seq=8:batch=1", 124439808}, {"gpt2:size=medium:seq=8:batch=1", 354823168},
      {"gpt2:size=large:seq=8:batch=1", 774030080}, {"gpt2:size=xl:seq=8:batch=1", 1557611200},
      {"vit:size=b16:batch=1", 86567656},           {"vit:size=l16:batch=1", 304326632}};
  for (const auto& [spec, parameters] : published) {
    EXPECT_EQ(ParametersAtFullDepth(spec), parameters) << spec;
  }
}

// ResNet-50 and ResNet-152 with 1000 classes have torchvision's counts (resnet50, resnet152:
// BatchNorm's weight and bias are parameters, its running statistics not).
TEST(ModelSizes, ResnetSizesHaveThePublishedParameterCounts) {
  const std::vector<std::pair<std::string, int64_t>> published = {{"50", 25557032},
                                                                  {"152", 60192808}};
  for (const auto& [size, parameters] : published) {
    absl::StatusOr<std::shared_ptr<ChainModel>> model =
        CreateModel(absl::StrCat("resnet:size=", size, ":image=32:batch=1"), ModelContext{});
    ASSERT_TRUE(model.ok()) << model.status();
    int64_t n = 0;
    for (const at::Tensor& p : (*model)->Parameters()) n += p.numel();
    EXPECT_EQ(n, parameters) << size;
  }
}

}  // namespace
}  // namespace ckpt
