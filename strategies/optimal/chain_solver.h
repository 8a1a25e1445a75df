// The budget planner behind `optimal`: the fastest persistent schedule of a chain under a
// memory budget, a dynamic programme after Rotor's (Beaumont, Eyraud-Dubois, Herrmann, Joly,
// Shilova, "Optimal checkpointing for heterogeneous chains: how to train deep neural networks
// with limited memory", Inria RR-9302, 2019; ACM TOMS 2024), with a choice of policy per
// stage where it runs with its graph, as Rockmate extends it (Zhao et al., ICML 2023).
//
// The chain model. Stage i takes x_i bytes and returns x_{i+1}; run with its graph under
// option k it keeps kept_ik bytes (its graph's and its output) until its backward, peaks
// tf_ik above them in forward and tb_ik above its start in backward; run without a graph it
// peaks tn_i above input and output; its backward leaves the input's gradient d_i and the
// parameters' gradients g_i (first created: a parameter a later stage shares counts there;
// summing the two contributions adds s_i for a moment, where both arrive in one pass). A schedule
// is a plan tree of stored stages and checkpointed segments whose inner plans are schedules of
// their rerun; the executor runs it as the memory model replays it (core/plan/memory_model.h),
// which the chain model follows in outline: it does not see RNG snapshots, whether a graph really
// keeps its input, or the order of frees inside one stage's backward, and it holds a rerun's output
// and incoming gradient until the whole rerun ends, where the executor drops them once the rerun's
// last backward call returns (core/plan/schedule.h): on nested plans it is conservative, and
// `optimal` checks every candidate with the exact memory model. Its events, for a list of elements
// over [a, b) in a context that is either the step's own pass ("top": the loss comes after stage
// b-1) or a checkpoint's rerun ("rerun": the incoming gradient d_b and the rerun's output x_b are
// held until the rerun ends), all relative to what the list's caller holds:
//
//   net(c, b)     what [c, b) leaves when done: G[c,b) + d_c (+ x_b in a rerun); for c == b
//                 the loss's gradient d_n at the top, nothing in a rerun. It does not depend
//                 on the plan, which is what makes the programme possible.
//   stored a, k   forward kept+tf; the rest [a+1, b) on top of kept; backward
//                 kept + net(a+1, b) + tb (the held variant for a rerun's last stage; + s_a at
//                 the top: a rerun's backward is a pass of its own, where a tied parameter's
//                 other contribution does not arrive).
//   checkpoint    forward without a graph: max over s in [a, j) of
//   [a, j)        (s > a ? x_s : 0) + x_{s+1} + tn_s; the rest [j, b) on top of x_j; then its
//                 rerun, a list over [a, j) in a rerun context, on top of net(j, b) (+ x_j when
//                 j == b in a rerun, where the enclosing rerun still holds it).
//   offloaded     a checkpoint whose input x_a the list's previous element made without a graph
//   [a, j)        (so nothing else holds it: not the batch, not a rerun's input, not a recorded
//                 run's output, which the schedule never copies): as a checkpoint, but x_a leaves
//                 the device once the forward has read it, so the rest runs on top of
//                 x_j - x_a, with a fetch of x_a pending on it (below); the rerun as a
//                 checkpoint's. Any other offloaded segment is a checkpoint here, as in the
//                 schedule.
//
// A fetch of p bytes pending on a list is placed before the list's last backward call
// (core/plan/schedule.h), which adds p to that call's events: a stored head's backward and those of
// the stored stages after it (one run, one call; at the top the loss's too, which is in it, or
// is the call itself when the list is empty); a checkpointed head passes the fetch on to its
// rerun's list; an empty rerun list drops it (the fetch then waits for the rerun that needs it).
// Copy times: out, x_a times the chain's per-byte cost, less (where copies overlap the compute)
// what the no-graph forward after it hides; in, p times its cost, less what the head stored
// stage's own backward hides (the call may hold more stages: the model undercounts the overlap).
//
// The recurrence (times: fw, bw per option, fn without a graph; m: bytes available):
//
//   T(a, b, m) = min( min_k [ fw_ak + bw_ak + T(a+1, b, m - kept_ak) ]
//                              if kept_ak + tf_ak <= m and kept_ak + net(a+1,b) + tb_ak (+ s_a) <=
//                              m,
//                     min_j [ fn_a + ... + fn_{j-1} + T(j, b, m - x_j)
//                             + T_rerun(a, j, m - net(j, b) - held) ]
//                              if the no-graph forward's peak <= m )
//   T(n, n, m) = loss time if the loss's kept + its backward's peak <= m (top);
//   T(b, b, m) = 0 (rerun).
//
// With offload the tables gain a context: a pending fetch (its bytes), whether it belongs to a
// run that continues into the list (then only a stored head is in its call), and whether x_a
// may be offloaded (the previous element was a checkpoint). The offloaded choice is
//
//   min_j [ fn_a..j-1 + copies + T(j, b, m - x_j + x_a | fetch x_a pending)
//           + T_rerun(a, j, m - net(j, b) - held) ]
//
// and a pending fetch p adds p to a stored head's backward check. A context's pending bytes take
// one of at most kMaxPendingClasses classes: the boundaries' distinct sizes, or, where there are
// more, groups of them, each counted at its largest size in memory and at its smallest in what
// the fetch hides (conservative both ways: the schedule built is then no slower and no larger
// than its value says; exact where the sizes are at most that many).
//
// Every T depends on shorter ranges, on the same range's rerun table (at the top), or on the
// same rerun range at a smaller budget (a rerun that checkpoints its whole range again, which
// holds x_b for nothing and so is never faster, but is a schedule like any other). The
// programme fills T for every budget 0..M in units of u bytes: O(M n^2 (n + K) S) time and
// O(M n^2 S) memory for n stages with K options each and S contexts (1 without offload,
// 2 + 3 x the pending classes with it).
//
// Discretisation: every byte count becomes round(bytes / u) units, so an event's units differ
// from its bytes / u by at most half a unit per term summed, at most (n + 6) / 2 units. The
// chain model is itself approximate (above), so `optimal` does not trust either: it takes the
// solver's plan at every budget 0..M, checks each with the exact memory model, and keeps the
// fastest whose predicted peak fits the user's budget (strategies/optimal/optimal.h).
// Chains longer than kMaxSolverStages are first cut into that many groups of consecutive
// stages, each solved as one stage with every part stored.
//
// Needs no LibTorch.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan/plan.h"
#include "core/plan/profile.h"

namespace ckpt::chain {

inline constexpr int kMaxSolverStages = 64;
inline constexpr int kMaxPendingClasses = 4;

struct Option {
  int policy_index = 0;  // the profile's measured[stage] entry it comes from (-1: all stored)
  double forward_ms = 0, backward_ms = 0;
  int64_t kept = 0, forward_transient = 0, backward_transient = 0;
  // The backward's peak when its input, output and incoming gradient are held throughout: as
  // the last stage of a rerun, which the rerun's backward starts from.
  int64_t held_backward_transient = 0;
};

struct Stage {
  int first = 0, last = 0;        // the profile's stages it stands for, [first, last]
  int64_t input = 0, output = 0;  // x_i, x_{i+1}
  int64_t input_grad = 0;         // d_i
  int64_t param_grads = 0;        // g_i
  int64_t grad_sum = 0;           // s_i
  double nograd_ms = 0;
  int64_t nograd_transient = 0;  // tn_i
  std::vector<Option> options;   // at least one
};

struct Chain {
  std::vector<Stage> stages;
  int64_t loss_kept = 0;
  int64_t loss_backward_transient = 0;
  int64_t output_grad = 0;  // d_n, what the loss's backward leaves
  double loss_ms = 0;
  // Offloaded segments: whether the solver may plan them; a copy's time per byte each way (per
  // unit once quantized); whether a copy runs beside the compute op after it.
  bool offload = false;
  double to_host_ms = 0, from_host_ms = 0;
  bool copies_overlap = false;
};

// The chain of a profile: a stage per profile stage (its options: the policies of its menu
// that were measured), or groups of stages (every part stored) when there are more than
// kMaxSolverStages. Offload is allowed where the profile knows both copy rates.
Chain FromProfile(const ModelProfile& profile);

// `chain` with every byte count in units of `unit` bytes, rounded to nearest.
Chain Quantize(const Chain& chain, int64_t unit);

// A schedule of a chain: segments over its stages (stored, checkpointed or offloaded, nested), an
// option per stage.
struct Schedule {
  std::vector<Segment> segments;
  std::vector<int> options;  // per chain stage, an index into its options
};

struct Cost {
  double time_ms = 0;
  int64_t peak = 0;  // above what the step's caller holds, in the chain's units
};

// The chain model's time and peak of a schedule. InvalidArgument for what the model does not
// cover: recompute-all segments, options out of range.
absl::StatusOr<Cost> Evaluate(const Chain& chain, const Schedule& schedule);

// The schedule with every stage stored under its first option.
Schedule AllStored(const Chain& chain);

// The contexts the solver keeps per range for `chain`: 1 without offload, 2 + 3 per class of
// pending fetch with it (above). The programme's work and memory grow with it.
int Contexts(const Chain& chain);

class Solver {
 public:
  // Fills the tables for every budget 0..max_units of `chain` (in its units).
  Solver(Chain chain, int max_units);

  int max_units() const { return max_units_; }
  bool Feasible(int units) const { return Time(units) < kInfinity; }
  // The least model time of any schedule within `units` (infinity if none).
  double Time(int units) const;
  // A schedule achieving Time(units); Feasible(units) must hold.
  Schedule ScheduleAt(int units) const;

 private:
  static constexpr float kInfinity = std::numeric_limits<float>::infinity();
  // A choice of kOffloaded + j: an offloaded segment ending at j.
  static constexpr int16_t kOffloaded = 1 << 12;
  // A list's context (see the header's comment): the class of a fetch pending on its last
  // backward call (0: none), whether that call is a run's that continues into the list, whether
  // its first input may be offloaded.
  struct Context {
    int pending = 0;
    bool run_only = false;
    bool offloadable = false;
  };
  int State(const Context& c) const;
  int Index(int a, int b) const;  // of the range [a, b), 0 <= a < b <= n
  int64_t Net(int c, int b, bool rerun) const;
  // 0 for an empty rerun range, infinity for m < 0; budgets above the grid read its top.
  float RerunAt(int a, int b, int64_t m, const Context& c) const;
  float TopAt(int a, int64_t m, const Context& c) const;
  size_t At(int a, int b, bool rerun, int64_t m, const Context& c) const;
  float Value(int a, int b, bool rerun, int m, const Context& c, int16_t* choice) const;
  void Build(int a, int b, bool rerun, int64_t m, Context c, Schedule& out,
             std::vector<Segment>& list) const;

  Chain chain_;
  int n_;
  int max_units_;
  size_t width_;
  // Precomputed from the chain, by range [c, b) at c * (n + 1) + b.
  std::vector<int64_t> x_;            // x_c
  std::vector<int64_t> net_rerun_;    // net(c, b) in a rerun
  std::vector<int64_t> net_top_;      // net(c, n) at the top, by c
  std::vector<int64_t> nograd_peak_;  // the no-graph forward's peak over [c, b)
  std::vector<double> nograd_ms_;     // its time
  int64_t loss_peak_ = 0;
  std::vector<int64_t> pending_bytes_;        // by class, its largest size; class 0 is no fetch
  std::vector<int64_t> pending_least_bytes_;  // by class, its smallest size
  std::vector<int> class_of_;                 // x_c's class, by c (0 where it cannot be offloaded)
  int states_ = 1;                            // contexts per range: Contexts(chain_)
  // T by budget: rerun tables per range (Index) and context, top tables per start and context;
  // the choices made: -(k + 1) stage stored under option k, j > 0 a checkpoint ending at j,
  // kOffloaded + j an offloaded one.
  std::vector<float> rerun_, top_;
  std::vector<int16_t> rerun_choice_, top_choice_;
};

// The plan of a schedule over the profile's stages: groups expanded, options turned into the
// stages' policies.
Plan ToPlan(const ModelProfile& profile, const Chain& chain, const Schedule& schedule);

}  // namespace ckpt::chain
