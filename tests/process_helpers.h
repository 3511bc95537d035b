// Start trainsim processes with their own environment, and wait for them with a bound: for the tests of
// one process per rank (exec/dist/, trainsim launch). Output goes to a file per process.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_helpers.h"

namespace trainsim::testing {

/// A port on 127.0.0.1 that nothing listens on now (the kernel's choice).
inline int free_local_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

struct Process {
  pid_t pid = -1;
  std::filesystem::path log;
  int exit_code = -1;        ///< 128 + signal when killed; -1 while running
  long max_rss_kib = -1;     ///< its peak resident memory (KiB), once it has ended
  std::string output() const { return slurp(log); }
};

/// The processes spawn_trainsim started that nobody has reaped yet (see end_leftover_processes).
inline std::vector<pid_t>& spawned_processes() {
  static std::vector<pid_t> pids;
  return pids;
}

/// Kills (SIGKILL) and reaps every process spawn_trainsim started that is still running: a test that stopped
/// half-way (a failed REQUIRE) leaves none behind. Processes already reaped are only forgotten.
inline void end_leftover_processes() {
  for (pid_t pid : spawned_processes()) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == 0) {  // still our child, still running
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
  spawned_processes().clear();
}

/// Starts `trainsim ARGS` with `env` added to this process's environment; stdout and stderr go to `log`.
/// `max_open_files` > 0 limits its file descriptors (RLIMIT_NOFILE).
inline Process spawn_trainsim(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                              const std::filesystem::path& log, int max_open_files = 0) {
  Process p;
  p.log = log;
  p.pid = fork();
  if (p.pid == 0) {
    if (max_open_files > 0) {
      rlimit lim{static_cast<rlim_t>(max_open_files), static_cast<rlim_t>(max_open_files)};
      setrlimit(RLIMIT_NOFILE, &lim);
    }
    FILE* f = std::fopen(log.c_str(), "w");
    if (f) {
      dup2(fileno(f), STDOUT_FILENO);
      dup2(fileno(f), STDERR_FILENO);
    }
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv{const_cast<char*>(TRAINSIM_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(TRAINSIM_BINARY, argv.data());
    _exit(127);
  }
  if (p.pid > 0) spawned_processes().push_back(p.pid);
  return p;
}

/// Waits for every process to end, at most `limit`; kills (SIGKILL) and reaps those still running then.
/// Returns false when one had to be killed.
inline bool wait_all(std::vector<Process*> ps, std::chrono::duration<double> limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  bool all = true;
  for (;;) {
    bool running = false;
    for (Process* p : ps) {
      if (p->exit_code >= 0) continue;
      int status = 0;
      rusage usage{};
      if (wait4(p->pid, &status, WNOHANG, &usage) == p->pid) {
        p->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        p->max_rss_kib = usage.ru_maxrss;
      } else
        running = true;
    }
    if (!running) return all;
    if (std::chrono::steady_clock::now() > deadline) {
      for (Process* p : ps)
        if (p->exit_code < 0) {
          kill(p->pid, SIGKILL);
          int status = 0;
          waitpid(p->pid, &status, 0);
          p->exit_code = 128 + SIGKILL;
        }
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling for exits, not synchronising
  }
}

/// How many TCP connections to 127.0.0.1:`port` are established on the listening side (/proc/net/tcp): the
/// processes that have connected to a rank 0 listening there, whether it has accepted them yet or not.
inline int established_to(int port) {
  std::istringstream lines(slurp("/proc/net/tcp"));
  std::string line;
  std::getline(lines, line);  // the column names
  int n = 0;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string slot, local, remote, state;
    f >> slot >> local >> remote >> state;
    const auto colon = local.find(':');
    if (colon != std::string::npos && state == "01" && std::stoi(local.substr(colon + 1), nullptr, 16) == port) ++n;
  }
  return n;
}

/// Waits (polling, at most `limit`) until established_to(port) >= n; false when the time ran out.
inline bool wait_established(int port, int n, std::chrono::duration<double> limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (established_to(port) < n) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling the kernel's table, not synchronising
  }
  return true;
}

/// A job token for the tests (TRAINSIM_TOKEN: at least 16 characters).
inline const std::string kTestToken = "test-token-0123456789abcdef";

/// The environment of rank `rank` of `world` for a job on 127.0.0.1:`port`.
inline std::map<std::string, std::string> rank_env(int rank, int world, int port, const std::string& token = kTestToken) {
  return {{"RANK", std::to_string(rank)},     {"WORLD_SIZE", std::to_string(world)}, {"LOCAL_RANK", std::to_string(rank)},
          {"MASTER_ADDR", "127.0.0.1"},       {"MASTER_PORT", std::to_string(port)}, {"TRAINSIM_TOKEN", token}};
}

}  // namespace trainsim::testing
