#include "core/memory_model.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ckpt {
namespace {

// Replays one training step over the profile, tracking live bytes above the baseline.
class StepReplay {
 public:
  StepReplay(const ModelProfile& profile, const Plan& plan, std::vector<std::string>* timeline)
      : profile_(profile), plan_(plan), stages_(profile.stages), timeline_(timeline) {
    for (const StageProfile& s : stages_) rng_bytes_ = std::max(rng_bytes_, s.rng_state_bytes);
  }

  MemoryPrediction Run() {
    // Stage j's outputs are boundary_[j + 1]; boundary_[0] is the batch, in the baseline
    // (zero bytes here) and held by the caller throughout.
    boundary_.assign(stages_.size() + 1, Boundary{});
    boundary_[0].holders = 1;
    for (const Segment& s : plan_.segments) Forward(s);
    const LossProfile& loss = profile_.loss;
    const int last = static_cast<int>(stages_.size());
    Add(loss.retained_bytes + loss.output_bytes);
    if (loss.keeps_input) Hold(boundary_[last]);
    Release(boundary_[last]);  // the executor's hold
    MemoryPrediction p;
    p.activation_bytes = live_;

    // Backward starts from the loss: LibTorch allocates its seed gradient, the loss's backward
    // runs and leaves the gradient of the last stage's output.
    Touch(loss.backward_transient_bytes);
    Add(loss.backward_net_bytes);
    if (loss.keeps_input) Release(boundary_[last]);
    grad_ = loss.input_grad_bytes;
    for (auto s = plan_.segments.rbegin(); s != plan_.segments.rend(); ++s) Backward(*s);
    p.peak_bytes = peak_;
    return p;
  }

 private:
  // A stage's output tensors: alive while anything holds them.
  struct Boundary {
    int64_t bytes = 0;
    int holders = 0;
  };

  void Add(int64_t bytes) {
    live_ += bytes;
    peak_ = std::max(peak_, live_);
  }
  // A transient `bytes` above the current state.
  void Touch(int64_t bytes) { peak_ = std::max(peak_, live_ + bytes); }
  void Note(absl::string_view event, const StageProfile& s) {
    if (timeline_ != nullptr) {
      timeline_->push_back(absl::StrCat(event, " ", s.info.name, ": live ", live_, ", peak ", peak_));
    }
  }
  void Hold(Boundary& b) { ++b.holders; }
  void Release(Boundary& b) {
    if (--b.holders == 0) live_ -= b.bytes;
  }
  bool Stochastic(const Segment& s) const {
    for (int j = s.begin; j < s.end; ++j) {
      if (stages_[j].info.stochastic) return true;
    }
    return false;
  }

  // Stage j stored, reading `in` and writing `out` (a fresh boundary, held by the executor).
  // `in_is_leaf`: the input is a detached leaf over a checkpoint's saved tensors, whose
  // storage that checkpoint keeps anyway.
  void StoredForward(int j, Boundary& in, Boundary& out, bool in_is_leaf) {
    const StageProfile& s = stages_[j];
    Note("forward", s);
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
  void StoredBackward(int j, Boundary& in, Boundary& out, bool in_is_leaf, bool held,
                      int graph) {
    const StageProfile& s = stages_[j];
    Note("backward", s);
    // A gradient that exists already (a tied embedding's) is accumulated into: the stage's
    // freshly computed one is then a temporary, alive at the stage's peak as the isolated
    // measurement saw it, but not kept afterwards (below).
    Touch(held ? s.backward_held_transient_bytes : s.backward_transient_bytes);
    Add(-s.retained_bytes);
    if (s.keeps_output) Release(out);
    if (s.keeps_input && !in_is_leaf) Release(in);
    Add(s.input_grad_bytes - grad_);
    grad_ = s.input_grad_bytes;
    // A sequence-chunked stage computes its gradients inside each chunk's checkpoint, whose
    // own backward pass delivers them.
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
      const StageProfile& s = stages_[j];
      Touch(s.output_bytes + s.nograd_transient_bytes);
      Add(s.output_bytes - previous);
      previous = s.output_bytes;
    }
  }

  void Forward(const Segment& seg) {
    if (seg.mode == SegmentMode::kStored) {
      for (int j = seg.begin; j < seg.end; ++j) {
        StoredForward(j, boundary_[j], boundary_[j + 1], false);
      }
      return;
    }
    if (Stochastic(seg)) Add(rng_bytes_);  // the snapshot the checkpoint keeps
    Hold(boundary_[seg.begin]);            // the checkpoint saves its inputs
    NoGradForward(seg.begin, seg.end);  // frees each internal boundary as it goes
    boundary_[seg.end] = Boundary{stages_[seg.end - 1].output_bytes, 1};
    Release(boundary_[seg.begin]);  // the executor's hold
  }

  bool ChunkedStage(int j) const {
    return !plan_.stage_options.empty() && plan_.stage_options[j].sequence_chunks > 1;
  }

  void Backward(const Segment& seg) {
    switch (seg.mode) {
      case SegmentMode::kStored:
        for (int j = seg.end - 1; j >= seg.begin; --j) {
          StoredBackward(j, boundary_[j], boundary_[j + 1], false, false, kOuterGraph);
        }
        return;
      case SegmentMode::kCheckpointed: {
        // Rerun the segment stored on fresh boundaries, the first a leaf over the saved input.
        const bool stochastic = Stochastic(seg);
        if (stochastic) Add(rng_bytes_);  // the current state, kept while recomputing
        std::vector<Boundary> rerun(seg.size() + 1);
        for (int j = seg.begin; j < seg.end; ++j) {
          const int k = j - seg.begin;
          StoredForward(j, rerun[k], rerun[k + 1], k == 0);
        }
        if (stochastic) Add(-rng_bytes_);
        // The last stage backpropagates from the rerun outputs with the incoming gradient
        // referenced by the checkpoint's backward, which keeps it until the segment is done.
        // The checkpoint's backward runs its own backward pass over the rerun graph.
        const int64_t incoming = grad_;
        const int graph = next_graph_++;
        for (int j = seg.end - 1; j >= seg.begin; --j) {
          const int k = j - seg.begin;
          const bool last = j == seg.end - 1;
          StoredBackward(j, rerun[k], rerun[k + 1], k == 0, last, graph);
          if (last) Add(incoming);
        }
        Add(-incoming);
        Release(rerun[seg.size()]);   // the recomputed outputs, held until backward returned
        Release(boundary_[seg.begin]);  // the checkpoint's saved input
        return;
      }
      case SegmentMode::kRecomputeAll: {
        const bool stochastic = Stochastic(seg);
        if (stochastic) Add(rng_bytes_);  // the current state, kept for the whole backward
        for (int j = seg.end - 1; j >= seg.begin; --j) {
          NoGradForward(seg.begin, j);  // leaves the input of stage j alive (or the saved one)
          Boundary in{j > seg.begin ? stages_[j - 1].output_bytes : 0, 1};
          Boundary out;
          StoredForward(j, in, out, true);
          StoredBackward(j, in, out, true, /*held=*/true, next_graph_++);
          Release(out);  // the outputs, held until backward returned
          live_ -= in.bytes;  // the leaves go with the next iteration
        }
        if (stochastic) Add(-rng_bytes_);
        Release(boundary_[seg.begin]);
        return;
      }
    }
  }

  const ModelProfile& profile_;
  const Plan& plan_;
  const std::vector<StageProfile>& stages_;
  std::vector<std::string>* timeline_;
  int64_t rng_bytes_ = 0;
  std::vector<Boundary> boundary_;
  static constexpr int kOuterGraph = 0;  // the step's backward pass, from the loss
  int next_graph_ = kOuterGraph + 1;     // ids for the passes checkpoints run
  std::set<int> grads_;  // parameters whose gradient exists
  // Gradient contributions so far per (parameter, backward pass).
  std::map<std::pair<int, int>, int> contributions_;
  int64_t grad_ = 0;     // the gradient flowing backward, w.r.t. the current boundary
  int64_t live_ = 0;
  int64_t peak_ = 0;
};

}  // namespace

MemoryPrediction PredictMemory(const ModelProfile& profile, const Plan& plan,
                               std::vector<std::string>* timeline) {
  return StepReplay(profile, plan, timeline).Run();
}

}  // namespace ckpt
