#include "core/plan/memory_model.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/base/status_macros.h"
#include "core/plan/profile.h"
#include "core/plan/schedule.h"
#include "core/plan/time_model.h"

namespace ckpt {
namespace {

// Replays one training step over the profile, op by op through the plan's program, tracking
// live bytes above the baseline.
class StepReplay {
 public:
  StepReplay(const ModelProfile& profile, const Plan& plan, std::vector<std::string>* timeline,
             int64_t limit = std::numeric_limits<int64_t>::max())
      : profile_(profile), plan_(plan), timeline_(timeline), limit_(limit) {}

  // Whether the last Run stopped because the peak passed the limit.
  bool passed_limit() const { return peak_ > limit_; }

  absl::StatusOr<MemoryPrediction> Run() {
    ASSIGN_OR_RETURN(stages_, profile_.MeasuredUnder(plan_));
    for (const StageProfile* s : stages_) {
      outputs_.push_back(s->OutputStorages());
      rng_bytes_ = std::max(rng_bytes_, s->rng_state_bytes);
    }
    const Program program = Compile(plan_, profile_.stages);
    values_.assign(program.num_values, Boundary{});
    // The batch: the caller's throughout, in the baseline.
    std::vector<int64_t> batch = profile_.input_storage_bytes;
    if (batch.empty()) batch.push_back(profile_.input_bytes);
    for (const int64_t bytes : batch) {
      values_[0].push_back(static_cast<int>(storages_.size()));
      storages_.push_back(Storage{bytes, 1, /*baseline=*/true});
    }
    runs_.assign(program.num_runs, RunFrame{});
    host_bytes_.assign(program.num_host, {});
    MemoryPrediction p;
    const size_t forward_end = program.ForwardEnd();
    for (size_t i = 0; i < program.ops.size(); ++i) {
      if (i == forward_end) p.activation_bytes = live_;
      const Op& op = program.ops[i];
      switch (op.code) {
        case OpCode::kForward:
          if (op.run >= 0) {
            RecordedForward(op);
          } else {
            values_[op.output] = NoGradForward(op.begin, op.end, values_[op.input]);
          }
          break;
        case OpCode::kBackward:
          Backward(op);
          break;
        case OpCode::kRelease:
          Release(values_[op.input]);
          break;
        case OpCode::kSaveRng:    // a snapshot kept for the rerun
        case OpCode::kReplayRng:  // the current state, set aside while the rerun replays
          Add(rng_bytes_);
          break;
        case OpCode::kEndReplay:
        case OpCode::kDropRng:
          Add(-rng_bytes_);
          break;
        case OpCode::kOffload:  // a copy of each storage (the batch's too: core/run/host_pool.h)
          for (const int k : values_[op.input]) {
            host_bytes_[op.host].push_back(storages_[k].bytes);
            host_live_ += storages_[k].bytes;
            p.offloaded_bytes += storages_[k].bytes;
          }
          host_peak_ = std::max(host_peak_, host_live_);
          break;
        case OpCode::kFetch:  // the device copy is made before the host's is freed
          for (const int64_t bytes : host_bytes_[op.host]) {
            values_[op.output].push_back(NewStorage(bytes));
            host_live_ -= bytes;
          }
          Hold(values_[op.output]);  // the executor's table's, until the value's release
          break;
      }
      if (peak_ > limit_) break;  // ruled out: the rest cannot lower a peak
    }
    p.peak_bytes = peak_;
    p.host_peak_bytes = host_peak_;
    return p;
  }

 private:
  // A storage: its bytes are alive while anything refers to it (a boundary's tensors, a graph).
  // The batch's are the caller's, in the baseline, and never counted.
  struct Storage {
    int64_t bytes = 0;
    int refs = 0;
    bool baseline = false;
  };
  // The tensors at a boundary, as the storages they name (one reference each, held by whoever
  // holds the tensors: the executor, a loop; a graph refers to the storages it keeps itself).
  using Boundary = std::vector<int>;
  // A recorded run: its boundaries inside [begin, end] (the first and the last are values the
  // executor holds, but for a run that ends in the loss), and the backward pass it gets.
  struct RunFrame {
    int begin = 0, end = 0;
    int input = -1, output = -1;
    std::vector<Boundary> inside;  // boundaries begin+1 .. end (end's when it ends in the loss)
  };

  void Add(int64_t bytes) {
    live_ += bytes;
    peak_ = std::max(peak_, live_);
  }
  // A transient `bytes` above the current state.
  void Touch(int64_t bytes) { peak_ = std::max(peak_, live_ + bytes); }
  void Note(absl::string_view event, int j) {
    if (timeline_ != nullptr) {
      timeline_->push_back(
          absl::StrCat(event, " ", profile_.stages[j].name, ": live ", live_, ", peak ", peak_));
    }
  }
  // A storage allocated now, with no reference yet.
  int NewStorage(int64_t bytes) {
    storages_.push_back(Storage{bytes, 0, false});
    Add(bytes);
    return static_cast<int>(storages_.size()) - 1;
  }
  void Ref(int k) { ++storages_[k].refs; }
  void Unref(int k) {
    Storage& s = storages_[k];
    if (--s.refs == 0 && !s.baseline) live_ -= s.bytes;
  }
  void Hold(const Boundary& b) {
    for (const int k : b) Ref(k);
  }
  void Release(const Boundary& b) {
    for (const int k : b) Unref(k);
  }
  // Refers to the storages at `indices` of `b` (a graph keeping them), or drops those references.
  void RefSome(const Boundary& b, const std::vector<int>& indices, bool ref) {
    for (const int i : indices) {
      if (i < 0 || i >= static_cast<int>(b.size())) continue;
      ref ? Ref(b[i]) : Unref(b[i]);
    }
  }
  // Stage j's output tensors, made from `in`: its own storages allocated now, its input's named
  // again; held once (by whoever made them).
  Boundary Output(int j, const Boundary& in) {
    Boundary out;
    for (const BoundaryStorage& s : outputs_[j]) {
      const bool input = s.input >= 0 && s.input < static_cast<int>(in.size());
      out.push_back(input ? in[s.input] : NewStorage(s.bytes));
    }
    Hold(out);
    return out;
  }
  bool ChunkedStage(int j) const { return plan_.PolicyOf(j).Chunks() > 1; }
  // Boundary j of run `r`: the executor's values at its ends, its own inside.
  Boundary& At(RunFrame& r, int j) {
    if (j == r.begin) return values_[r.input];
    if (j == r.end && r.output >= 0) return values_[r.output];
    return r.inside[j - r.begin - 1];
  }

  // Stage j with its graph, reading `in` and writing `out` (held by the executor's loop or
  // table). `in_held`: the executor's table holds `in` (a value), so moving on does not drop it.
  void StoredForward(int j, Boundary& in, Boundary& out, bool in_held) {
    const StageProfile& s = *stages_[j];
    Note("forward", j);
    Touch(s.retained_bytes + s.AllocatedOutputBytes() + s.forward_transient_bytes);
    Add(s.retained_bytes);
    out = Output(j, in);
    RefSome(out, s.kept_outputs, true);
    RefSome(in, s.kept_inputs, true);
    if (!in_held) Release(in);  // the loop moves on
  }

  // Whether something besides a stage's own graph refers to a storage of boundary `b` that the
  // graph keeps (`kept`: its indices), so that the stage's backward cannot free it. Of its
  // input: the previous stage's graph keeping its output (a tanh's). Of its output: the
  // executor's table, where a later stage passed it on unchanged into a value. The batch is the
  // caller's either way.
  bool KeptHeldElsewhere(const std::vector<int>& kept, const Boundary& b) const {
    auto storage = [&](int i) { return i >= 0 && i < static_cast<int>(b.size()) ? b[i] : -1; };
    for (const int i : kept) {
      const int k = storage(i);
      if (k < 0 || storages_[k].baseline) continue;
      // RefSome referred to it once per index naming it.
      const auto own =
          std::count_if(kept.begin(), kept.end(), [&](int other) { return storage(other) == k; });
      if (storages_[k].refs > own) return true;
    }
    return false;
  }

  // `held`: the stage's input, output and incoming gradient stay referenced throughout (the
  // last stage of a run the executor backpropagates from its outputs), so its held transient
  // applies; `input_held`: its input does (the first stage of a run from a value the executor
  // holds; also wherever KeptHeldElsewhere). Its output is held where KeptHeldElsewhere says,
  // and then its input is taken as held too (an upper bound where it is not). `graph`: the
  // backward pass (autograd call) that delivers its parameter gradients.
  void StoredBackward(int j, Boundary& in, Boundary& out, bool held, bool input_held, int graph) {
    const StageProfile& s = *stages_[j];
    Note("backward", j);
    input_held = input_held || KeptHeldElsewhere(s.kept_inputs, in);
    const bool output_held = KeptHeldElsewhere(s.kept_outputs, out);
    // A gradient that exists already (a tied embedding's) is accumulated into: the stage's
    // freshly computed one is then a temporary, alive at the stage's peak as the isolated
    // measurement saw it, but not kept afterwards (below).
    Touch(held          ? s.backward_held_transient_bytes
          : output_held ? s.backward_input_output_held_transient_bytes
          : input_held  ? s.backward_input_held_transient_bytes
                        : s.backward_transient_bytes);
    Add(-s.retained_bytes);
    RefSome(out, s.kept_outputs, false);
    RefSome(in, s.kept_inputs, false);
    // The incoming gradient is freed, unless the executor holds it (below).
    Add(s.input_grad_bytes - (held ? 0 : grad_));
    grad_ = s.input_grad_bytes;
    // A chunked stage computes its gradients inside each chunk's checkpoint, whose own
    // backward pass delivers them.
    if (ChunkedStage(j)) graph = next_graph_++;
    int64_t summed = 0;
    for (size_t k = 0; k < s.param_grads.size(); ++k) {
      const auto& [param, bytes] = s.param_grads[k];
      const bool first = grads_.insert(param).second;
      if (first) {
        // Sharded: the whole gradient is part of the stage's measured backward peak, and its
        // shard is what stays.
        auto kept = profile_.kept_gradient_bytes.find(param);
        Add(kept != profile_.kept_gradient_bytes.end() ? kept->second : bytes);
      }
      // Two contributions to one parameter in one backward pass meet in the autograd
      // engine's input buffer, not in .grad: the engine holds the first until the last
      // arrives. Where the first is a tensor the engine adds into in place (its stage's
      // profile says, StageProfile::param_grad_sums_in_place), the stage's fresh one is alive
      // beside it for a moment. Otherwise (a linear layer's weight gradient, the tied head's
      // contribution in float32, is a view of a transposed product; LibTorch 1.13 never adds
      // in place) the sum is a new tensor: the waiting gradient, the fresh one and their sum
      // are all alive, after the stage's own temporaries are freed. A third contribution is
      // added into that sum, a fresh tensor, in place (on 1.13 it makes one more new tensor,
      // which is not modelled: no zoo model uses a parameter in three stages). Contributions
      // from different passes (other runs) go to .grad in turn, the later ones added in place.
      Contributions& c = contributions_[{param, graph}];
      if (++c.count == 1) c.sum_bytes = s.SumBytes(k);
      if (c.count == 2) summed += c.sum_bytes;
    }
    Touch(summed);
  }

  // Stages [begin, end) without a graph from `in` (a value the executor holds): one boundary
  // held at a time, the last returned.
  Boundary NoGradForward(int begin, int end, const Boundary& in) {
    Boundary x = in;
    for (int j = begin; j < end; ++j) {
      const StageProfile& s = *stages_[j];
      Touch(s.AllocatedOutputBytes() + s.nograd_transient_bytes);
      Boundary y = Output(j, x);
      if (j > begin) Release(x);
      x = std::move(y);
    }
    return x;
  }

  void RecordedForward(const Op& op) {
    RunFrame& r = runs_[op.run];
    r = RunFrame{op.begin, op.end, op.input, op.output, std::vector<Boundary>(op.end - op.begin)};
    for (int j = op.begin; j < op.end; ++j) {
      StoredForward(j, At(r, j), At(r, j + 1), /*in_held=*/j == op.begin);
    }
    if (!op.loss) return;
    const LossProfile& loss = profile_.loss;
    Boundary& last = At(r, op.end);
    Touch(loss.retained_bytes + loss.output_bytes + loss.forward_transient_bytes);
    Add(loss.retained_bytes + loss.output_bytes);
    RefSome(last, loss.kept_inputs, true);
    if (op.begin < op.end) Release(last);  // the loop's; a value (a loss alone) is the table's
  }

  void Backward(const Op& op) {
    RunFrame& r = runs_[op.run];
    const int graph = next_graph_++;
    const int64_t incoming = grad_;
    if (op.loss) {
      // LibTorch allocates the seed gradient, the loss's backward runs and leaves the gradient
      // of the last stage's output.
      const LossProfile& loss = profile_.loss;
      Touch(loss.backward_transient_bytes);
      Add(loss.backward_net_bytes);
      RefSome(At(r, op.end), loss.kept_inputs, false);
      grad_ = loss.input_grad_bytes;
    }
    for (int j = op.end - 1; j >= op.begin; --j) {
      StoredBackward(j, At(r, j), At(r, j + 1), /*held=*/!op.loss && j == op.end - 1,
                     /*input_held=*/j == op.begin && op.input != 0, graph);
    }
    if (!op.loss) Add(-incoming);  // the gradient the executor held, dropped once the call returns
  }

  const ModelProfile& profile_;
  const Plan& plan_;
  std::vector<std::string>* timeline_;
  std::vector<const StageProfile*> stages_;            // each stage under the plan's policy
  std::vector<std::vector<BoundaryStorage>> outputs_;  // its output storages
  int64_t rng_bytes_ = 0;
  std::vector<Storage> storages_;  // by id: every storage the replay has made
  std::vector<Boundary> values_;   // by value id
  std::vector<RunFrame> runs_;     // by run id
  int next_graph_ = 0;             // ids of backward calls, and of chunks' own passes
  std::set<int> grads_;            // parameters whose gradient exists
  // Gradient contributions so far per (parameter, backward pass), and what summing the second
  // into the first costs.
  struct Contributions {
    int count = 0;
    int64_t sum_bytes = 0;  // the first's StageProfile::SumBytes
  };
  std::map<std::pair<int, int>, Contributions> contributions_;
  int64_t grad_ = 0;  // the gradient flowing backward, w.r.t. the current boundary
  int64_t live_ = 0;
  int64_t peak_ = 0;
  int64_t limit_;
  std::vector<std::vector<int64_t>> host_bytes_;  // by host buffer, a copy per storage
  int64_t host_live_ = 0;
  int64_t host_peak_ = 0;
};

}  // namespace

absl::StatusOr<MemoryPrediction> PredictMemory(const ModelProfile& profile, const Plan& plan,
                                               std::vector<std::string>* timeline) {
  return StepReplay(profile, plan, timeline).Run();
}

absl::StatusOr<std::optional<MemoryPrediction>> PredictMemoryWithin(const ModelProfile& profile,
                                                                    const Plan& plan,
                                                                    int64_t limit) {
  StepReplay replay(profile, plan, nullptr, limit);
  ASSIGN_OR_RETURN(MemoryPrediction predicted, replay.Run());
  if (replay.passed_limit()) return std::optional<MemoryPrediction>();
  return std::optional<MemoryPrediction>(predicted);
}

absl::StatusOr<std::optional<BudgetChoice>> FastestWithinBudget(const ModelProfile& profile,
                                                                std::vector<Plan> candidates,
                                                                int64_t budget, int64_t* least) {
  std::vector<double> ms(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (profile.timed) {
      ASSIGN_OR_RETURN(ms[i], PredictStepMs(profile, candidates[i]));
    } else {
      ms[i] = static_cast<double>(RecomputedStages(candidates[i], profile.num_stages()));
    }
  }
  std::vector<size_t> order(candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ms[a] < ms[b]; });
  for (const size_t i : order) {
    ASSIGN_OR_RETURN(std::optional<MemoryPrediction> predicted,
                     PredictMemoryWithin(profile, candidates[i], budget - kBudgetSlackBytes));
    if (predicted.has_value()) {
      return std::optional<BudgetChoice>(BudgetChoice{std::move(candidates[i]), *predicted, ms[i]});
    }
  }
  if (least != nullptr) {  // none fits: how far off, from every candidate's whole replay
    *least = std::numeric_limits<int64_t>::max();
    for (const Plan& plan : candidates) {
      ASSIGN_OR_RETURN(MemoryPrediction predicted, PredictMemory(profile, plan));
      *least = std::min(*least, predicted.peak_bytes + kBudgetSlackBytes);
    }
  }
  return std::optional<BudgetChoice>();
}

}  // namespace ckpt
