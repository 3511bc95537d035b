// Run `trainsim launch` from tests as a child of the test process (its descriptors, limits and streams set
// up as a test needs), and find the processes it leaves behind: while an OrphanCatcher lives, the processes
// whose parent dies are adopted by the test process, so a rank that outlives the launcher is seen (and
// ended) here.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_helpers.h"

namespace trainsim::testing {

/// How to start the launcher.
struct LaunchIo {
  std::filesystem::path out, err;  ///< files for its stdout and stderr ("": /dev/null)
  int stdout_fd = -1;              ///< its stdout instead of `out` (e.g. a pipe's write end)
  int stdin_fd = -1;               ///< its stdin (-1: /dev/null)
  long nofile = 0;                 ///< its RLIMIT_NOFILE's soft limit (0: unchanged)
  long nofile_hard = 0;            ///< and hard limit (0: the soft one)
  bool close_stdout = false;       ///< start it with descriptor 1 closed
};

/// A launcher started by start_launch.
struct Launcher {
  pid_t pid = -1;
  int exit_code = -1;     ///< 128 + the signal when it was killed; -1 while it runs
  long max_rss_kib = 0;   ///< its peak resident memory, from wait4 (KiB)
};

/// Starts `trainsim ARGS` with only descriptors 0-2 open (set from `io`).
inline Launcher start_launch(const std::vector<std::string>& args, const LaunchIo& io) {
  Launcher l;
  l.pid = fork();
  if (l.pid == 0) {
    auto open_or_null = [](const std::filesystem::path& p, int flags) {
      return open(p.empty() ? "/dev/null" : p.c_str(), flags, 0644);
    };
    const int in = io.stdin_fd >= 0 ? io.stdin_fd : open("/dev/null", O_RDONLY);
    const int out = io.stdout_fd >= 0 ? io.stdout_fd : open_or_null(io.out, O_WRONLY | O_CREAT | O_TRUNC);
    const int err = open_or_null(io.err, O_WRONLY | O_CREAT | O_TRUNC);
    if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
    close_range(3, ~0U, 0);  // nothing of the test process's leaks into the launcher and its ranks
    if (io.close_stdout) close(1);
    if (io.nofile > 0) {
      const rlimit lim{static_cast<rlim_t>(io.nofile), static_cast<rlim_t>(io.nofile_hard ? io.nofile_hard : io.nofile)};
      if (setrlimit(RLIMIT_NOFILE, &lim) != 0) _exit(126);
    }
    std::vector<char*> argv{const_cast<char*>(TRAINSIM_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(TRAINSIM_BINARY, argv.data());
    _exit(127);
  }
  return l;
}

/// Waits for the launcher to end, at most `limit`; kills (SIGKILL) and reaps it then and returns false.
inline bool wait_launcher(Launcher& l, std::chrono::duration<double> limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool in_time = true;
  for (;;) {
    int status = 0;
    rusage ru{};
    const pid_t got = wait4(l.pid, &status, WNOHANG, &ru);
    if (got == l.pid) {
      l.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      l.max_rss_kib = ru.ru_maxrss;
      return in_time;
    }
    if (got < 0) return false;
    if (in_time && std::chrono::steady_clock::now() > deadline) {
      kill(l.pid, SIGKILL);
      in_time = false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling for the exit, not synchronising
  }
}

/// The children of this process that are alive (zombies among them are reaped, not listed).
inline std::vector<pid_t> live_children() {
  std::vector<pid_t> kids;
  const pid_t self = getpid();
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(e.path() / "stat");  // "pid (comm) S ppid ..."
    const auto close = stat.rfind(')');
    if (close == std::string::npos || close + 4 > stat.size()) continue;
    const char state = stat[close + 2];
    const pid_t ppid = static_cast<pid_t>(std::atol(stat.c_str() + close + 4));
    if (ppid != self) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (state == 'Z') {
      int status = 0;
      waitpid(pid, &status, WNOHANG);
      continue;
    }
    kids.push_back(pid);
  }
  return kids;
}

/// While it lives, this process adopts the processes orphaned below it (PR_SET_CHILD_SUBREAPER). At its end it
/// kills and reaps every child left, so a failing test leaves nothing running.
class OrphanCatcher {
 public:
  OrphanCatcher() { prctl(PR_SET_CHILD_SUBREAPER, 1); }
  ~OrphanCatcher() {
    for (int round = 0; round < 100; ++round) {
      const std::vector<pid_t> left = live_children();
      if (left.empty()) break;
      for (pid_t p : left) kill(p, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    prctl(PR_SET_CHILD_SUBREAPER, 0);
  }
  OrphanCatcher(const OrphanCatcher&) = delete;
  OrphanCatcher& operator=(const OrphanCatcher&) = delete;

  /// Waits until no child of this process is alive, at most `limit`; the ones alive then. Call it when the
  /// children it should see are orphans (the launcher has been reaped).
  std::vector<pid_t> survivors(std::chrono::duration<double> limit) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      std::vector<pid_t> left = live_children();
      if (left.empty() || std::chrono::steady_clock::now() > deadline) return left;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling for exits, not synchronising
    }
  }
};

/// Waits until every file in `files` exists, at most `limit`; false if one is still missing then.
inline bool wait_for_files(const std::vector<std::filesystem::path>& files, std::chrono::duration<double> limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    bool all = true;
    for (const auto& f : files) all = all && std::filesystem::exists(f);
    if (all) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling for the files, not synchronising
  }
}

}  // namespace trainsim::testing
