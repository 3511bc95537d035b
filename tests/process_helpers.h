// Start trainsim processes with their own environment, and wait for them with a bound: for the tests of
// one process per rank (exec/dist/, trainsim launch). Output goes to a file per process.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <signal.h>
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
  int exit_code = -1;  ///< 128 + signal when killed; -1 while running
  std::string output() const { return slurp(log); }
};

/// Starts `trainsim ARGS` with `env` added to this process's environment; stdout and stderr go to `log`.
inline Process spawn_trainsim(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                              const std::filesystem::path& log) {
  Process p;
  p.log = log;
  p.pid = fork();
  if (p.pid == 0) {
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
      if (waitpid(p->pid, &status, WNOHANG) == p->pid)
        p->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      else
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

/// The environment of rank `rank` of `world` for a job on 127.0.0.1:`port`.
inline std::map<std::string, std::string> rank_env(int rank, int world, int port, const std::string& token = "test-token") {
  return {{"RANK", std::to_string(rank)},     {"WORLD_SIZE", std::to_string(world)}, {"LOCAL_RANK", std::to_string(rank)},
          {"MASTER_ADDR", "127.0.0.1"},       {"MASTER_PORT", std::to_string(port)}, {"TRAINSIM_TOKEN", token}};
}

}  // namespace trainsim::testing
