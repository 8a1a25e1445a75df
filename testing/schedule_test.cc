// The plan compiler (core/plan/schedule.h): the offload rule's program, exactly, and what the time
// model charges for its copies; on generated plans the invariants its three readers rely on: values
// are read only while live and released once, every host buffer is copied out once and fetched once
// after it, and offloading changes where inputs wait, never what is computed.
#include "core/plan/schedule.h"

#include <set>
#include <string>
#include <vector>

#include "core/plan/plan.h"
#include "core/plan/plan_text.h"
#include "core/plan/profile.h"
#include "core/plan/time_model.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"
#include "testing/model_cases.h"

namespace ckpt {
namespace {

std::vector<StageInfo> Chain(int n, bool stochastic = false) {
  std::vector<StageInfo> stages(n);
  for (int i = 0; i < n; ++i) {
    stages[i].name = "s" + std::to_string(i);
    stages[i].stochastic = stochastic;
  }
  return stages;
}

Program CompileText(const std::string& text, const std::vector<StageInfo>& stages) {
  absl::StatusOr<Plan> plan = ParsePlan(text, stages, "test");
  EXPECT_TRUE(plan.ok()) << plan.status();
  return Compile(*plan, stages);
}

TEST(Schedule, OffloadedSegmentCopiesItsInputOutAndPrefetchesItBeforeTheLastBackward) {
  const Program program =
      CompileText("[0,2) checkpointed, [2,4) offloaded, [4,6) stored", Chain(6));
  EXPECT_EQ(program.num_host, 1);
  EXPECT_EQ(program.ToString(),
            "forward [0,2) v0 -> v1, no graph\n"
            "offload v1 -> host 0\n"
            "forward [2,4) v1 -> v2, no graph\n"
            "release v1\n"
            "forward [4,6) v2 -> loss, run 0\n"
            "release v2\n"
            "fetch host 0 -> v3\n"
            "backward run 0 [4,6) from the loss\n"
            "forward [2,4) v3 -> v4, run 1 (rerun)\n"
            "backward run 1 [2,4)\n"
            "release v4\n"
            "release v3\n"
            "forward [0,2) v0 -> v5, run 2 (rerun)\n"
            "backward run 2 [0,2)\n"
            "release v5\n");
}

TEST(Schedule, AnInputTheDeviceHoldsAnywayIsNotCopied) {
  const std::vector<StageInfo> stages = Chain(6);
  // The batch, and a recorded run's output (its backward's root).
  EXPECT_EQ(CompileText("[0,2) offloaded, [2,6) stored", stages).ToString(),
            CompileText("[0,2) checkpointed, [2,6) stored", stages).ToString());
  EXPECT_EQ(CompileText("[0,2) stored, [2,4) offloaded, [4,6) stored", stages).ToString(),
            CompileText("[0,2) stored, [2,4) checkpointed, [4,6) stored", stages).ToString());
  // A rerun's input, which its checkpoint keeps until the rerun's backward is done.
  EXPECT_EQ(
      CompileText("[0,1) checkpointed, [1,6) offloaded {[1,2) offloaded, [2,6) stored}", stages)
          .num_host,
      1);
}

TEST(Schedule, AFetchNeverPrecedesItsCopyOut) {
  // The inner offloaded segment's input is made, and copied out, during the outer rerun: its
  // fetch must come after that, not before the backward that precedes the outer rerun.
  const Program program = CompileText(
      "[0,1) checkpointed, [1,4) offloaded {[1,2) checkpointed, [2,4) offloaded}", Chain(4));
  std::set<int> copied_out;
  for (const Op& op : program.ops) {
    if (op.code == OpCode::kOffload) copied_out.insert(op.host);
    if (op.code == OpCode::kFetch) {
      ASSERT_TRUE(copied_out.count(op.host)) << program.ToString();
    }
  }
  EXPECT_EQ(program.num_host, 2);
}

// A chain of 6 stages, each 1 ms forward (with or without a graph), 2 ms backward and 1000
// bytes out, whose copies move 100 bytes a ms each way.
ModelProfile TimedChain(bool copies_overlap) {
  ModelProfile profile = StructureOnlyProfile("chain", Chain(6));
  profile.timed = true;
  for (auto& measured : profile.measured) {
    StageProfile& s = measured.front();
    s.output_bytes = s.costs.output_bytes = 1000;
    s.costs.forward_ms = s.costs.nograd_forward_ms = 1;
    s.costs.backward_ms = 2;
  }
  profile.to_host_bytes_per_ms = profile.from_host_bytes_per_ms = 100;
  profile.copies_overlap = copies_overlap;
  return profile;
}

TEST(TimeModel, ChargesOffloadCopiesLessWhatTheComputeBesideThemHides) {
  const std::vector<StageInfo> stages = Chain(6);
  const Plan kept = *ParsePlan("[0,2) checkpointed, [2,4) checkpointed, [4,6) stored", stages, "k");
  const Plan offloaded =
      *ParsePlan("[0,2) checkpointed, [2,4) offloaded, [4,6) stored", stages, "o");
  // Each copy takes 10 ms. A CPU's copies are the step's own work: both charged in full.
  const ModelProfile serial = TimedChain(false);
  EXPECT_DOUBLE_EQ(*PredictStepMs(serial, offloaded) - *PredictStepMs(serial, kept), 20.0);
  // Beside the compute: the copy out hides behind the segment's 2 ms first pass, the fetch
  // behind the 4 ms backward of [4,6) it was placed before.
  const ModelProfile beside = TimedChain(true);
  EXPECT_DOUBLE_EQ(*PredictStepMs(beside, offloaded) - *PredictStepMs(beside, kept), 8.0 + 6.0);
  // A fetch that no backward call follows before its rerun (the inner offloaded segment's,
  // made during the outer rerun) overlaps nothing: 10 ms out hidden by 1 ms, 10 ms back not.
  const Plan nested = *ParsePlan(
      "[0,1) checkpointed, [1,6) checkpointed {[1,2) checkpointed, [2,6) offloaded}", stages, "n");
  const Plan nested_kept =
      *ParsePlan("[0,1) checkpointed, [1,6) checkpointed {[1,2) checkpointed, [2,6) checkpointed}",
                 stages, "n");
  EXPECT_DOUBLE_EQ(*PredictStepMs(beside, nested) - *PredictStepMs(beside, nested_kept),
                   (10.0 - 4.0) + 10.0);
  // Without copy rates, an offloading plan has no time.
  ModelProfile unknown = serial;
  unknown.to_host_bytes_per_ms = 0;
  EXPECT_EQ(PredictStepMs(unknown, offloaded).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(PredictStepMs(unknown, kept).ok());
}

// The computing ops (forwards and backwards), what the arithmetic of a step is.
std::string Computation(const Program& program) {
  std::string out;
  for (const Op& op : program.ops) {
    if (op.code != OpCode::kForward && op.code != OpCode::kBackward) continue;
    out += (op.code == OpCode::kForward ? "F" : "B") + std::to_string(op.begin) + "," +
           std::to_string(op.end) + (op.run >= 0 ? "r" + std::to_string(op.run) : "") +
           (op.loss ? "L" : "") + (op.rerun ? "R" : "") + " ";
  }
  return out;
}

RC_GTEST_PROP(Schedule, GeneratedPlansUseValuesWhileLiveAndHostBuffersOnce, ()) {
  const int n = *rc::gen::inRange(1, 13);
  const std::vector<StageInfo> stages = Chain(n, *rc::gen::arbitrary<bool>());
  const Plan plan = *testing::RandomPlan(stages);
  const Program program = Compile(plan, stages);
  RC_LOG() << PlanToText(plan, stages) << "\n" << program.ToString();

  enum class Life { kUnmade, kLive, kReleased };
  std::vector<Life> values(program.num_values, Life::kUnmade);
  values[0] = Life::kLive;
  std::vector<Life> host(program.num_host, Life::kUnmade);
  auto read = [&](int v) { RC_ASSERT(v >= 0 && values[v] == Life::kLive); };
  auto make = [&](int v) {
    RC_ASSERT(v > 0 && values[v] == Life::kUnmade);
    values[v] = Life::kLive;
  };
  for (const Op& op : program.ops) {
    switch (op.code) {
      case OpCode::kForward:
        read(op.input);
        if (!op.loss) make(op.output);
        break;
      case OpCode::kRelease:
        read(op.input);
        RC_ASSERT(op.input != 0);
        values[op.input] = Life::kReleased;
        break;
      case OpCode::kOffload:
        read(op.input);
        RC_ASSERT(op.input != 0);
        RC_ASSERT(host[op.host] == Life::kUnmade);
        host[op.host] = Life::kLive;
        break;
      case OpCode::kFetch:
        RC_ASSERT(host[op.host] == Life::kLive);
        host[op.host] = Life::kReleased;
        make(op.output);
        break;
      default:
        break;
    }
  }
  for (size_t v = 1; v < values.size(); ++v) RC_ASSERT(values[v] == Life::kReleased);
  for (const Life h : host) RC_ASSERT(h == Life::kReleased);

  Plan kept = plan;
  kept.segments =
      testing::Remoded(plan.segments, SegmentMode::kOffloaded, SegmentMode::kCheckpointed);
  RC_ASSERT(Computation(Compile(kept, stages)) == Computation(program));
}

}  // namespace
}  // namespace ckpt
