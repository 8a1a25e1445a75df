#include "experiments/ranks.h"

#include <utility>

#include "core/base/status_macros.h"

namespace ckpt {

std::string Ranks::End() {
  if (!started.has_value()) return "";
  const std::string failed = DescribeFailure(started->Stop());
  started.reset();
  return failed;
}

absl::Status Ranks::Wait() {
  if (!started.has_value()) return absl::OkStatus();
  const std::string failed = DescribeFailure(started->Wait(/*grace_s=*/10, /*timeout_s=*/60));
  started.reset();
  return failed.empty() ? absl::OkStatus() : absl::AbortedError(failed);
}

absl::Status Ranks::Join(const Request& request, const Machine& machine,
                         std::vector<std::string> command) {
  Rendezvous rendezvous = request.ranks;
  if (!request.launched) {
    if (rendezvous.world_size == 1) return absl::OkStatus();
    ASSIGN_OR_RETURN(ScratchFolder made,
                     ScratchFolder::Make(request.temp_parent, "ckptlab-ranks-"));
    meeting.emplace(std::move(made));
    rendezvous.file = meeting->Path("rendezvous.store");
    command[0] = "/proc/self/exe";  // this very program, wherever argv[0] points
    ASSIGN_OR_RETURN(RankProcesses ranks,
                     RankProcesses::Start(command, 1, rendezvous.world_size, rendezvous.file));
    started.emplace(std::move(ranks));
  }
  absl::StatusOr<std::unique_ptr<ProcessGroup>> joined =
      ProcessGroup::Join(rendezvous, request.options.device, ConfigurationOf(request, machine));
  if (!joined.ok()) {
    const absl::StatusCode code = joined.status().code();
    // Settings that differ, a port in use: before anything is measured, as bad input is.
    if (code == absl::StatusCode::kFailedPrecondition ||
        code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kUnavailable) {
      return BadInput(joined.status());
    }
    return joined.status();
  }
  group = *std::move(joined);
  return absl::OkStatus();
}

}  // namespace ckpt
