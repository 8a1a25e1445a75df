#include "core/launcher.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace ckpt {
namespace {

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

absl::StatusOr<std::vector<RankExit>> LaunchRanks(const std::vector<std::string>& argv,
                                                  int world_size, const std::string& rendezvous_dir,
                                                  int grace_s) {
  if (argv.empty()) return absl::InvalidArgumentError("LaunchRanks: no program");
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", world_size, " is not accepted; accepted: >= 1"));
  }
  std::vector<std::string> args = argv;
  std::vector<char*> arg_pointers = Pointers(args);
  std::vector<pid_t> pids;
  std::vector<RankExit> exits(world_size);
  const std::string store = absl::StrCat(rendezvous_dir, "/rendezvous.store");
  unlink(store.c_str());  // a store left by an earlier run would hold its keys
  for (int rank = 0; rank < world_size; ++rank) {
    exits[rank].rank = rank;
    std::vector<std::string> env = Environment({{"RANK", absl::StrCat(rank)},
                                                {"LOCAL_RANK", absl::StrCat(rank)},
                                                {"WORLD_SIZE", absl::StrCat(world_size)},
                                                {"MASTER_ADDR", "127.0.0.1"},
                                                {"CKPT_RENDEZVOUS_FILE", store}});
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
  // Wait for every rank; once one has failed, end the others after the grace period.
  int running = world_size;
  double failed_at = -1;
  bool terminated = false, killed = false;
  while (running > 0) {
    // Each rank's own process only: this process may have other children.
    for (int rank = 0; rank < world_size; ++rank) {
      if (pids[rank] <= 0) continue;
      int status = 0;
      const pid_t pid = waitpid(pids[rank], &status, WNOHANG);
      if (pid == 0 || (pid < 0 && errno == EINTR)) continue;
      RankExit& e = exits[rank];
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
      pids[rank] = -1;
      --running;
      if (Failed(e) && failed_at < 0) failed_at = Now();
    }
    if (failed_at >= 0 && !terminated && Now() - failed_at >= grace_s) {
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGTERM);
      }
      terminated = true;
    }
    if (terminated && !killed && Now() - failed_at >= grace_s + 10) {
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGKILL);
      }
      killed = true;
    }
    usleep(20 * 1000);
  }
  unlink(store.c_str());
  return exits;
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
