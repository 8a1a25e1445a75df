// The budget planner behind `optimal`: the fastest persistent schedule of a chain under a
// memory budget, a dynamic programme after Rotor's (Beaumont et al., Inria RR-9302; ACM TOMS
// 2024) with a choice of policy per stage, as Rockmate extends it. Its chain model, recurrence,
// offload contexts and discretisation: docs/chain-solver.md. The chain model is approximate, so
// `optimal` checks the solver's plans with the exact memory model. No LibTorch.
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
  int64_t loss_forward_transient = 0;  // above loss_kept, as loss_backward_transient is
  int64_t loss_backward_transient = 0;
  int64_t output_grad = 0;  // d_n, what the loss's backward leaves
  double loss_ms = 0;
  // Whether the solver may plan checkpointed (and offloaded) segments; false: every stage is
  // stored, under one of its options (a model whose own code runs between its stages, where
  // each option is a way to run one stage: ckptlab's blocks path, python/ckptlab/blocks.py).
  bool checkpoints = true;
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
