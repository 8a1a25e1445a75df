// Starts the ranks of a data-parallel run as processes of this host, as torchrun does, and
// waits for them: each rank is the same program with the same arguments and the environment
// a launcher sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR) plus
// CKPT_RENDEZVOUS_FILE, a file store the ranks meet through (core/dist/data_parallel.h), so no port
// is chosen or raced for. No shell is involved: arguments are never interpreted.
//
// A program that is itself rank 0 starts the others (first rank 1; 0 starts every rank) and
// waits for them when it is done:
//
//   ASSIGN_OR_RETURN(RankProcesses others, RankProcesses::Start(argv, 1, world, store));
//   ... run as rank 0 ...
//   std::vector<RankExit> exits = others.Wait(/*grace_s=*/30);
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckpt {

struct RankExit {
  int rank = 0;
  int exit_code = 0;     // when it exited
  int signal = 0;        // when a signal ended it (then exit_code is -1)
  bool stopped = false;  // the launcher ended it because another rank had failed
};

// The processes of ranks [first_rank, world_size) of a run, started by this process.
class RankProcesses {
 public:
  // Runs `argv` (argv[0] a path, not looked up) as each of those ranks, with stdout and stderr
  // inherited from this process, meeting through the file store `store`: a path where nothing
  // is, in an existing folder, where rank 0 makes the store (InvalidArgument naming what is
  // there otherwise; with first_rank 0, the store is removed when they have all ended).
  // Internal when a rank could not be started (the ones started are ended).
  static absl::StatusOr<RankProcesses> Start(const std::vector<std::string>& argv, int first_rank,
                                             int world_size, const std::string& store);
  RankProcesses(RankProcesses&& other) noexcept;
  RankProcesses& operator=(RankProcesses&&) = delete;
  // Ends the ranks still running, as Stop does, unless they were waited for.
  ~RankProcesses();

  // Waits until every rank has ended. When one fails (a non-zero exit or a signal), the others
  // get SIGTERM after `grace_s` seconds if they are still running (the collectives they wait in
  // fail first when the failed rank's sockets close), and SIGKILL 10 seconds later; so do all
  // that still run `timeout_s` seconds from now, when it is > 0. Returns their exits in rank
  // order; once only.
  std::vector<RankExit> Wait(int grace_s, int timeout_s = 0);
  // Ends the ranks still running: a second to end on their own (a rank whose failure this
  // process has just seen may not have been reaped yet), then SIGTERM, and SIGKILL 10 seconds
  // later; returns their exits as Wait does (those it ended marked `stopped`).
  std::vector<RankExit> Stop();

 private:
  RankProcesses(int first_rank, std::vector<pid_t> pids, std::string store)
      : first_rank_(first_rank), pids_(std::move(pids)), store_(std::move(store)) {}
  // Wait's loop; as if a rank had failed `timeout_s` seconds after it starts (at once when 0,
  // never when < 0).
  std::vector<RankExit> Reap(int grace_s, int timeout_s);

  int first_rank_ = 0;
  std::vector<pid_t> pids_;  // per rank; -1 once reaped
  std::string store_;
  std::vector<RankExit> exits_;
};

// In a rank that RankProcesses started (CKPT_LAUNCHER_PID names its starter): has the kernel
// send this process SIGTERM when its starter ends, so that no rank outlives a rank 0 that
// crashed. Where the variable is unset, nothing. InvalidArgument naming it when it is not a
// process id; FailedPrecondition when it does not name this process's parent (its starter has
// ended already, or the variable is a stale one): the rank must not go on.
absl::Status EndWithLauncher();

// The first failed rank's exit as a sentence ("rank 1 exited with status 2", "rank 0 was
// killed by signal 9"), or "" when every rank exited with status 0.
std::string DescribeFailure(const std::vector<RankExit>& exits);

}  // namespace ckpt
