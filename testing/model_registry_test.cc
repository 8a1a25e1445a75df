// The model registry: every model models/models.bzl lists is registered (a forgotten alwayslink
// fails here, naming it), and each declares, from its parameters alone, the stages its built
// instances have.
#include <algorithm>

#include "core/chain_model.h"
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
      ASSERT_EQ(a.parts.size(), b.parts.size()) << spec << " " << a.name;
      for (size_t k = 0; k < a.parts.size(); ++k) {
        EXPECT_EQ(a.parts[k].name, b.parts[k].name) << spec << " " << a.name;
        EXPECT_EQ(a.parts[k].kind, b.parts[k].kind) << spec << " " << a.name;
        EXPECT_EQ(a.parts[k].extent, b.parts[k].extent) << spec << " " << a.name;
      }
    }
  }
}

}  // namespace
}  // namespace ckpt
