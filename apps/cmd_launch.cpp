// `trainsim launch --nproc N [--] COMMAND ...`: runs N local processes of COMMAND as one job, one per rank,
// with the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
// MASTER_PORT = a free port, TRAINSIM_TOKEN = a fresh random token). Every line a process prints comes out
// prefixed "[rank R] " on the same stream (stdout or stderr). When a process fails, the others get `--grace`
// seconds to end on their own (a replay's ranks stop with an error naming the failed rank), then SIGTERM,
// then SIGKILL; the launcher exits with the first failure's code (128 + the signal for a killed process).
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "apps/commands.h"

namespace trainsim::apps {

namespace {

constexpr const char* kCmd = "trainsim launch";

struct LaunchArgs {
  int nproc = 0;
  int master_port = 0;
  double grace = 5;
  std::vector<std::string> command;
};

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

// A port on 127.0.0.1 that nothing listens on right now (the kernel's choice).
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

std::string fresh_token() {
  std::random_device rd;  // /dev/urandom
  std::string t;
  for (int i = 0; i < 4; ++i) t += fmt::format("{:08x}", static_cast<unsigned>(rd()));
  return t;
}

// One child's output stream: whole lines go out prefixed.
struct Stream {
  int fd = -1;
  FILE* to = nullptr;
  std::string pending;
};

struct Child {
  pid_t pid = -1;
  bool running = false;
  int code = 0;
  Stream out, err;
};

void emit(int rank, Stream& s, bool at_end) {
  std::size_t start = 0, nl;
  while ((nl = s.pending.find('\n', start)) != std::string::npos) {
    fmt::print(s.to, "[rank {}] {}\n", rank, std::string_view(s.pending).substr(start, nl - start));
    start = nl + 1;
  }
  s.pending.erase(0, start);
  if (at_end && !s.pending.empty()) {
    fmt::print(s.to, "[rank {}] {}\n", rank, s.pending);
    s.pending.clear();
  }
  std::fflush(s.to);
}

int run(const LaunchArgs& a) {
  if (a.nproc < 1) {
    fmt::print(stderr, "{}: --nproc must be at least 1, got {}\n", kCmd, a.nproc);
    return 2;
  }
  std::vector<std::string> cmd = a.command;
  if (!cmd.empty() && cmd.front() == "--") cmd.erase(cmd.begin());
  if (cmd.empty()) {
    fmt::print(stderr, "{}: no command to run (trainsim launch --nproc N -- trainsim replay FILE ...)\n", kCmd);
    return 2;
  }
  // "trainsim" runs this very binary, wherever it is installed.
  std::string program = cmd.front() == "trainsim" ? std::string("/proc/self/exe") : cmd.front();
  char self[4096] = {};
  if (cmd.front() == "trainsim") {
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) program.assign(self, static_cast<std::size_t>(n));
  }
  const int port = a.master_port ? a.master_port : free_port();
  if (port == 0) {
    fmt::print(stderr, "{}: found no free port on 127.0.0.1\n", kCmd);
    return 1;
  }
  const std::string token = fresh_token();

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<Child> kids(a.nproc);
  for (int r = 0; r < a.nproc; ++r) {
    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) {
      fmt::print(stderr, "{}: cannot make a pipe: {}\n", kCmd, std::strerror(errno));
      return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      close(out[0]), close(out[1]), close(err[0]), close(err[1]);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("TRAINSIM_TOKEN", token.c_str(), 1);
      std::vector<char*> argv;
      argv.push_back(program.data());
      for (std::size_t i = 1; i < cmd.size(); ++i) argv.push_back(cmd[i].data());
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      fmt::print(stderr, "cannot run '{}': {}\n", program, std::strerror(errno));
      _exit(127);
    }
    close(out[1]), close(err[1]);
    if (pid < 0) {
      fmt::print(stderr, "{}: cannot start rank {}: {}\n", kCmd, r, std::strerror(errno));
      return 1;
    }
    kids[r].pid = pid, kids[r].running = true;
    kids[r].out = {out[0], stdout, {}};
    kids[r].err = {err[0], stderr, {}};
  }

  using Clock = std::chrono::steady_clock;
  int first_failure = 0, failed_rank = -1, running = a.nproc;
  std::optional<Clock::time_point> term_at, kill_at;
  auto stop_others = [&](int sig) {
    for (auto& k : kids)
      if (k.running) kill(k.pid, sig);
  };
  // The first failure names the job's cause. A rank that exits with an error is often reacting to another
  // rank's death that has not been reaped yet (the dead rank's peers can exit within milliseconds of it, and
  // on a loaded machine before it is waitable), so an error exit is held for kHold: a rank killed by a
  // signal in that time is the cause instead.
  constexpr auto kHold = std::chrono::milliseconds(500);
  struct Held {
    int rank, code;
    std::string how;
    Clock::time_point until;
  };
  std::optional<Held> held;
  auto announce = [&](int r, int code, const std::string& how) {
    failed_rank = r, first_failure = code;
    held.reset();
    fmt::print(stderr, "{}: rank {} {}; the other ranks get {:g} s to stop on their own\n", kCmd, r, how, a.grace);
    term_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.grace));
  };
  for (;;) {
    if (held && (Clock::now() >= held->until || running == 0)) announce(held->rank, held->code, held->how);
    std::vector<pollfd> fds;
    std::vector<std::pair<int, Stream*>> owners;
    for (int r = 0; r < a.nproc; ++r)
      for (Stream* s : {&kids[r].out, &kids[r].err})
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          owners.push_back({r, s});
        }
    if (fds.empty() && running == 0) break;
    if (!fds.empty()) {
      poll(fds.data(), fds.size(), 100);
    } else {
      usleep(20000);  // output closed, a process not yet reaped: look again shortly (bounded by its exit)
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [r, s] = owners[i];
      char buf[65536];
      ssize_t n = read(s->fd, buf, sizeof buf);
      if (n > 0) {
        s->pending.append(buf, static_cast<std::size_t>(n));
        emit(r, *s, false);
      } else if (n == 0 || errno != EINTR) {
        emit(r, *s, true);
        close(s->fd);
        s->fd = -1;
      }
    }
    // Reap in the order the processes ended, as far as we can tell: one whose output just closed is exiting,
    // so wait for it briefly (a killed rank's peers fail a few milliseconds after it, and the first failure
    // is the one that counts). Then whatever else has ended.
    std::vector<std::pair<pid_t, int>> ended;
    for (int r = 0; r < a.nproc; ++r) {
      Child& k = kids[r];
      if (!k.running || k.out.fd >= 0 || k.err.fd >= 0) continue;
      int status = 0;
      for (int i = 0; i < 200; ++i) {
        if (waitpid(k.pid, &status, WNOHANG) == k.pid) {
          ended.push_back({k.pid, status});
          break;
        }
        usleep(1000);
      }
    }
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) ended.push_back({pid, status});
    // Among those reaped together, a process killed by a signal ended first: the others' errors follow from it.
    std::stable_partition(ended.begin(), ended.end(), [](const auto& e) { return WIFSIGNALED(e.second); });
    for (auto [pid_ended, st] : ended) {
      status = st;
      for (int r = 0; r < a.nproc; ++r) {
        Child& k = kids[r];
        if (k.pid != pid_ended) continue;
        k.running = false, --running;
        k.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (k.code != 0 && failed_rank < 0) {
          if (WIFSIGNALED(status))
            announce(r, k.code, fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status))));
          else if (!held)
            held = Held{r, k.code, fmt::format("exited with code {}", k.code), Clock::now() + kHold};
        }
      }
    }
    if (g_signal && !term_at) {
      fmt::print(stderr, "{}: got signal {}; stopping every rank\n", kCmd, static_cast<int>(g_signal));
      if (first_failure == 0) first_failure = 128 + g_signal;
      term_at = Clock::now();
    }
    if (term_at && !kill_at && Clock::now() >= *term_at && running > 0) {
      stop_others(SIGTERM);
      kill_at = Clock::now() + std::chrono::seconds(5);
    }
    if (kill_at && Clock::now() >= *kill_at && running > 0) {
      stop_others(SIGKILL);
      kill_at = Clock::time_point::max();
    }
  }
  return first_failure;
}

}  // namespace

void add_launch_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<LaunchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Run N local processes of a command as one job, one per rank, with torchrun's variables (RANK, WORLD_SIZE, "
      "LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT = a free port) and a fresh TRAINSIM_TOKEN: "
      "trainsim launch --nproc 4 -- trainsim replay FILE ... (a first word 'trainsim' runs this binary). Each output line is prefixed with its rank. When a "
      "process fails the others are stopped (after --grace seconds) and the launcher exits with its code.");
  cmd->add_option("--nproc", a->nproc, "Processes (ranks) to start")->required();
  cmd->add_option("--master-port", a->master_port, "Rank 0's port on 127.0.0.1 (default: a free one)");
  cmd->add_option("--grace", a->grace, "Seconds the others get to stop on their own after one fails")->capture_default_str();
  // Everything from the first word that is not one of these options is the command, passed on untouched.
  cmd->prefix_command();
  cmd->allow_extras();
  cmd->callback([a, exit_code, cmd] {
    for (const auto& extra : cmd->remaining()) a->command.push_back(extra);
    *exit_code = run(*a);
  });
}

}  // namespace trainsim::apps
