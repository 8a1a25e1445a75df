// How each strategy's memory scales, measured with the exact CPU meter on the model zoo.
// A = one stage boundary tensor (batch x hidden x 4 bytes for the MLPs).
#include "ATen/ops/equal.h"
#include "absl/strings/str_cat.h"
#include "core/plan/schedule.h"
#include "core/plan/strategy.h"
#include "core/run/chain_model.h"
#include "core/run/profiler.h"
#include "core/run/workload.h"
#include "experiments/gradient_check.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"
#include "testing/model_cases.h"

namespace ckpt {
namespace {

using testing::Run;

MemoryMeter& Cpu() { return **MemoryMeterFor(c10::Device(c10::DeviceType::CPU)); }

Run MustStep(const std::string& model_spec, const std::string& strategy, bool training = true) {
  absl::StatusOr<testing::Case> c = testing::BuildCase(model_spec, /*seed=*/1, training);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return Run{};
  absl::StatusOr<Run> run = testing::StepUnder(*c, strategy, 2);
  EXPECT_TRUE(run.ok()) << model_spec << " " << strategy << ": " << run.status();
  return run.ok() ? *run : Run{};
}

int64_t Activation(const std::string& model_spec, const std::string& strategy) {
  return MustStep(model_spec, strategy).step.activation_bytes;
}

int64_t PeakAboveBaseline(const std::string& model_spec, const std::string& strategy) {
  const Run r = MustStep(model_spec, strategy);
  return r.step.peak_bytes - r.step.baseline_bytes;
}

std::string Mlp(int depth) { return absl::StrCat("heavy_mlp:depth=", depth, ":hidden=32:batch=8"); }
std::string Encoder(int depth) {
  return absl::StrCat("transformer:depth=", depth, ":hidden=16:heads=2:seq=8:batch=2");
}

// Without dropout: with it, every checkpoint also keeps a snapshot of the CPU generator (5056
// bytes for mt19937), which at these toy sizes can outweigh what a segment saves (the sweep
// reports it; the conformance test checks it is predicted). A checkpoint keeps its input, which
// store_all keeps only where a stage's graph saves it: uniform <= store_all where every stage's
// graph keeps its input (a stage that saves nothing of it, x * count or a view, can make
// checkpointing cost more, and the generated TorchScript chains hold such stages).
RC_GTEST_PROP(MemoryProperties, RecomputeAllAtMostUniformAtMostStoreAll, ()) {
  const std::string model_id = *rc::gen::elementOf(Models().Ids());
  const std::string spec = *testing::SmallModelSpec(model_id, /*dropout=*/false).as("model");
  absl::StatusOr<testing::Case> c = testing::BuildCase(spec, /*seed=*/1);
  RC_ASSERT(c.ok());
  const auto activation = [&](const std::string& strategy) {
    absl::StatusOr<Run> run = testing::StepUnder(*c, strategy, 2);
    RC_ASSERT(run.ok());
    return run->step.activation_bytes;
  };
  const int64_t store_all = activation("store_all");
  const int64_t uniform = activation("uniform");
  const int64_t recompute_all = activation("recompute_all");
  RC_ASSERT(recompute_all <= uniform);
  bool inputs_kept = true;
  for (int j = 1; j < c->profile.num_stages(); ++j) {
    inputs_kept &= !c->profile.Stored(j).kept_inputs.empty();
  }
  RC_TAG(inputs_kept ? "every stage keeps its input" : "a stage keeps nothing of its input");
  if (inputs_kept) RC_ASSERT(uniform <= store_all);
}

// Offloading moves a checkpoint's kept input to the host pool, and nothing else: on generated
// instances of every model under a generated plan, the plan with its checkpointed segments
// offloaded has the same gradients to the bit, no more device bytes after forward or at the
// peak, and after forward exactly the bytes it moved out of the device fewer (the host pool
// holds them: its copies made in the forward pass, counted from their inputs' sizes); where a
// storage moved is one another boundary shares, at most those fewer after forward, and at the
// peak at most the bytes it copied more.
RC_GTEST_PROP(MemoryProperties, OffloadingMovesKeptInputsToTheHostAndNothingElse, ()) {
  const std::string model_id = *rc::gen::elementOf(Models().Ids());
  const std::string spec = *testing::SmallModelSpec(model_id, /*dropout=*/true).as("model");
  absl::StatusOr<testing::Case> c = testing::BuildCase(spec, /*seed=*/1);
  RC_ASSERT(c.ok());
  const Plan plan = *testing::RandomPlan(c->profile.stages).as("plan");
  Plan kept = plan, offloaded = plan;
  kept.segments =
      testing::Remoded(plan.segments, SegmentMode::kOffloaded, SegmentMode::kCheckpointed);
  offloaded.segments =
      testing::Remoded(plan.segments, SegmentMode::kCheckpointed, SegmentMode::kOffloaded);
  absl::StatusOr<Run> a = testing::StepUnder(*c, kept, 2);
  absl::StatusOr<Run> b = testing::StepUnder(*c, offloaded, 2);
  RC_ASSERT(a.ok() && b.ok());
  RC_ASSERT(a->step.loss == b->step.loss);
  for (size_t i = 0; i < a->grads.size(); ++i) {
    RC_ASSERT(a->grads[i].defined() == b->grads[i].defined());
    if (a->grads[i].defined()) RC_ASSERT(at::equal(a->grads[i], b->grads[i]));
  }
  RC_ASSERT(a->step.host_peak_bytes == 0);
  RC_ASSERT(b->step.activation_bytes <= a->step.activation_bytes);
  // Where an output names its input's storage (a TorchScript stage returning a view or its
  // input), a value moved out may share a storage something else still holds on the device:
  // moving it frees nothing, and its copy back is more (as the memory model predicts).
  bool shared = false;
  for (int j = 0; j < c->profile.num_stages(); ++j) {
    for (const BoundaryStorage& o : c->profile.Stored(j).OutputStorages()) shared |= o.input >= 0;
  }
  RC_TAG(shared ? "storage shared across boundaries" : "no storage shared");
  RC_ASSERT(b->step.peak_bytes - b->step.baseline_bytes <=
            a->step.peak_bytes - a->step.baseline_bytes + (shared ? b->step.offloaded_bytes : 0));
  const Program program = Compile(offloaded, c->profile.stages);
  int64_t moved_in_forward = 0;
  for (size_t i = 0; i < program.ForwardEnd(); ++i) {
    const Op& op = program.ops[i];
    if (op.code != OpCode::kOffload) continue;
    // The value read is the output of the stage before the segment (op.input's boundary).
    const Op& next = program.ops[i + 1];
    RC_ASSERT(next.code == OpCode::kForward && next.input == op.input);
    moved_in_forward += c->profile.Stored(next.begin - 1).output_bytes;
  }
  RC_TAG(moved_in_forward > 0 ? "moved" : "nothing to move");
  if (shared) {
    RC_ASSERT(a->step.activation_bytes - b->step.activation_bytes <= moved_in_forward);
  } else {
    RC_ASSERT(a->step.activation_bytes - b->step.activation_bytes == moved_in_forward);
  }
}

// Stages a model declares alike (StageInfo::repeat_key) are measured once and the others given
// copies: on generated instances of every model, the copies are what measuring each stage gives,
// byte for byte, parameter by parameter.
RC_GTEST_PROP(Profile, RepeatedStagesMeasuredOnceEqualEachMeasured, ()) {
  const std::string spec =
      *testing::SmallModelSpec(*rc::gen::elementOf(Models().Ids())).as("model");
  WorkloadOptions options;
  options.profile.timed = false;
  absl::StatusOr<Workload> w = Workload::Build(spec, options);
  RC_ASSERT(w.ok());
  ProfileOptions each = options.profile;
  each.reuse_repeated = false;
  const c10::Device cpu(c10::DeviceType::CPU);
  absl::StatusOr<ModelProfile> once =
      ProfileModel(*w->model(), w->batch(), Cpu(), cpu, options.profile);
  absl::StatusOr<ModelProfile> all = ProfileModel(*w->model(), w->batch(), Cpu(), cpu, each);
  RC_ASSERT(once.ok() && all.ok());
  RC_ASSERT(once->measured.size() == all->measured.size());
  for (size_t i = 0; i < once->measured.size(); ++i) {
    RC_ASSERT(once->measured[i].size() == all->measured[i].size());
    for (size_t k = 0; k < once->measured[i].size(); ++k) {
      const StageProfile& a = once->measured[i][k];
      const StageProfile& b = all->measured[i][k];
      RC_LOG() << once->stages[i].name << " " << DescribePolicy(once->stages[i], a.policy) << "\n";
      RC_ASSERT(a.policy == b.policy);
      RC_ASSERT(a.input_bytes == b.input_bytes && a.output_bytes == b.output_bytes);
      RC_ASSERT(a.retained_bytes == b.retained_bytes);
      RC_ASSERT(a.kept_inputs == b.kept_inputs && a.kept_outputs == b.kept_outputs);
      RC_ASSERT(a.outputs.size() == b.outputs.size());
      for (size_t o = 0; o < a.outputs.size(); ++o) {
        RC_ASSERT(a.outputs[o].bytes == b.outputs[o].bytes &&
                  a.outputs[o].input == b.outputs[o].input);
      }
      RC_ASSERT(a.forward_transient_bytes == b.forward_transient_bytes);
      RC_ASSERT(a.nograd_transient_bytes == b.nograd_transient_bytes);
      RC_ASSERT(a.param_grads == b.param_grads);
      RC_ASSERT(a.param_grad_sums_in_place == b.param_grad_sums_in_place);
      RC_ASSERT(a.input_grad_bytes == b.input_grad_bytes);
      RC_ASSERT(a.backward_transient_bytes == b.backward_transient_bytes);
      RC_ASSERT(a.backward_input_held_transient_bytes == b.backward_input_held_transient_bytes);
      RC_ASSERT(a.backward_input_output_held_transient_bytes ==
                b.backward_input_output_held_transient_bytes);
      RC_ASSERT(a.backward_held_transient_bytes == b.backward_held_transient_bytes);
      RC_ASSERT(a.rng_state_bytes == b.rng_state_bytes);
    }
  }
}

TEST(MemoryProperties, StoreAllGrowsLinearlyWithDepth) {
  // Every heavy_mlp block keeps one A = 8 x 32 x 4 = 1024 bytes; every transformer block the
  // same bytes: equal steps from one depth to the next.
  for (auto model : {&Mlp, &Encoder}) {
    const int64_t step = Activation(model(2), "store_all") - Activation(model(1), "store_all");
    EXPECT_GT(step, 0);
    for (int depth = 2; depth <= 5; ++depth) {
      EXPECT_EQ(Activation(model(depth + 1), "store_all") - Activation(model(depth), "store_all"),
                step)
          << model(depth);
    }
  }
  EXPECT_EQ(Activation(Mlp(2), "store_all") - Activation(Mlp(1), "store_all"), 1024);
}

TEST(MemoryProperties, UniformGrowsWithTheSquareRootOfDepth) {
  // Default k = ceil(sqrt(L)): (k - 1) segment inputs + L / k stored blocks, in A.
  // L = 16: 3 + 4 = 7 A; L = 64: 7 + 8 = 15 A; L = 100: 9 + 10 = 19 A; L = 25: 4 + 5 = 9 A.
  // Quadrupling the depth about doubles the bytes (15/7 and 19/9: 2.1).
  const double a16 = Activation(Mlp(16), "uniform"), a64 = Activation(Mlp(64), "uniform");
  const double a25 = Activation(Mlp(25), "uniform"), a100 = Activation(Mlp(100), "uniform");
  EXPECT_EQ(a16, 7 * 1024 + 4);
  EXPECT_EQ(a64, 15 * 1024 + 4);
  EXPECT_NEAR(a64 / a16, 2.0, 0.2);
  EXPECT_NEAR(a100 / a25, 2.0, 0.2);
  // store_all quadruples over the same range.
  EXPECT_NEAR(Activation(Mlp(64), "store_all") / double(Activation(Mlp(16), "store_all")), 4.0,
              0.01);
}

TEST(MemoryProperties, RecomputeAllDoesNotGrowWithDepth) {
  // It keeps the chain's input (the batch's, in the baseline), and with a dropout model one RNG
  // snapshot, whatever the depth: the output and the loss are all that remain.
  for (auto model : {&Mlp, &Encoder}) {
    const int64_t at_depth_1 = Activation(model(1), "recompute_all");
    for (int depth = 2; depth <= 6; ++depth) {
      EXPECT_EQ(Activation(model(depth), "recompute_all"), at_depth_1) << model(depth);
    }
  }
}

TEST(MemoryProperties, SelectiveAttentionSavesTheScoreSizedTensors) {
  // Stored, an attention core keeps three batch x heads x seq^2 tensors: softmax's output
  // (4 bytes per element), the dropout mask (bool, 1) and the dropped probabilities that the
  // product with V saves (4); a causal one also the seq x seq bool mask that masked_fill
  // saves. selective_attention keeps none of them: it saves at least the two float ones per
  // attention stage, and exactly all of them.
  struct Case {
    std::string spec;
    int64_t attention_stages, batch, heads, seq;
    bool causal;
  };
  for (const Case& c : std::vector<Case>{
           {"transformer:depth=2:hidden=16:heads=2:seq=24:batch=2", 2, 2, 2, 24, false},
           {"gpt2:depth=3:hidden=16:heads=4:seq=20:batch=1:vocab=50:context=32", 3, 1, 4, 20,
            true}}) {
    const int64_t scores = c.batch * c.heads * c.seq * c.seq;
    const int64_t saved =
        Activation(c.spec, "store_all") - Activation(c.spec, "selective_attention");
    EXPECT_GE(saved, c.attention_stages * scores * 4 * 2) << c.spec;
    const int64_t causal_mask = c.causal ? c.seq * c.seq : 0;
    EXPECT_EQ(saved, c.attention_stages * (scores * (4 + 1 + 4) + causal_mask)) << c.spec;
  }
  // Without attention there is nothing to select: the same bytes as store_all.
  EXPECT_EQ(Activation(Mlp(4), "selective_attention"), Activation(Mlp(4), "store_all"));
}

TEST(MemoryProperties, SelectiveMlpSavesTheHiddenActivations) {
  // Stored, an MLP of width 4h keeps its first product's output (which GELU saves) and GELU's
  // output (which the second product saves): 2 x batch x seq x 4h floats. Recomputed, it keeps
  // only its input, which the stage holds anyway. GPT-2's part includes the LayerNorm before
  // it (pre-LN), whose output the first product saved (batch x seq x h floats) and whose mean
  // and inverse deviation per position (2 x batch x seq floats) it saved itself.
  struct Case {
    std::string spec;
    int64_t mlp_stages, batch, seq, hidden;
    bool layer_norm_inside;
  };
  for (const Case& c : std::vector<Case>{
           {"transformer:depth=2:hidden=16:heads=2:seq=24:batch=2", 2, 2, 24, 16, false},
           {"gpt2:depth=3:hidden=16:heads=4:seq=20:batch=1:vocab=50:context=32", 3, 1, 20, 16,
            true}}) {
    const int64_t tokens = c.batch * c.seq;
    const int64_t per_stage = 2 * tokens * 4 * c.hidden * 4 +
                              (c.layer_norm_inside ? tokens * c.hidden * 4 + 2 * tokens * 4 : 0);
    EXPECT_EQ(Activation(c.spec, "store_all") - Activation(c.spec, "selective_mlp"),
              c.mlp_stages * per_stage)
        << c.spec;
  }
  // The MLP zoo's blocks declare no hidden part: the same bytes as store_all.
  EXPECT_EQ(Activation(Mlp(4), "selective_mlp"), Activation(Mlp(4), "store_all"));
}

TEST(MemoryProperties, NormRecomputeDropsEachNormsOutputAndWhatItSaves) {
  // Stored, a pre-norm stage's LayerNorm output is kept by the layers that read it (the
  // attention's projections, the MLP's first product): tokens x hidden floats; and LayerNorm
  // itself keeps its mean and inverse deviation per position: 2 x tokens floats. Its input is
  // the stage's, held anyway. With the norm recomputed (Megatron-Core's layernorm recompute)
  // none of that is held between forward and backward: exactly that much less per stage, and
  // the same gradients to the bit.
  const std::string spec = "gpt2:depth=3:hidden=16:heads=4:seq=20:batch=1:vocab=50:context=32";
  const int64_t tokens = 1 * 20, hidden = 16, block_stages = 2 * 3;
  absl::StatusOr<testing::Case> c = testing::BuildCase(spec, /*seed=*/1);
  ASSERT_TRUE(c.ok()) << c.status();
  Plan plan;
  plan.strategy = "norms recomputed";
  plan.segments = {{0, c->profile.num_stages(), SegmentMode::kStored}};
  int norms = 0;
  for (const StageInfo& stage : c->profile.stages) {
    plan.stage_policies.push_back(
        PolicyFor(stage, PartKind::kNorm, {PartAction::Recompute(PartKind::kNorm)}));
    norms += !plan.stage_policies.back().IsDefault();
  }
  EXPECT_EQ(norms, block_stages);
  absl::StatusOr<testing::Run> reference = testing::StepUnder(*c, "store_all", 2);
  absl::StatusOr<testing::Run> recomputed = testing::StepUnder(*c, plan, 2);
  ASSERT_TRUE(reference.ok() && recomputed.ok()) << recomputed.status();
  EXPECT_EQ(reference->step.activation_bytes - recomputed->step.activation_bytes,
            block_stages * (tokens * hidden * 4 + 2 * tokens * 4));
  EXPECT_EQ(MaxGradientDifference(recomputed->grads, reference->grads), 0.0);
  EXPECT_EQ(recomputed->predicted.activation_bytes, recomputed->step.activation_bytes);
  // The peak: the memory model's (within the slack budget planners leave), and below store_all's.
  const int64_t peak = recomputed->step.peak_bytes - recomputed->step.baseline_bytes;
  EXPECT_NEAR(recomputed->predicted.peak_bytes, peak, kBudgetSlackBytes);
  EXPECT_LT(peak, reference->step.peak_bytes - reference->step.baseline_bytes);
  // The post-norm encoder's norms write the stage's output: no part to drop.
  absl::StatusOr<testing::Case> encoder = testing::BuildCase(Encoder(2), 1);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  for (const StageInfo& stage : encoder->profile.stages) {
    EXPECT_EQ(stage.FindPart(PartKind::kNorm), -1) << stage.name;
  }
}

TEST(MemoryProperties, ChunkedSequencePeakFallsAsChunksRise) {
  for (const std::string spec :
       {"transformer:depth=2:hidden=16:heads=2:seq=32:batch=2",
        "gpt2:depth=2:hidden=16:heads=2:seq=32:batch=2:vocab=500:context=32"}) {
    int64_t previous = PeakAboveBaseline(spec, "store_all");
    for (int chunks : {2, 4, 8}) {
      const int64_t peak =
          PeakAboveBaseline(spec, absl::StrCat("chunked_sequence:chunks=", chunks));
      EXPECT_LT(peak, previous) << spec << " chunks=" << chunks;
      previous = peak;
    }
  }
}

TEST(RecomputeCounts, FollowTheirFormulas) {
  // recompute_forwards counts whole-stage forwards run again by backward. For L = 6 stages:
  //   store_all: 0.
  //   uniform (k = ceil(sqrt(6)) = 3 segments of 2, the last stored): 2 + 2 = 4.
  //   uniform:segments=6: every stage but the last: 5.
  //   recompute_all: stage j reruns the j stages before it without a graph, then itself:
  //     sum over j = 0..5 of (j + 1) = L(L-1)/2 + L = 15 + 6 = 21.
  //   selective_attention, selective_mlp and chunked_sequence rerun parts of stages, not whole
  //   ones: 0.
  const std::string mlp = Mlp(6);
  EXPECT_EQ(MustStep(mlp, "store_all").step.recompute_forwards, 0);
  EXPECT_EQ(MustStep(mlp, "uniform").step.recompute_forwards, 4);
  EXPECT_EQ(MustStep(mlp, "uniform:segments=6").step.recompute_forwards, 5);
  EXPECT_EQ(MustStep(mlp, "recompute_all").step.recompute_forwards, 21);
  EXPECT_EQ(MustStep(mlp, "selective_attention").step.recompute_forwards, 0);
  EXPECT_EQ(MustStep(mlp, "chunked_sequence").step.recompute_forwards, 0);
  EXPECT_EQ(MustStep(Encoder(2), "selective_mlp").step.recompute_forwards, 0);
}

}  // namespace
}  // namespace ckpt
