#include "core/memory_model.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/profile.h"

namespace ckpt {
namespace {

// Replays one training step over the profile, tracking live bytes above the baseline.
class StepReplay {
 public:
  StepReplay(const ModelProfile& profile, const Plan& plan, std::vector<std::string>* timeline)
      : profile_(profile), plan_(plan), timeline_(timeline) {}

  absl::StatusOr<MemoryPrediction> Run() {
    const int n = profile_.num_stages();
    for (int j = 0; j < n; ++j) {
      const StageProfile* s = profile_.Find(j, plan_.PolicyOf(j));
      if (s == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the profile of ", profile_.model, " has no measurement of stage ", j, " (",
            profile_.stages[j].name, ") with ",
            DescribePolicy(profile_.stages[j], plan_.PolicyOf(j)), ", which the plan of ",
            plan_.strategy, " uses; extend the profile with the plan's policies first"));
      }
      stages_.push_back(s);
      rng_bytes_ = std::max(rng_bytes_, s->rng_state_bytes);
    }
    // The top level: stage j's outputs are boundary j + 1; boundary 0 is the batch, in the
    // baseline (zero bytes here) and held by the caller throughout.
    Frame top(0, n, /*leaf=*/false, kOuterGraph);
    top.at(0).holders = 1;
    for (const Segment& s : plan_.segments) Forward(top, s);
    const LossProfile& loss = profile_.loss;
    Add(loss.retained_bytes + loss.output_bytes);
    if (loss.keeps_input) Hold(top.at(n));
    Release(top.at(n));  // the executor's hold
    MemoryPrediction p;
    p.activation_bytes = live_;

    // Backward starts from the loss: LibTorch allocates its seed gradient, the loss's backward
    // runs and leaves the gradient of the last stage's output.
    Touch(loss.backward_transient_bytes);
    Add(loss.backward_net_bytes);
    if (loss.keeps_input) Release(top.at(n));
    grad_ = loss.input_grad_bytes;
    for (auto s = plan_.segments.rbegin(); s != plan_.segments.rend(); ++s) Backward(top, *s);
    p.peak_bytes = peak_;
    return p;
  }

 private:
  // A stage's output tensors: alive while anything holds them.
  struct Boundary {
    int64_t bytes = 0;
    int holders = 0;
  };

  // The boundaries of one pass over stages [begin, end): the step's own, or a checkpoint's
  // rerun in backward, whose first boundary is a detached leaf over the saved input (storage
  // the checkpoint keeps anyway: zero bytes here) and whose stages' parameter gradients the
  // checkpoint's own backward pass (`graph`) delivers.
  struct Frame {
    Frame(int begin_, int end_, bool leaf_, int graph_)
        : begin(begin_), end(end_), leaf(leaf_), graph(graph_), boundaries(end_ - begin_ + 1) {}
    Boundary& at(int j) { return boundaries[j - begin]; }
    bool IsLeaf(int j) const { return leaf && j == begin; }
    int begin, end;
    bool leaf;
    int graph;
    std::vector<Boundary> boundaries;
    // RNG snapshots its checkpoints keep: they go with the graph that holds them, which for the
    // step's own pass outlives the backward and for a rerun ends with the rerun's backward.
    int64_t snapshot_bytes = 0;
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
  void Hold(Boundary& b) { ++b.holders; }
  void Release(Boundary& b) {
    if (--b.holders == 0) live_ -= b.bytes;
  }
  bool Stochastic(const Segment& s) const {
    for (int j = s.begin; j < s.end; ++j) {
      if (profile_.stages[j].stochastic) return true;
    }
    return false;
  }
  // A checkpointed segment's rerun plan: its inner segments, or every stage stored.
  static std::vector<Segment> InnerOf(const Segment& s) {
    if (!s.inner.empty()) return s.inner;
    return {Segment{s.begin, s.end, SegmentMode::kStored, {}}};
  }
  bool ChunkedStage(int j) const { return plan_.PolicyOf(j).Chunks() > 1; }

  // Stage j stored, reading `in` and writing `out` (a fresh boundary, held by the executor).
  // `in_is_leaf`: the input is a detached leaf over a checkpoint's saved tensors, whose
  // storage that checkpoint keeps anyway.
  void StoredForward(int j, Boundary& in, Boundary& out, bool in_is_leaf) {
    const StageProfile& s = *stages_[j];
    Note("forward", j);
    Touch(s.retained_bytes + s.output_bytes + s.forward_transient_bytes);
    Add(s.retained_bytes + s.output_bytes);
    out = Boundary{s.output_bytes, 1};
    if (s.keeps_output) Hold(out);
    if (s.keeps_input && !in_is_leaf) Hold(in);
    if (!in_is_leaf) Release(in);  // the executor moves on
  }

  // `held`: the stage's input, output and incoming gradient stay referenced throughout (a
  // checkpoint backpropagating from rerun outputs), so its held transient applies. `graph`:
  // the backward pass (autograd graph) that delivers the stage's parameter gradients.
  void StoredBackward(int j, Boundary& in, Boundary& out, bool in_is_leaf, bool held, int graph) {
    const StageProfile& s = *stages_[j];
    Note("backward", j);
    // A gradient that exists already (a tied embedding's) is accumulated into: the stage's
    // freshly computed one is then a temporary, alive at the stage's peak as the isolated
    // measurement saw it, but not kept afterwards (below).
    Touch(held ? s.backward_held_transient_bytes : s.backward_transient_bytes);
    Add(-s.retained_bytes);
    if (s.keeps_output) Release(out);
    if (s.keeps_input && !in_is_leaf) Release(in);
    // The incoming gradient is freed, unless a checkpoint's backward holds it (below).
    Add(s.input_grad_bytes - (grad_holds_[j + 1] > 0 ? 0 : grad_));
    grad_ = s.input_grad_bytes;
    // A chunked stage computes its gradients inside each chunk's checkpoint, whose own
    // backward pass delivers them.
    if (ChunkedStage(j)) graph = next_graph_++;
    int64_t summed = 0;
    for (const auto& [param, bytes] : s.param_grads) {
      const bool first = grads_.insert(param).second;
      if (first) Add(bytes);
      // Two contributions to one parameter in one backward pass meet in the autograd
      // engine's input buffer, not in .grad: the engine holds the first until the last
      // arrives. It adds in place only into a contiguous tensor that it alone references,
      // and a linear layer's weight gradient (the tied head's contribution) is a transposed
      // product, so the sum is a new tensor: for a moment the waiting gradient, the stage's
      // fresh one and their sum are all alive, after the stage's own temporaries are freed.
      // The sum is contiguous and the engine's alone: a third contribution adds in place.
      // Contributions from different passes (one inside a checkpoint) go to .grad in turn,
      // the later ones added in place.
      if (++contributions_[{param, graph}] == 2) summed += 2 * bytes;
    }
    Touch(summed);
  }

  // Stages [begin, end) without a graph: one boundary alive at a time.
  void NoGradForward(int begin, int end) {
    int64_t previous = 0;
    for (int j = begin; j < end; ++j) {
      const StageProfile& s = *stages_[j];
      Touch(s.output_bytes + s.nograd_transient_bytes);
      Add(s.output_bytes - previous);
      previous = s.output_bytes;
    }
  }

  void Forward(Frame& frame, const Segment& seg) {
    if (seg.mode == SegmentMode::kStored) {
      for (int j = seg.begin; j < seg.end; ++j) {
        StoredForward(j, frame.at(j), frame.at(j + 1), frame.IsLeaf(j));
      }
      return;
    }
    // Checkpointed or recompute-all: without a graph, keeping the input (and an RNG snapshot);
    // an inner plan changes nothing here, since without grad its checkpoints simply run.
    if (Stochastic(seg)) {  // the snapshot the checkpoint keeps
      Add(rng_bytes_);
      frame.snapshot_bytes += rng_bytes_;
    }
    Hold(frame.at(seg.begin));          // the checkpoint saves its inputs
    NoGradForward(seg.begin, seg.end);  // frees each internal boundary as it goes
    frame.at(seg.end) = Boundary{stages_[seg.end - 1]->output_bytes, 1};
    Release(frame.at(seg.begin));  // the executor's hold
  }

  void Backward(Frame& frame, const Segment& seg) {
    switch (seg.mode) {
      case SegmentMode::kStored:
        for (int j = seg.end - 1; j >= seg.begin; --j) {
          // The last stage of a rerun backpropagates from the rerun's outputs, which the
          // checkpoint's backward holds, with the gradient it holds.
          const bool held = frame.leaf && j + 1 == frame.end;
          StoredBackward(j, frame.at(j), frame.at(j + 1), frame.IsLeaf(j), held, frame.graph);
        }
        return;
      case SegmentMode::kCheckpointed: {
        // The checkpoint's backward holds its incoming gradient until it returns.
        const int64_t incoming = grad_;
        ++grad_holds_[seg.end];
        // Rerun the segment under its inner plan on fresh boundaries, the first a leaf over
        // the saved input; the checkpoint's backward runs its own backward pass over it.
        const bool stochastic = Stochastic(seg);
        if (stochastic) Add(rng_bytes_);  // the current state, kept while recomputing
        Frame rerun(seg.begin, seg.end, /*leaf=*/true, next_graph_++);
        rerun.at(seg.begin).holders = 1;  // the saved input, whose bytes the outer pass counts
        const std::vector<Segment> inner = InnerOf(seg);
        for (const Segment& s : inner) Forward(rerun, s);
        if (stochastic) Add(-rng_bytes_);
        for (auto s = inner.rbegin(); s != inner.rend(); ++s) Backward(rerun, *s);
        if (--grad_holds_[seg.end] == 0) Add(-incoming);
        // The rerun's graph goes once its backward returns: its outputs, and the RNG snapshots
        // of the checkpoints inside it.
        Release(rerun.at(seg.end));
        Add(-rerun.snapshot_bytes);
        Release(frame.at(seg.begin));  // the checkpoint's saved input
        return;
      }
      case SegmentMode::kRecomputeAll: {
        const bool stochastic = Stochastic(seg);
        if (stochastic) Add(rng_bytes_);  // the current state, kept for the whole backward
        for (int j = seg.end - 1; j >= seg.begin; --j) {
          NoGradForward(seg.begin, j);  // leaves the input of stage j alive (or the saved one)
          Boundary in{j > seg.begin ? stages_[j - 1]->output_bytes : 0, 1};
          Boundary out;
          StoredForward(j, in, out, true);
          StoredBackward(j, in, out, true, /*held=*/true, next_graph_++);
          Release(out);       // the outputs, held until backward returned
          live_ -= in.bytes;  // the leaves go with the next iteration
        }
        if (stochastic) Add(-rng_bytes_);
        Release(frame.at(seg.begin));
        return;
      }
    }
  }

  const ModelProfile& profile_;
  const Plan& plan_;
  std::vector<std::string>* timeline_;
  std::vector<const StageProfile*> stages_;  // each stage under the plan's policy
  int64_t rng_bytes_ = 0;
  static constexpr int kOuterGraph = 0;  // the step's backward pass, from the loss
  int next_graph_ = kOuterGraph + 1;     // ids for the passes checkpoints run
  std::set<int> grads_;                  // parameters whose gradient exists
  // Gradient contributions so far per (parameter, backward pass).
  std::map<std::pair<int, int>, int> contributions_;
  // Per boundary, the checkpoint backward passes that hold the gradient with respect to it.
  std::map<int, int> grad_holds_;
  int64_t grad_ = 0;  // the gradient flowing backward, w.r.t. the current boundary
  int64_t live_ = 0;
  int64_t peak_ = 0;
};

}  // namespace

absl::StatusOr<MemoryPrediction> PredictMemory(const ModelProfile& profile, const Plan& plan,
                                               std::vector<std::string>* timeline) {
  if (absl::Status s = ValidatePlan(plan, profile.stages); !s.ok()) return s;
  return StepReplay(profile, plan, timeline).Run();
}

}  // namespace ckpt
