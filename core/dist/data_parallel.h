// Data parallelism on LibTorch's own c10d: ranks meet through a c10d store, form a process
// group (Gloo on CPU; NCCL, or Gloo through the host, on CUDA), and a c10d::Reducer averages
// the gradients across them while backward runs, bucket by bucket, as PyTorch's
// DistributedDataParallel does. No communication layer of ckptlab's own.
//
//   ASSIGN_OR_RETURN(std::optional<Rendezvous> r, RendezvousFromEnvironment());
//   ASSIGN_OR_RETURN(auto group, ProcessGroup::Join(*r, device, configuration_text));
//   ASSIGN_OR_RETURN(auto reducer,
//                    GradientReducer::Create(*group, model->Parameters(), model->State()));
//   StepOptions options;
//   options.hooks = reducer.get();  // the executor's step now leaves averaged gradients
//
// One reducer per plan: the reducer runs in c10d's static-graph mode, which learns in its
// first step how many times backward reaches each parameter (a tied embedding is reached once
// by each run that uses it, and how many runs that is depends on the plan) and marks a
// parameter ready for the all-reduce only when the last of them has accumulated its
// gradient, never twice. Its first step reduces every bucket after backward; later steps
// start each bucket's all-reduce as soon as it fills.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "c10/core/Device.h"
#include "core/run/executor.h"

namespace ckpt {

// Where the ranks of a run meet.
struct Rendezvous {
  int rank = 0;
  int world_size = 1;
  // A TCP store at host:port, served by rank 0 (as torchrun's), or, where `file` is set, a
  // file store at that path (ranks of one host; the tests').
  std::string host = "127.0.0.1";
  int port = 29500;
  std::string file;
  // How long rendezvous and every collective may wait for another rank before failing.
  int timeout_s = 60;
  // This rank's place among the ranks of its host, and how many those are: the local rank
  // picks a GPU (ResolveDevice), and the host's cores and memory are shared among its ranks.
  int local_rank = 0;
  int local_world_size = 1;
  // What the ranks reduce with: one of DataParallelBackends(device), or auto for its first.
  std::string backend = "auto";
};

// Whether this build can form a process group (it has LibTorch's Gloo or NCCL backend), and
// if not, why not.
bool HaveDataParallel();
std::string DataParallelUnavailableReason();

// The backends this build can reduce `device`'s tensors with, the default first: on CPU
// "gloo"; on CUDA "nccl" (where LibTorch has it and this build found NCCL's header), then
// "gloo" (Gloo's CUDA path, which stages the tensors through the host). Empty where none is.
std::vector<std::string> DataParallelBackends(c10::Device device);

// The backend `asked` names for `device`: "auto" is DataParallelBackends' first.
// InvalidArgument naming `asked` (an empty name too) and the accepted ones when it is not one;
// Unimplemented, with the reason, when this build has none for `device`.
absl::StatusOr<std::string> ChooseBackend(c10::Device device, absl::string_view asked);

// The rendezvous a launcher's environment describes, as torchrun and Slurm wrappers set it:
// RANK, WORLD_SIZE, MASTER_ADDR (default 127.0.0.1) and MASTER_PORT (default 29500),
// LOCAL_RANK (default 0) and LOCAL_WORLD_SIZE (default 1), or CKPT_RENDEZVOUS_FILE, a file
// store, where set (core/dist/launcher.h sets it). nullopt when neither RANK nor WORLD_SIZE is set;
// InvalidArgument naming the variable and its value when one is missing or not a number in
// range.
absl::StatusOr<std::optional<Rendezvous>> RendezvousFromEnvironment();

class ProcessGroup {
 public:
  // Joins the run `rendezvous` describes on `device`, with its backend (ChooseBackend's errors
  // first). Every rank gives its run's configuration as text (flags, model and strategy
  // specs); they must be equal, or every rank fails with FailedPrecondition naming the ranks
  // that differ and the first difference, before anything is measured. DeadlineExceeded when
  // a rank does not arrive in time; Unavailable when the store cannot be served or reached (a
  // port in use, say). On CUDA each rank reduces on its own `device`; NCCL wants one device per
  // rank, Gloo does not.
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Join(const Rendezvous& rendezvous,
                                                            c10::Device device,
                                                            const std::string& configuration);
  ~ProcessGroup();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& backend() const { return backend_; }  // "gloo" or "nccl"

  // The mean and the largest of each rank's `values` (the same count on every rank),
  // element-wise, in double precision, through the backend (on the device for NCCL, which
  // reduces no host tensors). A rank that died or left fails the collective.
  absl::StatusOr<std::vector<double>> Mean(const std::vector<double>& values);
  absl::StatusOr<std::vector<double>> Max(const std::vector<double>& values);
  // Waits until every rank arrives.
  absl::Status Barrier();
  // Rank 0's `text` on every rank (the others' is ignored), through the store: for what rank 0
  // alone knows (the rows its results.csv holds), so that every rank acts on the same.
  absl::StatusOr<std::string> FromRankZero(const std::string& text);

  struct Impl;  // c10d's objects, out of this header
  Impl& impl() { return *impl_; }

 private:
  ProcessGroup(int rank, int world_size, std::string backend, std::unique_ptr<Impl> impl);

  int rank_;
  int world_size_;
  std::string backend_;
  std::unique_ptr<Impl> impl_;
  int64_t shared_ = 0;  // FromRankZero calls so far: each has a key of its own
};

// What the ranks settle together, for a run that must take the same path on every rank. Each
// is a collective that every rank calls at the same point; with no group (one process) each
// answers for this process alone. An error from one is Aborted, naming this rank: a rank died,
// left, or took another path, and the run cannot go on.

// An Aborted error ending a run, naming this rank: "rank r of N: what: why".
absl::Status RankError(const ProcessGroup& group, absl::string_view what, const absl::Status& why);

// When every rank has finished a step of its own, with `local` here: OK if every rank's ended
// alike (each OK, each out of memory (ResourceExhausted), or each failed otherwise), so that
// each goes on with its own `local`; an error if they did not (a rank that failed alone has
// left the others' collectives behind) or the ranks cannot be reached.
absl::Status AgreeOnOutcome(ProcessGroup* group, const absl::Status& local);

// Whether `value` holds on every rank.
absl::StatusOr<bool> OnEveryRank(ProcessGroup* group, bool value);

// An error naming `what` unless `text` is the same on every rank (compared by a digest).
absl::Status SameOnEveryRank(ProcessGroup* group, const std::string& text, const std::string& what);

// Averages the gradients of `parameters` across a process group's ranks during backward:
// c10d::Reducer's buckets, each all-reduced once its gradients are in. Hooks on the
// parameters' gradient accumulators do the work, and only between BeforeStep and AfterStep:
// the executor runs it as a step's StepHooks (StepOptions::hooks).
class GradientReducer : public StepHooks {
 public:
  // Buckets of at most `bucket_bytes` (the first at most 1 MiB, as DDP's), allocated now on
  // the parameters' device: per-rank memory for as long as the reducer lives. Every rank starts
  // from rank 0's parameters and `state` (a model's running statistics, ChainModel::State), and
  // BeforeStep gives every rank rank 0's `state` again, in place, as DDP's default
  // (broadcast_buffers) does before each forward.
  static absl::StatusOr<std::unique_ptr<GradientReducer>> Create(ProcessGroup& group,
                                                                 std::vector<at::Tensor> parameters,
                                                                 std::vector<at::Tensor> state = {},
                                                                 int64_t bucket_bytes = 25 * 1024 *
                                                                                        1024);
  ~GradientReducer() override;

  // Around the forward and backward of one step (ChainExecutor calls them when given the
  // reducer as StepOptions::hooks). Afterwards every parameter's .grad is the mean of the ranks'.
  // They throw LibTorch's exceptions: a rank that died, a parameter that got no gradient.
  void BeforeStep() override;
  void AfterStep() override;

  int64_t bucket_bytes() const { return bucket_bytes_; }  // the buckets' total

  // Milliseconds that all-reducing tensors of the buckets' sizes takes, one bucket after
  // another, with nothing running beside it: what a step's communication would add if none of
  // it overlapped backward. Every rank must call it together; outside a step.
  absl::StatusOr<double> AllReduceAloneMs();

 private:
  struct Impl;
  GradientReducer(std::unique_ptr<Impl> impl, int64_t bucket_bytes);

  std::unique_ptr<Impl> impl_;
  int64_t bucket_bytes_;
  int64_t steps_ = 0;
};

}  // namespace ckpt
