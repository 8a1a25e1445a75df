#include "core/plan/schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ckpt {
namespace {

// A copy between value `value` and host buffer `host` (kOffload reads the value, kFetch makes it).
Op HostOp(OpCode code, int value, int host) {
  Op op;
  op.code = code;
  (code == OpCode::kOffload ? op.input : op.output) = value;
  op.host = host;
  return op;
}

class Compiler {
 public:
  Compiler(const Plan& plan, const std::vector<StageInfo>& stages) : plan_(plan), stages_(stages) {
    program_.num_stages = static_cast<int>(stages.size());
    holds_.push_back(1);  // value 0, the batch: the caller's, never released
  }

  Program Run() && {
    std::vector<Pending> pending;
    ForwardPass(plan_.segments, 0, /*top=*/true, /*rerun=*/false, pending);
    BackwardPass(pending);
    return std::move(program_);
  }

 private:
  // What the backward pass owes, in forward order: a recorded run to backpropagate, or a
  // segment kept without its graph, to rerun and backpropagate.
  struct Pending {
    int run = -1;                      // a recorded run, or
    const Segment* segment = nullptr;  // a checkpointed or recompute-all segment
    int input = -1;                    // its input value (kept, for a segment)
    int output = -1;                   // its output value (a run's root; -1: the loss)
    int rng = -1;                      // the segment's snapshot, or -1
    int host = -1;                     // the host buffer its input waits in, or -1
  };

  void Emit(Op op) {
    if (op.code == OpCode::kForward && op.run >= 0) runs_.push_back(op);  // runs count up
    program_.ops.push_back(op);
  }
  int NewValue() {
    holds_.push_back(0);
    return program_.num_values++;
  }
  void Hold(int value) { ++holds_[value]; }
  // Ends one hold of `value`; the executor drops it when no hold is left.
  void Drop(int value) {
    if (--holds_[value] == 0) Emit({OpCode::kRelease, 0, 0, value});
  }
  // Drops `value` if nothing holds it (a forward's output no later op reads).
  void ReleaseIfUnheld(int value) {
    if (holds_[value] == 0) Emit({OpCode::kRelease, 0, 0, value});
  }
  bool Stochastic(int begin, int end) const {
    return std::any_of(stages_.begin() + begin, stages_.begin() + end,
                       [](const StageInfo& s) { return s.stochastic; });
  }

  // Runs `segments` in order from `input`; at the top level the last run goes on through the
  // loss. Returns the last value made (-1 when the loss took it).
  int ForwardPass(const std::vector<Segment>& segments, int input, bool top, bool rerun,
                  std::vector<Pending>& pending) {
    const int n = program_.num_stages;
    int value = input;
    for (size_t i = 0; i < segments.size();) {
      const Segment& s = segments[i];
      if (s.mode == SegmentMode::kStored) {
        // Consecutive stored segments are one run: one graph, as autograd would build it.
        size_t j = i + 1;
        while (j < segments.size() && segments[j].mode == SegmentMode::kStored) ++j;
        const int end = segments[j - 1].end;
        const bool loss = top && end == n;
        const int run = program_.num_runs++;
        const int output = loss ? -1 : NewValue();
        Emit({OpCode::kForward, s.begin, end, value, output, run, loss, -1, rerun});
        if (output >= 0) Hold(output);  // the root of the run's backward
        pending.push_back({run, nullptr, value, output, -1});
        ReleaseIfUnheld(value);  // what the run needs of its input, its graph keeps
        value = output;
        i = j;
        continue;
      }
      // Checkpointed, offloaded or recompute-all: without a graph, keeping the input (and the
      // RNG state where a stage draws from it) for the rerun; an offloaded one keeps it on the
      // host, copied out while the segment's first pass reads it.
      int rng = -1;
      if (Stochastic(s.begin, s.end)) {
        rng = program_.num_rng++;
        Emit({OpCode::kSaveRng, 0, 0, -1, -1, -1, false, rng});
      }
      int host = -1;
      if (s.mode == SegmentMode::kOffloaded && holds_[value] == 0) {  // (value 0 is held)
        host = program_.num_host++;
        Emit(HostOp(OpCode::kOffload, value, host));
      }
      const int output = NewValue();
      Emit({OpCode::kForward, s.begin, s.end, value, output, -1, false, -1, rerun});
      if (host >= 0) {
        ReleaseIfUnheld(value);
      } else {
        Hold(value);
      }
      pending.push_back({-1, &s, value, output, rng, host});
      value = output;
      ++i;
    }
    if (top && value >= 0) {  // the last segment was not recorded: the loss is a run of its own
      const int run = program_.num_runs++;
      Emit({OpCode::kForward, n, n, value, -1, run, /*loss=*/true, -1, rerun});
      pending.push_back({run, nullptr, value, -1, -1});
      ReleaseIfUnheld(value);
      value = -1;
    }
    return value;
  }

  void BackwardPass(const std::vector<Pending>& pending) {
    for (auto p = pending.rbegin(); p != pending.rend(); ++p) {
      if (p->segment == nullptr) {
        const Op& forward = runs_[p->run];
        Emit({OpCode::kBackward, forward.begin, forward.end, forward.input, p->output, p->run,
              forward.loss});
        if (p->output >= 0) Drop(p->output);
        continue;
      }
      const Segment& s = *p->segment;
      Pending kept = *p;
      if (p->host >= 0) kept.input = Fetch(p->host);
      if (HasInnerPlan(s.mode)) {
        Rerun(s, kept);
      } else {
        RecomputeAll(s, kept);
      }
      Drop(kept.input);  // the kept input
      if (p->rng >= 0) Emit({OpCode::kDropRng, 0, 0, -1, -1, -1, false, p->rng});
    }
  }

  // Host buffer `host` back on the device as a new value (held until its rerun is done), fetched
  // before the last backward call that follows the copy out, else now. Returns the value.
  int Fetch(int host) {
    const int value = NewValue();
    Hold(value);
    auto at = program_.ops.end();
    for (auto op = program_.ops.end(); op != program_.ops.begin();) {
      --op;
      if (op->code == OpCode::kOffload && op->host == host) break;
      if (op->code == OpCode::kBackward) {
        at = op;
        break;
      }
    }
    program_.ops.insert(at, HostOp(OpCode::kFetch, value, host));
    return value;
  }

  // A checkpointed or offloaded segment in backward: rerun as its inner plan says (every stage
  // stored when it has none), replaying the RNG of its first pass, then backpropagate through that
  // rerun.
  void Rerun(const Segment& s, const Pending& p) {
    const std::vector<Segment> whole = {Segment{s.begin, s.end, SegmentMode::kStored}};
    const std::vector<Segment>& inner = s.inner.empty() ? whole : s.inner;
    if (p.rng >= 0) Emit({OpCode::kReplayRng, 0, 0, -1, -1, -1, false, p.rng});
    std::vector<Pending> pending;
    const int last = ForwardPass(inner, p.input, /*top=*/false, /*rerun=*/true, pending);
    if (p.rng >= 0) Emit({OpCode::kEndReplay});
    // A rerun that ends without a graph (it checkpoints its last stages again) made an output
    // no one reads: those stages are rerun once more, recorded, in its own backward.
    if (last >= 0) ReleaseIfUnheld(last);
    BackwardPass(pending);
  }

  // A recompute-all segment in backward: for each stage from the last, the stages before it
  // without a graph from the kept input, then the stage itself recorded, and its backward.
  void RecomputeAll(const Segment& s, const Pending& p) {
    for (int k = s.end - 1; k >= s.begin; --k) {
      if (p.rng >= 0) Emit({OpCode::kReplayRng, 0, 0, -1, -1, -1, false, p.rng});
      int input = p.input;
      if (k > s.begin) {
        input = NewValue();
        Emit({OpCode::kForward, s.begin, k, p.input, input, -1, false, -1, /*rerun=*/true});
      }
      const int run = program_.num_runs++;
      const int output = NewValue();
      Emit({OpCode::kForward, k, k + 1, input, output, run, false, -1, /*rerun=*/true});
      Hold(output);
      if (p.rng >= 0) Emit({OpCode::kEndReplay});
      if (input != p.input) ReleaseIfUnheld(input);
      Emit({OpCode::kBackward, k, k + 1, input, output, run, false});
      Drop(output);
    }
  }

  const Plan& plan_;
  const std::vector<StageInfo>& stages_;
  Program program_;
  std::vector<int> holds_;  // per value: the holds still on it (value 0's never ends)
  std::vector<Op> runs_;    // per run, the forward that records it
};

}  // namespace

size_t Program::ForwardEnd() const {
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].code == OpCode::kBackward || ops[i].code == OpCode::kFetch) return i;
  }
  return ops.size();
}

int64_t Program::RecomputedStages() const {
  int64_t n = 0;
  for (const Op& op : ops) {
    if (op.code == OpCode::kForward && op.rerun) n += op.end - op.begin;
  }
  return n;
}

std::vector<int64_t> Program::NoGradRuns() const {
  std::vector<int64_t> runs(num_stages, 0);
  for (const Op& op : ops) {
    if (op.code != OpCode::kForward || op.run >= 0) continue;
    for (int j = op.begin; j < op.end; ++j) ++runs[j];
  }
  return runs;
}

std::string Program::ToString() const {
  std::string out;
  auto value = [](int v) { return v < 0 ? std::string("loss") : absl::StrCat("v", v); };
  for (const Op& op : ops) {
    switch (op.code) {
      case OpCode::kForward:
        absl::StrAppend(&out, "forward [", op.begin, ",", op.end, ") ", value(op.input), " -> ",
                        op.loss ? "loss" : value(op.output),
                        op.run >= 0 ? absl::StrCat(", run ", op.run) : ", no graph",
                        op.rerun ? " (rerun)" : "", "\n");
        break;
      case OpCode::kBackward:
        absl::StrAppend(&out, "backward run ", op.run, " [", op.begin, ",", op.end, ")",
                        op.loss ? " from the loss" : "", "\n");
        break;
      case OpCode::kRelease:
        absl::StrAppend(&out, "release ", value(op.input), "\n");
        break;
      case OpCode::kSaveRng:
        absl::StrAppend(&out, "save rng ", op.rng, "\n");
        break;
      case OpCode::kReplayRng:
        absl::StrAppend(&out, "replay rng ", op.rng, "\n");
        break;
      case OpCode::kEndReplay:
        absl::StrAppend(&out, "end replay\n");
        break;
      case OpCode::kDropRng:
        absl::StrAppend(&out, "drop rng ", op.rng, "\n");
        break;
      case OpCode::kOffload:
        absl::StrAppend(&out, "offload ", value(op.input), " -> host ", op.host, "\n");
        break;
      case OpCode::kFetch:
        absl::StrAppend(&out, "fetch host ", op.host, " -> ", value(op.output), "\n");
        break;
    }
  }
  return out;
}

Program Compile(const Plan& plan, const std::vector<StageInfo>& stages) {
  return Compiler(plan, stages).Run();
}

int64_t RecomputedStages(const Plan& plan, int num_stages) {
  return Compile(plan, std::vector<StageInfo>(num_stages)).RecomputedStages();
}

}  // namespace ckpt
