// The conformance suite: every registered strategy, on generated small configurations of
// every model, with dropout on, against store_all. A new strategy plugin joins it with no
// test edit (its parameters are generated from its declared ParamDefs).
//
// Gradients: bitwise equal on CPU float32 where the plan recomputes the same arithmetic
// (stored, checkpointed and recomputed segments and parts, dropout masks replayed). A plan that
// reassociates sums (Plan::Reassociates: sequence chunks, fused attention) is compared in a
// float64 twin of the case, to 1e-9 of the largest gradient (at least 1e-9), and its float32
// run to 1e-2: rounding has no useful bound in float32 on a badly conditioned tiny model, while
// a wrong mask or a missing term is off by O(1) in either. On CUDA (CKPT_TEST_DEVICE=cuda)
// every plan gets that tolerance, as not every kernel is deterministic.
//
// Memory: the analytical model's activation bytes equal the meter's. Its peak is never more
// than kBudgetSlackBytes under the measured one (what the budget planners leave below a
// budget), and at most one stage output plus 1 KiB above it: a stage-level profile cannot see
// which frees come before a rerun stage's peak inside one backward, nor place the small scratch
// tensors of an embedding's backward. GPT-2 vocabularies are generated far larger than the
// sequence, so that an error the size of a parameter exceeds that tolerance. On CUDA an
// unmeasured first step of every case (testing::StepUnder) puts cuBLAS's workspaces in the
// baseline.
#include <algorithm>
#include <limits>
#include <set>
#include <string>
#include <utility>

#include "ATen/TensorOperators.h"
#include "ATen/core/grad_mode.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/bytes.h"
#include "core/base/files.h"
#include "core/plan/memory_model.h"
#include "core/plan/plan_text.h"
#include "core/plan/schedule.h"
#include "core/plan/spec.h"
#include "core/plan/strategy.h"
#include "core/run/chain_model.h"
#include "core/run/parts.h"
#include "core/run/torch_compat.h"
#include "core/run/workload.h"
#include "core/train/trainer.h"
#include "experiments/gradient_check.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"
#include "testing/model_cases.h"
#include "testing/torchscript_chains.h"

namespace ckpt {
namespace {

using testing::CheckCases;
using testing::Run;
using testing::StepUnder;

int64_t LargestStageOutput(ChainModel& model, const Batch& batch) {
  at::NoGradGuard no_grad;
  int64_t largest = 0;
  std::vector<at::Tensor> x = batch.inputs;
  const std::vector<StageInfo> stages = model.Stages();
  for (size_t i = 0; i < stages.size(); ++i) {
    x = model.RunStage(static_cast<int>(i), x, StageParts(stages[i]), batch);
    for (const at::Tensor& t : x) largest = std::max<int64_t>(largest, t.nbytes());
  }
  return largest;
}

// A generated case: the model, its mode, whether float inputs take gradients, the seed of
// parameters and batch (seed) and dropout (seed + 2).
struct CaseSpec {
  std::string model_spec;
  bool training = true;
  bool input_grad = true;
  uint64_t seed = 0;
  // Profile and steps under autocast to bfloat16 (the sweep's --amp on a CPU); the float64
  // twin of a reassociating plan is not cast (autocast casts only float32).
  bool amp = false;
};

CaseSpec GenerateCase(const std::string& model_id, bool training_only = false) {
  CaseSpec c;
  c.model_spec = *testing::SmallModelSpec(model_id).as("model");
  c.training =
      training_only || *rc::gen::weightedElement<bool>({{4, true}, {1, false}}).as("training");
  c.input_grad =
      *rc::gen::weightedElement<bool>({{3, true}, {1, false}}).as("float inputs require grad");
  c.seed = *rc::gen::inRange<uint64_t>(0, 1 << 20).as("seed");
  return c;
}

// The case's model, batch and profile on the test device, in the current default dtype.
testing::Case Build(const CaseSpec& c) {
  absl::StatusOr<testing::Case> built =
      testing::BuildCase(c.model_spec, c.seed, c.training, c.input_grad, /*timed=*/false,
                         c.amp ? std::optional<c10::ScalarType>(at::kBFloat16) : std::nullopt);
  RC_ASSERT(built.ok());
  return *std::move(built);
}

// max |g - g_store_all| / max(max |g_store_all|, 1) for `plan` (a plan of the case's model,
// which has the same stages in float64) on the float64 twin of the case.
double RelativeDifferenceInFloat64(const CaseSpec& c, const Plan& plan) {
  const ScopedDefaultDtype float64(caffe2::TypeMeta::Make<double>());
  testing::Case twin = Build(c);
  for (const at::Tensor& x : twin.workload->batch().inputs) {
    RC_ASSERT(!x.is_floating_point() || x.scalar_type() == at::kDouble);
  }
  absl::StatusOr<Run> reference = StepUnder(twin, "store_all", c.seed + 2);
  absl::StatusOr<Run> run = StepUnder(twin, plan, c.seed + 2);
  RC_ASSERT(reference.ok() && run.ok());
  RC_ASSERT(reference->grads.front().scalar_type() == at::kDouble);
  return MaxGradientDifference(run->grads, reference->grads) /
         std::max(LargestMagnitude(reference->grads), 1.0);
}

// `run` against store_all's `reference` on case `c`: gradients, the loss, recompute counts and
// the memory model's bytes.
void CheckAgainstStoreAll(const CaseSpec& c, testing::Case& built, const Run& reference,
                          const Run& run) {
  const bool on_cpu = testing::TestDevice().is_cpu();
  const double scale = LargestMagnitude(reference.grads);
  if (c.amp && run.plan.Reassociates()) {
    // Under bfloat16 autocast (8 significant bits) a chunk's partial weight gradient is rounded
    // by up to 2^-8 of itself, and where partials cancel that has no bound in terms of the
    // result (a tiny ViT's chunked plan moved 10.6% of the largest gradient on the CPU, 23 times
    // what autocast alone moves store_all's; on an H100 every model's chunked plan moved more
    // than CUDA's 1e-4, a one-wide MLP's 8.5e-4): on every device the gradients need only be
    // finite where store_all's are, and the float64 twin is the exact check.
    RC_ASSERT(run.grads.size() == reference.grads.size());
    for (size_t i = 0; i < run.grads.size(); ++i) {
      const at::Tensor& g = run.grads[i];
      const at::Tensor& r = reference.grads[i];
      RC_ASSERT(g.defined() == r.defined());
      if (g.defined() && g.numel() > 0) RC_ASSERT(g.isfinite().equal(r.isfinite()));
    }
    RC_ASSERT(RelativeDifferenceInFloat64(c, run.plan) <= 1e-9);
  } else if (!on_cpu) {
    RC_ASSERT(MaxGradientDifference(run.grads, reference.grads) <= 1e-4 * std::max(scale, 1.0));
    RC_ASSERT(std::abs(run.step.loss - reference.step.loss) <=
              1e-5 * std::max(std::abs(reference.step.loss), 1.0));
  } else if (run.plan.Reassociates()) {
    // A reassociated sum moves by its rounding, up to 2^-24 of each partial sum in float32 (24
    // significant bits): a hundredth of the largest gradient is allowed; the float64 twin is
    // the exact check.
    RC_ASSERT(MaxGradientDifference(run.grads, reference.grads) <= 1e-2 * std::max(scale, 1.0));
    RC_ASSERT(RelativeDifferenceInFloat64(c, run.plan) <= 1e-9);
  } else {
    RC_ASSERT(MaxGradientDifference(run.grads, reference.grads) == 0.0);
    RC_ASSERT(run.step.loss == reference.step.loss);
  }
  // Recompute counts of whole stages follow the plan's formula.
  RC_ASSERT(run.step.recompute_forwards ==
            RecomputedStages(run.plan, static_cast<int>(built.profile.stages.size())));

  const int64_t peak_tolerance =
      LargestStageOutput(*built.workload->model(), built.workload->batch()) + 1024;
  const int64_t measured_peak = run.step.peak_bytes - run.step.baseline_bytes;
  // Printed for a failing case only: what a tolerance question needs.
  RC_LOG() << PlanToText(run.plan, built.profile.stages) << ": activations predicted "
           << run.predicted.activation_bytes << ", measured " << run.step.activation_bytes
           << "; peak above the baseline predicted " << run.predicted.peak_bytes << ", measured "
           << measured_peak << " (tolerance " << peak_tolerance << "); baseline "
           << run.step.baseline_bytes << "\n";
  RC_ASSERT(run.predicted.activation_bytes == run.step.activation_bytes);
  RC_ASSERT(measured_peak - run.predicted.peak_bytes <= kBudgetSlackBytes);
  RC_ASSERT(run.predicted.peak_bytes - measured_peak <= peak_tolerance);
  // The host pool (offloading plans; zeros otherwise), counted by what it allocates.
  RC_ASSERT(run.predicted.offloaded_bytes == run.step.offloaded_bytes);
  RC_ASSERT(run.predicted.host_peak_bytes == run.step.host_peak_bytes);
}

// A generated case of `model_id`, built, with store_all's step on it (the reference) and that
// step's peak above its baseline (what budgets are generated from).
struct ReferencedCase {
  CaseSpec c;
  testing::Case built;
  Run reference;
  int64_t reference_peak = 0;
};
ReferencedCase GenerateReferencedCase(const std::string& model_id, bool training_only = false) {
  ReferencedCase r;
  r.c = GenerateCase(model_id, training_only);
  r.built = Build(r.c);
  absl::StatusOr<Run> reference = StepUnder(r.built, "store_all", r.c.seed + 2);
  RC_ASSERT(reference.ok());
  r.reference = *std::move(reference);
  r.reference_peak = r.reference.step.peak_bytes - r.reference.step.baseline_bytes;
  return r;
}

// Every default strategy's plan for a case (budgets generated from store_all's peak on it;
// strategies whose parameters do not fit the model left out), then a generated plan tree.
std::vector<Plan> DefaultAndRandomPlans(const testing::Case& built, int64_t reference_peak) {
  std::vector<Plan> plans;
  for (const std::string& id : DefaultStrategies()) {
    const std::string spec = testing::BudgetSpec(id, reference_peak).value_or(id);
    absl::StatusOr<Plan> plan = PlanFor(spec, built.profile);
    if (plan.ok()) plans.push_back(*std::move(plan));
  }
  plans.push_back(*testing::RandomPlan(built.profile.stages).as("random plan"));
  return plans;
}

// One generated case of `model_id`: every registered strategy against store_all.
void CheckEveryStrategy(const std::string& model_id) {
  auto [c, built, reference, reference_peak] = GenerateReferencedCase(model_id);
  for (const std::string& id : DefaultStrategies()) {
    // A strategy that plans to a budget gets one generated from this case's peak.
    const std::optional<std::string> budgeted = testing::BudgetSpec(id, reference_peak);
    const std::string spec =
        budgeted.has_value() ? *budgeted : *testing::StrategySpec(id).as("strategy " + id);
    RC_LOG() << "strategy " << spec << "\n";
    absl::StatusOr<Run> run = StepUnder(built, spec, c.seed + 2);
    if (!run.ok()) {
      RC_LOG() << run.status() << "\n";
      // Parameters that do not fit this model (more segments than stages, a budget below
      // every plan's peak): a clear error.
      RC_ASSERT(run.status().code() == absl::StatusCode::kInvalidArgument);
      continue;
    }
    RC_TAG(id);
    CheckAgainstStoreAll(c, built, reference, *run);
    if (budgeted.has_value()) {
      // The budget holds: predicted, and measured exactly on the CPU.
      const int64_t budget = *ParseByteSize(budgeted->substr(budgeted->rfind('=') + 1));
      RC_ASSERT(run->predicted.peak_bytes <= budget);
      if (testing::TestDevice().is_cpu()) {
        RC_ASSERT(run->step.peak_bytes - run->step.baseline_bytes <= budget);
      }
    }
  }
}

// One generated case of `model_id` under a random plan: checkpoints nested in checkpoints,
// recompute-all and offloaded segments at any level, random part policies.
void CheckGeneratedPlan(const std::string& model_id) {
  const CaseSpec c = GenerateCase(model_id);
  testing::Case built = Build(c);
  const Plan plan = *testing::RandomPlan(built.profile.stages).as("plan");
  RC_TAG(absl::StrCat("depth ", plan.Depth()));
  absl::StatusOr<Run> reference = StepUnder(built, "store_all", c.seed + 2);
  absl::StatusOr<Run> run = StepUnder(built, plan, c.seed + 2);
  RC_LOG() << PlanToText(plan, built.profile.stages) << ": "
           << (run.ok() ? absl::OkStatus() : run.status()) << "\n";
  RC_ASSERT(reference.ok());
  RC_ASSERT(run.ok());
  CheckAgainstStoreAll(c, built, *reference, *run);
}

// Every default strategy's plan on one generated case of `model_id`, and a random nested plan,
// written out as text and run back as `plan:file=`: the same plan, the same bytes to the byte
// (on the CPU) and the same gradients to the bit as the plan run directly.
void CheckWrittenPlans(const std::string& model_id) {
  auto [c, built, reference, reference_peak] = GenerateReferencedCase(model_id);
  const std::vector<Plan> plans = DefaultAndRandomPlans(built, reference_peak);
  const std::string path = ::testing::TempDir() + "/written_plan.txt";
  for (const Plan& plan : plans) {
    const std::string text = PlanToText(plan, built.profile.stages);
    RC_LOG() << plan.strategy << ": " << text << "\n";
    RC_ASSERT(WriteFileAtomically(path, text).ok());
    absl::StatusOr<Run> direct = StepUnder(built, plan, c.seed + 2);
    absl::StatusOr<Run> written = StepUnder(built, "plan:file=" + path, c.seed + 2);
    RC_ASSERT(direct.ok());
    RC_ASSERT(written.ok());
    RC_ASSERT(PlanToText(written->plan, built.profile.stages) == text);
    RC_ASSERT(written->step.activation_bytes == direct->step.activation_bytes);
    RC_ASSERT(written->predicted.peak_bytes == direct->predicted.peak_bytes);
    if (testing::TestDevice().is_cpu()) {
      RC_ASSERT(written->step.peak_bytes - written->step.baseline_bytes ==
                direct->step.peak_bytes - direct->step.baseline_bytes);
      RC_ASSERT(MaxGradientDifference(written->grads, direct->grads) == 0.0);
    }
  }
}

// What training leaves besides the weights: the model's state (ChainModel::State: BatchNorm's
// running statistics and batch counters) and the evaluation-mode loss on the case's batch.
struct Trained {
  std::vector<at::Tensor> state;
  double eval_loss = 0;
};

// `steps` AdamW steps (dropout seeded from c.seed + 2 on) of a fresh instance of case `c`
// under `plan`, then its loss in evaluation mode, where BatchNorm reads the running statistics.
Trained TrainFresh(const CaseSpec& c, const Plan& plan, int steps) {
  testing::Case built = Build(c);
  MemoryMeter& meter = **MemoryMeterFor(testing::TestDevice());
  absl::StatusOr<PlannedRun> run = built.workload->Prepare(plan, built.profile, meter);
  RC_ASSERT(run.ok());
  ChainModel& model = *built.workload->model();
  absl::StatusOr<Trainer> trainer = Trainer::Create(&run->executor, model.Parameters(), {});
  RC_ASSERT(trainer.ok());
  for (int k = 0; k < steps; ++k) {
    absl::StatusOr<TrainStep> step = trainer->Step({built.workload->batch()}, {c.seed + 2 + k});
    RC_ASSERT(step.ok());
  }
  model.SetTraining(false);
  Trained t;
  for (const at::Tensor& s : model.State()) t.state.push_back(s.clone());
  at::NoGradGuard no_grad;
  const Batch& batch = built.workload->batch();
  std::vector<at::Tensor> x = batch.inputs;
  const std::vector<StageInfo> stages = model.Stages();
  for (size_t i = 0; i < stages.size(); ++i) {
    x = model.RunStage(static_cast<int>(i), x, StageParts(stages[i]), batch);
  }
  t.eval_loss = model.Loss(x, batch).item<double>();
  return t;
}

// max |a - b| over two models' states, exact for integer counters (inf where shapes differ).
double MaxStateDifference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].sizes().equals(b[i].sizes())) return std::numeric_limits<double>::infinity();
    if (a[i].numel() > 0) {
      m = std::max(m, (a[i].to(at::kDouble) - b[i].to(at::kDouble)).abs().max().item<double>());
    }
  }
  return m;
}

// One generated training case of `model_id`, whose model has state: after k steps under every
// default strategy's plan and a generated plan tree, the state equals store_all's bitwise
// (a rerun stage must not update it again), and so does the evaluation-mode loss. Profiling,
// which runs every stage many times, leaves the state as it found it.
void CheckStateAfterTraining(const std::string& model_id) {
  auto [c, built, reference_step, reference_peak] =
      GenerateReferencedCase(model_id, /*training_only=*/true);
  const int steps = *rc::gen::inRange(1, 4).as("steps");
  {
    WorkloadOptions options;
    options.device = testing::TestDevice();
    options.seed = c.seed;
    absl::StatusOr<Workload> unprofiled = Workload::Build(c.model_spec, options);
    RC_ASSERT(unprofiled.ok());
    const testing::Case profiled = Build(c);  // `built` has run a step since
    RC_ASSERT(MaxStateDifference(profiled.workload->model()->State(),
                                 unprofiled->model()->State()) == 0.0);
  }
  const std::vector<Plan> plans = DefaultAndRandomPlans(built, reference_peak);
  absl::StatusOr<Plan> store_all = PlanFor("store_all", built.profile);
  RC_ASSERT(store_all.ok());
  const Trained reference = TrainFresh(c, *store_all, steps);
  for (const Plan& plan : plans) {
    RC_LOG() << plan.strategy << ": " << PlanToText(plan, built.profile.stages) << "\n";
    const Trained t = TrainFresh(c, plan, steps);
    const double state_difference = MaxStateDifference(t.state, reference.state);
    RC_LOG() << "state " << state_difference << " from store_all's; evaluation loss " << t.eval_loss
             << " against " << reference.eval_loss << "\n";
    if (plan.Reassociates() || !testing::TestDevice().is_cpu()) {
      RC_ASSERT(state_difference <= 1e-4 * std::max(1.0, LargestMagnitude(reference.state)));
      RC_ASSERT(std::abs(t.eval_loss - reference.eval_loss) <=
                1e-4 * std::max(1.0, std::abs(reference.eval_loss)));
    } else {
      RC_ASSERT(state_difference == 0.0);
      RC_ASSERT(t.eval_loss == reference.eval_loss);
    }
  }
}

// Under bfloat16 autocast (--amp): the profile measured as the steps run, every default
// strategy's plan and a random plan tree against store_all's under the same autocast:
// activation bytes exactly as predicted (autocast's casts that a graph saves included), the
// peak within tolerance, gradients bitwise where the arithmetic is the same.
void CheckEveryStrategyUnderAutocast(const std::string& model_id) {
  CaseSpec c = GenerateCase(model_id);
  c.amp = true;
  testing::Case built = Build(c);
  RC_ASSERT(built.profile.autocast == "BFloat16");
  absl::StatusOr<Run> reference = StepUnder(built, "store_all", c.seed + 2);
  RC_ASSERT(reference.ok());
  const int64_t reference_peak = reference->step.peak_bytes - reference->step.baseline_bytes;
  for (const Plan& plan : DefaultAndRandomPlans(built, reference_peak)) {
    RC_LOG() << "plan of " << plan.strategy << "\n";
    absl::StatusOr<Run> run = StepUnder(built, plan, c.seed + 2);
    RC_ASSERT(run.ok());
    CheckAgainstStoreAll(c, built, *reference, *run);
  }
}

// Autocast is on where asked: on fixed small llama, gpt2 and vit, the profile under it names
// the operators that stayed in float32 (a norm's among them), never a matrix product (autocast
// lowers those), and the profile without it names none; store_all's loss differs by rounding.
TEST(Conformance, AutocastReachesTheProfileAndTheStep) {
  for (const std::string id : {"llama", "gpt2", "vit"}) {
    SCOPED_TRACE(id);
    const std::string spec = testing::FixedSmallSpec(id);
    absl::StatusOr<testing::Case> plain = testing::BuildCase(spec, 1);
    absl::StatusOr<testing::Case> amp =
        testing::BuildCase(spec, 1, true, true, false, at::kBFloat16);
    ASSERT_TRUE(plain.ok() && amp.ok()) << plain.status() << amp.status();
    std::set<std::string> plain_ops, amp_ops;
    for (const std::vector<StageProfile>& menu : plain->profile.measured) {
      plain_ops.insert(menu[0].float32_ops.begin(), menu[0].float32_ops.end());
    }
    for (const std::vector<StageProfile>& menu : amp->profile.measured) {
      amp_ops.insert(menu[0].float32_ops.begin(), menu[0].float32_ops.end());
    }
    EXPECT_EQ(plain->profile.autocast, "");
    EXPECT_TRUE(plain_ops.empty());
    EXPECT_TRUE(amp_ops.count("layer_norm") || amp_ops.count("rsqrt"))
        << absl::StrJoin(amp_ops, " ");
    for (const char* product : {"linear", "addmm", "mm", "bmm", "matmul", "baddbmm"}) {
      EXPECT_EQ(amp_ops.count(product), 0) << product;
    }
    absl::StatusOr<testing::Run> plain_run = StepUnder(*plain, "store_all", 3);
    absl::StatusOr<testing::Run> amp_run = StepUnder(*amp, "store_all", 3);
    ASSERT_TRUE(plain_run.ok() && amp_run.ok());
    EXPECT_NE(plain_run->step.loss, amp_run->step.loss);
    EXPECT_EQ(amp_run->predicted.activation_bytes, amp_run->step.activation_bytes);
  }
}

// A tied embedding's two gradients meet in the autograd engine as the profile says they do: a
// GPT-2 whose tied weight's gradient (vocab x hidden, 1 MiB) outweighs its activations, stepped
// in float32 and under bfloat16 autocast. In float32 the head's contribution is a view of a
// transposed product, and the sum is a new tensor on every LibTorch; under autocast it is a
// fresh float32 cast, which LibTorch 2.0 on adds into in place (compat::kEngineSumsInPlace).
// The predicted peak equals the measured one, and reading every gradient the other way would
// miss it by the tied gradient's bytes, in both settings.
TEST(Conformance, TiedGradientsSumAsTheEngineSumsThem) {
  const std::string spec =
      "gpt2:depth=1:hidden=64:heads=1:seq=2:batch=1:vocab=4096:context=2:dropout=0";
  for (const bool amp : {false, true}) {
    SCOPED_TRACE(amp ? "bfloat16 autocast" : "float32");
    absl::StatusOr<testing::Case> c =
        testing::BuildCase(spec, 1, true, true, false,
                           amp ? std::optional<c10::ScalarType>(at::kBFloat16) : std::nullopt);
    ASSERT_TRUE(c.ok()) << c.status();
    // The tied weight: the parameter the first and the last stage both give a gradient.
    const int last = c->profile.num_stages() - 1;
    const StageProfile& head = c->profile.Stored(last);
    int64_t tied_bytes = 0;
    bool sums_in_place = false;
    for (size_t k = 0; k < head.param_grads.size(); ++k) {
      for (const auto& [param, bytes] : c->profile.Stored(0).param_grads) {
        if (param != head.param_grads[k].first) continue;
        tied_bytes = bytes;
        sums_in_place = head.SumsInPlace(k);
      }
    }
    ASSERT_EQ(tied_bytes, 4096 * 64 * 4);
    EXPECT_EQ(sums_in_place, amp && compat::kEngineSumsInPlace);

    absl::StatusOr<testing::Run> run = StepUnder(*c, "store_all", 2);
    ASSERT_TRUE(run.ok()) << run.status();
    const int64_t measured = run->step.peak_bytes - run->step.baseline_bytes;
    const int64_t tolerance =
        LargestStageOutput(*c->workload->model(), c->workload->batch()) + 1024;
    EXPECT_LE(measured - run->predicted.peak_bytes, kBudgetSlackBytes)
        << "predicted " << run->predicted.peak_bytes << ", measured " << measured;
    EXPECT_LE(run->predicted.peak_bytes - measured, tolerance)
        << "predicted " << run->predicted.peak_bytes << ", measured " << measured;
    // The other way round: every contribution read as the opposite of what it is.
    ModelProfile flipped = c->profile;
    for (std::vector<StageProfile>& menu : flipped.measured) {
      for (StageProfile& p : menu) {
        p.param_grad_sums_in_place.resize(p.param_grads.size());
        p.param_grad_sums_in_place.flip();
      }
    }
    absl::StatusOr<MemoryPrediction> other = PredictMemory(flipped, run->plan);
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_GE(std::abs(other->peak_bytes - measured), tied_bytes - tolerance)
        << "predicted the other way " << other->peak_bytes << ", measured " << measured;
  }
}

// The loss's forward peak is in the step's: under bfloat16 autocast a cross-entropy casts the
// head's bfloat16 logits to float32 for its log-softmax and frees the copy before it returns.
// With the stage before the head checkpointed, the step peaks there (its output, which the
// head's graph does not keep, is alive until the loss is computed). Predicted as measured, and
// 72 bytes short without the loss's forward transient.
TEST(Conformance, TheLossForwardPeakUnderAutocast) {
  testing::ChainDescription chain;
  chain.tokens = true;
  chain.input = 3;
  chain.vocab = 6;
  chain.stages = {{testing::StageKind::kEmbedding, 1},
                  {testing::StageKind::kLinear, 1},
                  {testing::StageKind::kLinear, 5},
                  {testing::StageKind::kHead, 0}};
  absl::StatusOr<ScratchFolder> folder = ScratchFolder::Make(::testing::TempDir(), "loss_peak_");
  ASSERT_TRUE(folder.ok()) << folder.status();
  const std::string path = folder->Path("chain.pt");
  ASSERT_TRUE(testing::WriteChain(chain, 0, path).ok());
  absl::StatusOr<testing::Case> c =
      testing::BuildCase(absl::StrCat("torchscript:file=", path, ":tokens=3:vocab=6:batch=3"), 1,
                         true, true, false, at::kBFloat16);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GT(c->profile.loss.forward_transient_bytes, 0);
  absl::StatusOr<Plan> plan =
      ParsePlan("[0,2) stored, [2,3) checkpointed, [3,4) stored", c->profile.stages, "text");
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<testing::Run> run = StepUnder(*c, *plan, 3);
  ASSERT_TRUE(run.ok()) << run.status();
  const int64_t measured = run->step.peak_bytes - run->step.baseline_bytes;
  EXPECT_EQ(run->predicted.peak_bytes, measured);
  ModelProfile without = c->profile;
  without.loss.forward_transient_bytes = 0;
  absl::StatusOr<MemoryPrediction> short_of = PredictMemory(without, *plan);
  ASSERT_TRUE(short_of.ok()) << short_of.status();
  EXPECT_EQ(measured - short_of->peak_bytes, 72);
}

// 30 cases a model, fewer than the float32 properties' 100: each case runs every strategy.
TEST(Conformance, EveryStrategyUnderAutocastOnEveryModel) {
  for (const std::string& id : Models().Ids()) {
    EXPECT_TRUE(CheckCases("every strategy under bfloat16 autocast against store_all on " + id, 30,
                           [id] { CheckEveryStrategyUnderAutocast(id); }))
        << id;
  }
}

// Every registered model: a new model joins with no edit here.
TEST(Conformance, EveryStrategyOnEveryModel) {
  for (const std::string& id : Models().Ids()) {
    EXPECT_TRUE(rc::check("every strategy against store_all on " + id, [id] {
      CheckEveryStrategy(id);
    })) << id;
  }
}

// 30 cases a model: each runs every default plan and random ones twice, and the text's round
// trip on plans of any shape is plan_text_test's; here a written plan must run as its plan.
TEST(Conformance, WrittenPlansRunAsTheirPlansOnEveryModel) {
  for (const std::string& id : Models().Ids()) {
    EXPECT_TRUE(CheckCases("written plans run as plan:file= on " + id, 30, [id] {
      CheckWrittenPlans(id);
    })) << id;
  }
}

TEST(Conformance, GeneratedNestedPlansOnEveryModel) {
  for (const std::string& id : Models().Ids()) {
    EXPECT_TRUE(rc::check("generated plans against store_all on " + id, [id] {
      CheckGeneratedPlan(id);
    })) << id;
  }
}

// Every registered model whose training updates module state (BatchNorm's statistics).
TEST(Conformance, StateAfterTrainingEqualsStoreAllsOnEveryModelWithState) {
  int with_state = 0;
  for (const std::string& id : Models().Ids()) {
    absl::StatusOr<std::vector<StageInfo>> stages = ModelStages(testing::FixedSmallSpec(id));
    ASSERT_TRUE(stages.ok()) << stages.status();
    if (std::none_of(stages->begin(), stages->end(),
                     [](const StageInfo& s) { return s.updates_state; })) {
      continue;
    }
    ++with_state;
    EXPECT_TRUE(rc::check("module state after training against store_all's on " + id, [id] {
      CheckStateAfterTraining(id);
    })) << id;
  }
  EXPECT_GT(with_state, 0) << "no registered model updates state: the property is untested";
}

}  // namespace
}  // namespace ckpt
