// The attention core's fused policy (PartMechanism::kFused, scaled_dot_product_attention): offered
// exactly where the LibTorch in use has the kernel and the core draws no dropout; where it runs,
// it keeps no seq x seq tensor, and its gradients are the unfused core's up to summation order
// (compared in float64, where the fused CPU kernel also runs). The conformance suite runs fused
// cores inside generated plans of every model; this pins what makes them worth having.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/plan/strategy.h"
#include "core/run/parts.h"
#include "core/run/torch_compat.h"
#include "core/run/workload.h"
#include "experiments/gradient_check.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/layers.h"
#include "testing/model_cases.h"

namespace ckpt {
namespace {

using ::testing::HasSubstr;

// Small instances of the models with attention, at seq 32 and head width 4, so that one
// probability tensor (batch x heads x 32 x 32) outweighs what a fused core keeps per head and row.
// `dropout`: the probability where the model has one.
std::vector<std::string> AttentionModels(const std::string& dropout) {
  return {
      "llama:size=tiny:depth=2:hidden=8:heads=2:kv_heads=1:mlp=16:seq=32:batch=2:vocab=16",
      "gpt2:depth=2:hidden=8:heads=2:seq=32:batch=2:vocab=16:context=32:dropout=" + dropout,
      "transformer:depth=2:hidden=8:heads=2:seq=32:batch=2:dropout=" + dropout,
      // 37 tokens: 36 patches and the class token.
      "vit:depth=2:hidden=8:heads=2:image=30:patch=5:channels=1:classes=3:batch=2:dropout=" +
          dropout,
  };
}

// Every fusable attention core fused, everything else stored; their sequences in `chunks` chunks
// when above 1 (later chunks' queries take the causal mask itself).
Plan FusedEverywhere(const ModelProfile& profile, int chunks) {
  Plan plan;
  plan.strategy = absl::StrCat("fused cores, ", chunks, " chunks");
  plan.segments = {Segment{0, profile.num_stages(), SegmentMode::kStored}};
  for (const StageInfo& stage : profile.stages) {
    StagePolicy policy;
    const int core = stage.FindPart(PartKind::kAttentionCore);
    if (core >= 0 && stage.parts[core].unfusable.empty()) {
      policy = PolicyFor(stage, PartKind::kAttentionCore, {PartAction::Fused()});
      if (chunks > 1)
        policy = WithPart(stage, policy, PartKind::kSequence, {PartAction::Chunk(), chunks});
    }
    plan.stage_policies.push_back(policy);
  }
  return plan;
}

TEST(FusedAttention, OfferedExactlyWhereTheLibTorchHasItAndTheCoreDrawsNoDropout) {
  if (compat::kHasFusedAttention) {
    EXPECT_EQ(FusedAttentionUnavailable(false), "");
  } else {
    EXPECT_THAT(FusedAttentionUnavailable(false), HasSubstr("has no scaled_dot_product_attention"));
  }
  EXPECT_THAT(FusedAttentionUnavailable(true), ::testing::Not(::testing::IsEmpty()));
  for (const std::string dropout : {"0", "0.1"}) {
    for (const std::string& spec : AttentionModels(dropout)) {
      absl::StatusOr<testing::Case> c = testing::BuildCase(spec, 1);
      ASSERT_TRUE(c.ok()) << spec << ": " << c.status();
      int cores = 0;
      for (int i = 0; i < c->profile.num_stages(); ++i) {
        const StageInfo& stage = c->profile.stages[i];
        const int core = stage.FindPart(PartKind::kAttentionCore);
        if (core < 0) continue;
        ++cores;
        // Llama has no dropout: its cores draw none whatever `dropout` says.
        const bool draws = dropout != "0" && spec.rfind("llama", 0) != 0;
        EXPECT_EQ(stage.parts[core].unfusable, FusedAttentionUnavailable(draws)) << spec;
        bool on_menu = false;
        for (const StagePolicy& policy : PolicyMenu(stage, 2)) {
          on_menu |= policy.Of(core).action.def().mechanism == PartMechanism::kFused;
        }
        EXPECT_EQ(on_menu, compat::kHasFusedAttention && !draws) << spec << " " << stage.name;
        // What the profile measured: the menu.
        const StagePolicy fused = PolicyFor(stage, PartKind::kAttentionCore, {PartAction::Fused()});
        EXPECT_EQ(c->profile.Find(i, fused) != nullptr, on_menu) << spec << " " << stage.name;
      }
      EXPECT_EQ(cores, 2) << spec;
    }
  }
}

// Where the kernel exists: every model's fused cores, whole and in chunks, against store_all.
TEST(FusedAttention, KeepsNoSeqSquaredTensorAndComputesTheUnfusedCore) {
  if (!compat::kHasFusedAttention) {
    GTEST_SKIP() << FusedAttentionUnavailable(false);
  }
  const ScopedDefaultDtype float64(caffe2::TypeMeta::Make<double>());
  for (const std::string& spec : AttentionModels("0")) {
    absl::StatusOr<testing::Case> c = testing::BuildCase(spec, 7);
    ASSERT_TRUE(c.ok()) << spec << ": " << c.status();
    absl::StatusOr<testing::Run> reference = testing::StepUnder(*c, "store_all", 9);
    ASSERT_TRUE(reference.ok()) << reference.status();
    const double scale = std::max(LargestMagnitude(reference->grads), 1.0);
    for (const int chunks : {1, 2}) {
      absl::StatusOr<testing::Run> run =
          testing::StepUnder(*c, FusedEverywhere(c->profile, chunks), 9);
      ASSERT_TRUE(run.ok()) << spec << ": " << run.status();
      EXPECT_LE(MaxGradientDifference(run->grads, reference->grads), 1e-9 * scale)
          << spec << ", " << chunks << " chunks";
      EXPECT_EQ(run->predicted.activation_bytes, run->step.activation_bytes) << spec;
      if (chunks > 1) continue;
      // The unfused core keeps at least its probabilities (batch 2 x heads 2 x seq^2 float64) in
      // each of the two blocks; the fused one, its output and log-sum-exps (seq x 5 per head).
      const int64_t seq = spec.rfind("vit", 0) == 0 ? 37 : 32;
      const int64_t probabilities = 2 * 2 * seq * seq * 8;
      EXPECT_GE(reference->step.activation_bytes - run->step.activation_bytes,
                2 * (probabilities - 2 * 2 * seq * 5 * 8))
          << spec << ": store_all keeps " << reference->step.activation_bytes
          << " bytes, fused cores " << run->step.activation_bytes;
    }
  }
}

}  // namespace
}  // namespace ckpt
