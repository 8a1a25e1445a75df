// The step as a program: the one statement of what a plan does. Compile turns a plan tree
// (core/plan/plan.h) into a flat sequence of operations over the chain, as Rotor writes its
// schedules (Beaumont et al.: forward with a graph, forward keeping only the input, forward
// without a graph, backward); the executor runs it, and the memory and time models replay it,
// each a loop over the same operations. A new way to treat a segment is a new rule here, not a
// change to its three readers. Two plans and their programs: docs/plans.md; offload's rules:
// docs/offload.md.
//
// Values are the tensors at the boundaries of the chain (boundary j: stage j's input; value 0
// is the batch's inputs, boundary 0), each made once, by one forward: a rerun makes new values
// at the boundaries it passes. The executor holds a value from the forward that makes it to the
// release that drops it; a recorded run's graph may hold it longer (what the graph saves). A
// recorded run is one autograd graph from its input to its output (or the loss): store_all is a
// single run, exactly a plain training step; its backward is one call. Needs no LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/plan/plan.h"

namespace ckpt {

enum class OpCode {
  kForward,    // stages [begin, end) from value `input`: recorded as run `run`, or without a graph
  kBackward,   // backward through run `run`, from the gradient at `end` (or from the loss)
  kRelease,    // the executor drops value `input`
  kSaveRng,    // the RNG streams' state into snapshot `rng` (a checkpoint's first pass)
  kReplayRng,  // set the RNG streams to snapshot `rng`, keeping the current state aside
  kEndReplay,  // restore the state the last kReplayRng kept aside
  kDropRng,    // free snapshot `rng`
  kOffload,    // copy value `input` into host buffer `host` (the value stays until released)
  kFetch,      // copy host buffer `host` into new value `output` on the device; the buffer goes
               // once the copy is done (before the value is read; no host bytes come between)
};

struct Op {
  OpCode code = OpCode::kForward;
  int begin = 0;  // stages [begin, end)
  int end = 0;
  int input = -1;      // kForward, kRelease: a value; kBackward: its run's input
  int output = -1;     // kForward: the value it makes at boundary `end` (-1 when it ends in the
                       // loss); kBackward: its run's (the root it backpropagates from)
  int run = -1;        // kForward with a graph, kBackward: the run
  bool loss = false;   // kForward, kBackward: the run goes on through the loss
  int rng = -1;        // kSaveRng, kReplayRng, kDropRng
  bool rerun = false;  // kForward: in the backward pass (its stages are recomputations)
  int host = -1;       // kOffload, kFetch: the host buffer
};

struct Program {
  int num_stages = 0;
  int num_values = 1;  // value 0 is the batch
  int num_runs = 0;
  int num_rng = 0;
  int num_host = 0;  // host buffers (offloaded values)
  std::vector<Op> ops;

  // The index of the first kBackward or kFetch (a prefetch for the first backward): the ops
  // before it are the forward pass and the loss.
  size_t ForwardEnd() const;
  // Stage forwards run in the backward pass: what backward recomputes.
  int64_t RecomputedStages() const;
  // Per stage, how often it runs without a graph.
  std::vector<int64_t> NoGradRuns() const;
  // A line per op ("forward [0,4) v0 -> v1, no graph").
  std::string ToString() const;
};

// The program of `plan` over a chain of `stages` (whose `stochastic` flags say where RNG
// snapshots are taken). The plan must be valid for them (ValidatePlan).
Program Compile(const Plan& plan, const std::vector<StageInfo>& stages);

// Stage forwards that backward reruns under `plan` on a chain of `num_stages`: a checkpointed
// segment of n stages reruns its n stages, plus what its inner plan reruns in turn; a
// recompute-all one n(n+1)/2 (stage k reruns the k stages before it, then itself).
int64_t RecomputedStages(const Plan& plan, int num_stages);

}  // namespace ckpt
