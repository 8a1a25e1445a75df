#include "core/dist/launcher.h"

#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/files.h"

extern char** environ;

namespace ckpt {
namespace {

constexpr char kLauncherPid[] = "CKPT_LAUNCHER_PID";
constexpr int kKillAfterTermS = 10;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool Failed(const RankExit& e) { return e.signal != 0 || e.exit_code != 0; }

// This process's environment with `overrides` set (replacing what it had under their names).
std::vector<std::string> Environment(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (overrides.count(name) == 0) env.push_back(entry);
  }
  for (const auto& [name, value] : overrides) env.push_back(absl::StrCat(name, "=", value));
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

absl::StatusOr<RankProcesses> RankProcesses::Start(const std::vector<std::string>& argv,
                                                   int first_rank, int world_size,
                                                   const std::string& store) {
  if (argv.empty()) return absl::InvalidArgumentError("RankProcesses: no program");
  if (world_size < 1 || first_rank < 0 || first_rank > world_size) {
    return absl::InvalidArgumentError(absl::StrCat("ranks [", first_rank, ", ", world_size,
                                                   ") are not accepted; accepted: world size >= 1 "
                                                   "and 0 <= first rank <= world size"));
  }
  // The store is this run's: its rank 0 makes it where nothing is (core/dist/data_parallel.h), so
  // what is there now is not this run's to hand the ranks or to remove when they are done.
  if (const std::string there = DescribeWhatIsAt(store); there != "nothing") {
    return absl::InvalidArgumentError(
        absl::StrCat("the ranks' file store ", store, " exists already (", there,
                     "); accepted: a path where nothing is (rank 0 makes the store)"));
  }
  std::vector<std::string> args = argv;
  std::vector<char*> arg_pointers = Pointers(args);
  std::vector<pid_t> pids;
  for (int rank = first_rank; rank < world_size; ++rank) {
    std::vector<std::string> env = Environment({{"RANK", absl::StrCat(rank)},
                                                {"LOCAL_RANK", absl::StrCat(rank)},
                                                {"WORLD_SIZE", absl::StrCat(world_size)},
                                                {"LOCAL_WORLD_SIZE", absl::StrCat(world_size)},
                                                {"MASTER_ADDR", "127.0.0.1"},
                                                {"CKPT_RENDEZVOUS_FILE", store},
                                                {kLauncherPid, absl::StrCat(getpid())}});
    std::vector<char*> env_pointers = Pointers(env);
    pid_t pid = 0;
    const int error = posix_spawn(&pid, args[0].c_str(), nullptr, nullptr, arg_pointers.data(),
                                  env_pointers.data());
    if (error != 0) {
      for (pid_t started : pids) kill(started, SIGKILL);
      for (pid_t started : pids) waitpid(started, nullptr, 0);
      return absl::InternalError(
          absl::StrCat("could not start rank ", rank, " (", args[0], "): ", std::strerror(error)));
    }
    pids.push_back(pid);
  }
  return RankProcesses(first_rank, std::move(pids), store);
}

RankProcesses::RankProcesses(RankProcesses&& other) noexcept
    : first_rank_(other.first_rank_),
      pids_(std::move(other.pids_)),
      store_(std::move(other.store_)),
      exits_(std::move(other.exits_)) {
  other.pids_.clear();
}

RankProcesses::~RankProcesses() {
  if (!pids_.empty() && exits_.empty()) Stop();
}

std::vector<RankExit> RankProcesses::Wait(int grace_s, int timeout_s) {
  return Reap(grace_s, timeout_s > 0 ? timeout_s : -1);
}

std::vector<RankExit> RankProcesses::Stop() { return Reap(/*grace_s=*/1, /*timeout_s=*/0); }

std::vector<RankExit> RankProcesses::Reap(int grace_s, int timeout_s) {
  if (!exits_.empty() || pids_.empty()) return exits_;
  const int count = static_cast<int>(pids_.size());
  std::vector<RankExit> exits(count);
  for (int i = 0; i < count; ++i) exits[i].rank = first_rank_ + i;
  int running = count;
  const double start = Now();
  double failed_at = timeout_s == 0 ? start : -1;
  bool terminated = false, killed = false;
  while (running > 0) {
    if (failed_at < 0 && timeout_s > 0 && Now() - start >= timeout_s) failed_at = Now();
    // Each rank's own process only: this process may have other children.
    for (int i = 0; i < count; ++i) {
      if (pids_[i] <= 0) continue;
      int status = 0;
      const pid_t pid = waitpid(pids_[i], &status, WNOHANG);
      if (pid == 0 || (pid < 0 && errno == EINTR)) continue;
      RankExit& e = exits[i];
      if (pid < 0) {  // not ours to wait for any more (reaped elsewhere): nothing to tell
        e.exit_code = -1;
      } else if (WIFEXITED(status)) {
        e.exit_code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        e.exit_code = -1;
        e.signal = WTERMSIG(status);
        e.stopped = terminated && (e.signal == SIGTERM || e.signal == SIGKILL);
      } else {
        continue;  // stopped or continued, not ended
      }
      pids_[i] = -1;
      --running;
      if (Failed(e) && failed_at < 0) failed_at = Now();
    }
    if (running == 0) break;
    if (failed_at >= 0 && !terminated && Now() - failed_at >= grace_s) {
      for (pid_t p : pids_) {
        if (p > 0) kill(p, SIGTERM);
      }
      terminated = true;
    }
    if (terminated && !killed && Now() - failed_at >= grace_s + kKillAfterTermS) {
      for (pid_t p : pids_) {
        if (p > 0) kill(p, SIGKILL);
      }
      killed = true;
    }
    usleep(20 * 1000);
  }
  // Made by the rank 0 this launcher started (Start found nothing there), and left behind if a
  // rank failed before c10d's last one could remove it.
  if (first_rank_ == 0) unlink(store_.c_str());
  exits_ = exits;
  return exits;
}

absl::Status EndWithLauncher() {
  const char* text = std::getenv(kLauncherPid);
  if (text == nullptr) return absl::OkStatus();
  int launcher = 0;
  if (!absl::SimpleAtoi(text, &launcher) || launcher <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kLauncherPid, "=", text,
                     " is not accepted; accepted: unset (the launcher of --nproc sets it, to the "
                     "process id of the rank 0 that started this rank)"));
  }
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The starter may have ended before the request: then this process is another's child now.
  if (getppid() != launcher) {
    return absl::FailedPreconditionError(
        absl::StrCat(kLauncherPid, "=", launcher,
                     " is not this rank's parent: the rank 0 that started it has ended, or the "
                     "variable is left from another run; accepted: unset, outside ranks that "
                     "--nproc started"));
  }
  return absl::OkStatus();
}

std::string DescribeFailure(const std::vector<RankExit>& exits) {
  for (const RankExit& e : exits) {
    if (e.stopped) continue;  // ended by the launcher: not the cause
    if (e.signal != 0) return absl::StrCat("rank ", e.rank, " was killed by signal ", e.signal);
    if (e.exit_code != 0) return absl::StrCat("rank ", e.rank, " exited with status ", e.exit_code);
  }
  for (const RankExit& e : exits) {
    if (e.stopped) return absl::StrCat("rank ", e.rank, " was ended by the launcher");
  }
  return "";
}

}  // namespace ckpt
