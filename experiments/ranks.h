// This process's part of a data-parallel sweep: the ranks it starts (--nproc) and the group it
// joins, or nothing for one process.
//
//   Ranks ranks;  // in Main: ended before it returns, on every path
//   RETURN_IF_ERROR(ranks.Join(request, machine, request.arguments));
//   ... options.group = ranks.group.get(); ...
//   RETURN_IF_ERROR(ranks.Wait());  // rank 0, at the end: an error naming a rank that failed
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/base/files.h"
#include "core/dist/data_parallel.h"
#include "core/dist/launcher.h"
#include "experiments/request.h"

namespace ckpt {

// Members go in reverse order: the group, the ranks, then their meeting folder.
struct Ranks {
  std::optional<ScratchFolder> meeting;  // the started ranks' file store's folder
  std::optional<RankProcesses> started;  // ended if still running
  std::unique_ptr<ProcessGroup> group;

  // Starts ranks 1..N-1 of --nproc (`command`, this program's arguments, run again as
  // /proc/self/exe, meeting through a file store in a folder of their own) and joins the group,
  // or joins the run a launcher's environment describes; nothing for one process. Ranks that
  // cannot form (started with other settings, a port in use) are BadInput, before anything is
  // measured.
  absl::Status Join(const Request& request, const Machine& machine,
                    std::vector<std::string> command);
  // Ends the started ranks still running, after an error here: which failed first, or "".
  std::string End();
  // Waits for the started ranks to end on their own (they are done): an error naming the first
  // that failed.
  absl::Status Wait();
};

}  // namespace ckpt
