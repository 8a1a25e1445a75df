// The CPU memory meter is exact, so measured bytes can be compared with bytes computed by
// hand. All tensors are float32 (4 bytes per element).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ATen/ops/empty.h"
#include "ATen/ops/zeros.h"
#include "c10/core/DeviceType.h"
#include "c10/core/ScalarType.h"
#include "core/plan/memory_model.h"
#include "core/plan/strategy.h"
#include "core/run/chain_model.h"
#include "core/run/executor.h"
#include "core/run/memory_meter.h"
#include "core/run/profiler.h"
#include "core/run/torch_status.h"
#include "gtest/gtest.h"

namespace ckpt {
namespace {

MemoryMeter& Cpu() { return **MemoryMeterFor(at::kCPU); }

TEST(CpuMemoryMeter, CountsEveryByteOfEveryTensor) {
  const int64_t before = Cpu().Stats().live_bytes;
  {
    at::Tensor a = at::empty({1000});                 // 4000 bytes
    at::Tensor b = at::empty({10, 10}, at::kDouble);  // 800 bytes
    EXPECT_EQ(Cpu().Stats().live_bytes - before, 4800);
    at::Tensor view = a.view({10, 100});  // a view allocates nothing
    EXPECT_EQ(Cpu().Stats().live_bytes - before, 4800);
  }
  EXPECT_EQ(Cpu().Stats().live_bytes, before);
}

TEST(CpuMemoryMeter, PeakRemembersTheHighestPointSinceReset) {
  const int64_t before = Cpu().Stats().live_bytes;
  Cpu().ResetPeak();
  { at::Tensor big = at::empty({25000}); }  // 100000 bytes, freed at once
  at::Tensor small = at::empty({250});      // 1000 bytes, kept
  const MemoryStats s = Cpu().Stats();
  EXPECT_EQ(s.live_bytes - before, 1000);
  EXPECT_EQ(s.peak_bytes - before, 100000);
  Cpu().ResetPeak();
  EXPECT_EQ(Cpu().Stats().peak_bytes, Cpu().Stats().live_bytes);
}

TEST(CpuMemoryMeter, CachesFreedBlocksByClassAndReleasesThemOnRequest) {
  Cpu().ReleaseCached();
  const MemoryStats empty = Cpu().Stats();
  EXPECT_EQ(empty.reserved_bytes, empty.allocated_bytes);  // nothing cached
  // 300 floats ask for 1200 bytes, served by a block of 1216 (a multiple of 64 up to 4 KiB).
  at::Tensor t = at::empty({300});
  MemoryStats s = Cpu().Stats();
  EXPECT_EQ(s.live_bytes - empty.live_bytes, 1200);
  EXPECT_EQ(s.allocated_bytes - empty.allocated_bytes, 1216);
  EXPECT_EQ(s.reserved_bytes - empty.reserved_bytes, 1216);
  t.reset();  // freed: no longer live or allocated, but held in the cache
  s = Cpu().Stats();
  EXPECT_EQ(s.live_bytes, empty.live_bytes);
  EXPECT_EQ(s.allocated_bytes, empty.allocated_bytes);
  EXPECT_EQ(s.reserved_bytes - empty.reserved_bytes, 1216);
  // 1180 bytes fall in the same class: the cached block serves them, nothing new is reserved.
  t = at::empty({295});
  s = Cpu().Stats();
  EXPECT_EQ(s.live_bytes - empty.live_bytes, 1180);
  EXPECT_EQ(s.reserved_bytes - empty.reserved_bytes, 1216);
  // Above 4 KiB a block is the request rounded up to a quarter of its power of two: 5000
  // bytes (between 4096 and 8192) take a block of 5120.
  at::Tensor big = at::empty({1250});
  EXPECT_EQ(Cpu().Stats().allocated_bytes - empty.allocated_bytes, 1216 + 5120);
  t.reset();
  big.reset();
  EXPECT_EQ(Cpu().Stats().reserved_bytes - empty.reserved_bytes, 1216 + 5120);
  Cpu().ReleaseCached();
  s = Cpu().Stats();
  EXPECT_EQ(s.reserved_bytes, s.allocated_bytes);
  EXPECT_EQ(s.live_bytes, empty.live_bytes);
}

TEST(CpuMemoryMeter, ABlockTheSystemRefusesIsOutOfMemoryAndLeavesTheCountsAsTheyWere) {
  const MemoryStats before = Cpu().Stats();
  // 2^45 floats are 128 TiB: beyond any x86-64 process's address space, so refused whatever
  // the machine's overcommit policy.
  absl::Status refused = RunTorch([] { at::empty({int64_t{1} << 45}); });
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("the system refused"), absl::string_view::npos) << refused;
  const MemoryStats after = Cpu().Stats();
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.peak_bytes, before.peak_bytes);
  EXPECT_LE(after.reserved_bytes, before.reserved_bytes);  // the cache was handed back first
  // And the next allocation is counted as usual.
  at::Tensor t = at::empty({10});
  EXPECT_EQ(Cpu().Stats().live_bytes - after.live_bytes, 40);
}

TEST(CpuMemoryMeter, CapThrowsOutOfMemoryWhichBecomesResourceExhausted) {
  const int64_t before = Cpu().Stats().live_bytes;
  ASSERT_TRUE(Cpu().SetCap(before + 4000).ok());
  absl::Status fits = RunTorch([] { at::empty({1000}); });     // exactly at the cap
  absl::Status too_big = RunTorch([] { at::empty({1001}); });  // 4 bytes over
  ASSERT_TRUE(Cpu().SetCap(std::nullopt).ok());
  EXPECT_TRUE(fits.ok()) << fits;
  EXPECT_EQ(too_big.code(), absl::StatusCode::kResourceExhausted) << too_big;
  EXPECT_NE(too_big.message().find("over the cap"), absl::string_view::npos) << too_big;
  EXPECT_EQ(Cpu().Stats().live_bytes, before);  // the failed allocation left nothing behind
  EXPECT_FALSE(Cpu().SetCap(-1).ok());
}

// heavy_mlp with L blocks, batch B, hidden H; one B x H activation is A = 4*B*H bytes.
struct Chain {
  std::shared_ptr<ChainModel> model;
  Batch batch;
};

Chain MakeMlp(int depth, int hidden, int batch) {
  const std::string spec = "heavy_mlp:depth=" + std::to_string(depth) +
                           ":hidden=" + std::to_string(hidden) + ":batch=" + std::to_string(batch);
  absl::StatusOr<std::shared_ptr<ChainModel>> model = CreateModel(spec, {});
  EXPECT_TRUE(model.ok()) << model.status();
  Batch b = (*model)->MakeBatch(/*seed=*/5);
  return {*model, b};
}

StepResult StepUnder(const std::string& strategy_spec, Chain& chain) {
  Plan plan = *PlanFor(strategy_spec, StructureOnlyProfile(*chain.model));
  absl::StatusOr<ChainExecutor> exec = ChainExecutor::Create(chain.model, plan, &Cpu(), at::kCPU);
  EXPECT_TRUE(exec.ok()) << exec.status();
  absl::StatusOr<StepResult> r = exec->Step(chain.batch);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

TEST(ActivationBytes, StoreAllKeepsOneActivationPerBlock) {
  // Each block is relu(linear(x)). Linear saves its input (the previous block's output,
  // already counted) and ReLU saves its output: one new B x H tensor per block. Linear's own
  // output is freed once ReLU has consumed it. The loss, sum(), keeps nothing and returns a
  // 4-byte scalar. So activation_bytes = L*A + 4.
  Chain chain = MakeMlp(/*depth=*/6, /*hidden=*/32, /*batch=*/4);  // A = 4*4*32 = 512
  const StepResult r = StepUnder("store_all", chain);
  EXPECT_EQ(r.activation_bytes, 6 * 512 + 4);
  EXPECT_EQ(r.recompute_forwards, 0);
}

TEST(ActivationBytes, UniformKeepsSegmentInputsPlusTheLastSegment) {
  // uniform with k segments: the k-1 checkpointed segments keep only their inputs. The first
  // one's input is the batch (in the baseline already); each later input is the previous
  // segment's output, one A each: k-1 of them, the last being the stored segment's input
  // (which its first Linear saves anyway). The stored last segment of s_k blocks keeps s_k A.
  // Plus the 4-byte loss: activation_bytes = (k - 1 + s_k) * A + 4.
  Chain chain = MakeMlp(/*depth=*/10, /*hidden=*/16, /*batch=*/8);  // A = 4*8*16 = 512
  // k = 4 (default, ceil(sqrt(10))): sizes 3,3,2,2, s_k = 2 -> (3 + 2) * 512 + 4 = 2564.
  StepResult r = StepUnder("uniform", chain);
  EXPECT_EQ(r.activation_bytes, 5 * 512 + 4);
  EXPECT_EQ(r.recompute_forwards, 8);
  // k = 2: sizes 5,5 -> (1 + 5) * 512 + 4 = 3076.
  r = StepUnder("uniform:segments=2", chain);
  EXPECT_EQ(r.activation_bytes, 6 * 512 + 4);
  EXPECT_EQ(r.recompute_forwards, 5);
  // k = 10: every block its own segment -> (9 + 1) * 512 + 4 = 5124: as much as store_all,
  // since each checkpoint keeps exactly what the block would have kept.
  r = StepUnder("uniform:segments=10", chain);
  EXPECT_EQ(r.activation_bytes, 10 * 512 + 4);
  EXPECT_EQ(r.recompute_forwards, 9);
  // k = 1: one stored segment, identical to store_all.
  EXPECT_EQ(StepUnder("uniform:segments=1", chain).activation_bytes,
            StepUnder("store_all", chain).activation_bytes);
}

TEST(ActivationBytes, ProfileSumsToStoreAll) {
  Chain chain = MakeMlp(5, 24, 3);  // A = 288
  absl::StatusOr<ModelProfile> profile = ProfileModel(*chain.model, chain.batch, Cpu(), at::kCPU);
  ASSERT_TRUE(profile.ok()) << profile.status();
  ASSERT_EQ(profile->stages.size(), 5u);
  for (int i = 0; i < profile->num_stages(); ++i) {
    const StageProfile& s = profile->Stored(i);
    const StageInfo& info = profile->stages[i];
    // Every part stored, then the rows in chunks: the stage's menu. 4 chunks asked for, 3 rows
    // to chunk: 3 chunks, as they run.
    ASSERT_EQ(profile->measured[i].size(), 2u) << info.name;
    EXPECT_EQ(profile->measured[i][1].policy.Chunks(), 3) << info.name;
    EXPECT_EQ(s.input_bytes, 288) << info.name;
    EXPECT_EQ(s.output_bytes, 288) << info.name;
    // ReLU keeps its output; the next Linear keeps its input (the same tensor); nothing else.
    EXPECT_EQ(s.retained_bytes, 0) << info.name;
    EXPECT_EQ(s.kept_outputs, std::vector<int>{0}) << info.name;
    // Stage 0's input is the batch's, the caller's.
    EXPECT_EQ(s.kept_inputs, i > 0 ? std::vector<int>{0} : std::vector<int>{}) << info.name;
    ASSERT_EQ(s.outputs.size(), 1u) << info.name;
    EXPECT_EQ(s.outputs[0].input, -1) << info.name;  // allocated by the stage
    // Linear's output lives until ReLU's output exists: one extra A transiently.
    EXPECT_EQ(s.forward_transient_bytes, 288) << info.name;
    // Backward creates the weight's and the bias's gradients: (24 x 24 + 24) x 4 bytes.
    ASSERT_EQ(s.param_grads.size(), 2u) << info.name;
    EXPECT_EQ(s.param_grads[0].second + s.param_grads[1].second, (24 * 24 + 24) * 4);
    EXPECT_EQ(s.input_grad_bytes, 288) << info.name;
    EXPECT_EQ(s.rng_state_bytes, 0) << info.name;  // no dropout: no RNG snapshot
    // The planner's view of the same: x = 288, x-bar = the output, kept until backward.
    EXPECT_EQ(s.costs.input_bytes, 288) << info.name;
    EXPECT_EQ(s.costs.kept_bytes, 288) << info.name;
    EXPECT_EQ(s.costs.param_grad_bytes, (24 * 24 + 24) * 4) << info.name;
    EXPECT_GT(s.costs.forward_ms, 0) << info.name;
    EXPECT_GT(s.costs.backward_ms, 0) << info.name;
    // 2 x batch x hidden^2: the block's product.
    EXPECT_EQ(info.forward_flops, 2.0 * 3 * 24 * 24) << info.name;
  }
  EXPECT_EQ(profile->input_bytes, 288);
  EXPECT_EQ(StepUnder("store_all", chain).activation_bytes, 5 * 288 + 4);
}

// A model whose first forward and first backward each make a tensor that it then keeps for
// good, as libraries keep state made on first use in tensor memory (on CUDA, cuBLAS's
// workspace for each thread and stream; backward runs on autograd's device thread).
class FirstUseStateModel final : public ChainModel {
 public:
  explicit FirstUseStateModel(std::shared_ptr<ChainModel> inner) : inner_(std::move(inner)) {}
  std::string spec() const override { return inner_->spec(); }
  std::vector<StageInfo> Stages() const override { return inner_->Stages(); }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& inputs,
                                   const StageParts& parts, const Batch& batch) override {
    if (!forward_state_.defined()) forward_state_ = at::zeros({1024});  // 4 KiB
    std::vector<at::Tensor> out = inner_->RunStage(index, inputs, parts, batch);
    if (out.front().requires_grad()) {
      out.front().register_hook([this](const at::Tensor&) {
        if (!backward_state_.defined()) backward_state_ = at::zeros({2048});  // 8 KiB
      });
    }
    return out;
  }
  at::Tensor Loss(const std::vector<at::Tensor>& outputs, const Batch& batch) override {
    return inner_->Loss(outputs, batch);
  }
  Batch MakeBatch(uint64_t seed) override { return inner_->MakeBatch(seed); }
  std::vector<at::Tensor> Parameters() override { return inner_->Parameters(); }
  void SetTraining(bool training) override { inner_->SetTraining(training); }

 private:
  std::shared_ptr<ChainModel> inner_;
  at::Tensor forward_state_, backward_state_;
};

// The profile of a model that makes state on first use equals the profile of the same model
// without it: the state is made in the profiler's warm-up, before anything is measured, not
// counted as the first stage's activations or backward transient. (The warm-up is CUDA's by
// default; kAlways takes it here, on the CPU.)
TEST(Profile, StateALibraryMakesOnFirstUseIsNotMeasured) {
  Chain chain = MakeMlp(4, 24, 3);
  ProfileOptions options;
  options.timed = false;
  absl::StatusOr<ModelProfile> plain =
      ProfileModel(*chain.model, chain.batch, Cpu(), at::kCPU, options);
  FirstUseStateModel first_use(chain.model);
  options.warm_up = ProfileWarmUp::kAlways;
  absl::StatusOr<ModelProfile> profile =
      ProfileModel(first_use, chain.batch, Cpu(), at::kCPU, options);
  ASSERT_TRUE(plain.ok() && profile.ok());
  ASSERT_EQ(profile->stages.size(), plain->stages.size());
  for (int i = 0; i < plain->num_stages(); ++i) {
    ASSERT_EQ(profile->measured[i].size(), plain->measured[i].size());
    for (size_t k = 0; k < plain->measured[i].size(); ++k) {
      const StageProfile& s = profile->measured[i][k];
      const StageProfile& p = plain->measured[i][k];
      const std::string name = plain->stages[i].name;
      EXPECT_EQ(s.output_bytes, p.output_bytes) << name;
      EXPECT_EQ(s.forward_transient_bytes, p.forward_transient_bytes) << name;
      EXPECT_EQ(s.retained_bytes, p.retained_bytes) << name;
      EXPECT_EQ(s.backward_transient_bytes, p.backward_transient_bytes) << name;
      EXPECT_EQ(s.backward_input_held_transient_bytes, p.backward_input_held_transient_bytes)
          << name;
      EXPECT_EQ(s.backward_input_output_held_transient_bytes,
                p.backward_input_output_held_transient_bytes)
          << name;
      EXPECT_EQ(s.backward_held_transient_bytes, p.backward_held_transient_bytes) << name;
    }
  }
  const Plan plan = *PlanFor("store_all", *plain);
  EXPECT_EQ(PredictMemory(*profile, plan)->peak_bytes, PredictMemory(*plain, plan)->peak_bytes);
}

TEST(Executor, OutOfMemoryUnderACapIsAResultNotACrash) {
  Chain chain = MakeMlp(8, 64, 16);  // A = 4096 bytes
  const int64_t live = Cpu().Stats().live_bytes;
  ASSERT_TRUE(Cpu().SetCap(live + 3 * 4096).ok());  // room for three activations, not eight
  absl::StatusOr<ChainExecutor> exec = ChainExecutor::Create(
      chain.model, *PlanFor("store_all", StructureOnlyProfile(*chain.model)), &Cpu(), at::kCPU);
  ASSERT_TRUE(exec.ok());
  absl::StatusOr<StepResult> r = exec->Step(chain.batch);
  ASSERT_TRUE(Cpu().SetCap(std::nullopt).ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_EQ(Cpu().Stats().live_bytes, live);  // everything the failed step made is freed
  EXPECT_TRUE(exec->Step(chain.batch).ok());  // and the next step, uncapped, works
}

}  // namespace
}  // namespace ckpt
