// Starts the ranks of a data-parallel run as processes of this host, as torchrun does, and
// waits for them: each rank is the same program with the same arguments and the environment
// a launcher sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) plus
// CKPT_RENDEZVOUS_FILE, a file store the ranks meet through (core/data_parallel.h), so no port
// is chosen or raced for. No shell is involved: arguments are never interpreted.
//
//   ASSIGN_OR_RETURN(std::vector<RankExit> exits, LaunchRanks({"/proc/self/exe", ...}, 2, dir));
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt {

struct RankExit {
  int rank = 0;
  int exit_code = 0;     // when it exited
  int signal = 0;        // when a signal ended it (then exit_code is -1)
  bool stopped = false;  // the launcher ended it because another rank had failed
};

// Runs `argv` (argv[0] a path, not looked up) as `world_size` ranks, each with stdout and
// stderr of its own inherited from this process, meeting through a file store in the existing
// folder `rendezvous_dir`. When a rank fails (a non-zero exit or a signal), the others get
// SIGTERM after `grace_s` seconds if they are still running (the collectives they wait in fail
// first when the failed rank's sockets close), and SIGKILL 10 seconds later. Returns every
// rank's exit, in rank order; Internal when a rank could not be started (the ones started are
// ended).
absl::StatusOr<std::vector<RankExit>> LaunchRanks(const std::vector<std::string>& argv,
                                                  int world_size, const std::string& rendezvous_dir,
                                                  int grace_s = 30);

// The first failed rank's exit as a sentence ("rank 1 exited with status 2", "rank 0 was
// killed by signal 9"), or "" when every rank exited with status 0.
std::string DescribeFailure(const std::vector<RankExit>& exits);

}  // namespace ckpt
