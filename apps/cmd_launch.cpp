// `trainsim launch --nproc N [--] COMMAND ...`: runs N local processes of COMMAND as one job, one per rank,
// with the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
// MASTER_PORT = a free port, TRAINSIM_TOKEN = a fresh random token). Every line a process prints comes out
// prefixed "[rank R] " on the same stream (stdout or stderr; apps/launch_output.h). Each rank runs in its own
// process group and dies with the launcher (apps/launch_spawn.h). When a process fails, the others get
// `--grace` seconds to end on their own (a replay's ranks stop with an error naming the failed rank), then
// SIGTERM, then SIGKILL 5 s later; the launcher exits with the first failure's code (128 + the signal for a
// killed process). SIGINT, SIGTERM or SIGHUP to the launcher stop every rank the same way at once (a second
// one: SIGKILL); the launcher then exits 128 + that signal (130 for Ctrl-C) unless a rank had failed first.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "apps/commands.h"
#include "apps/launch_output.h"
#include "apps/launch_spawn.h"
#include "apps/suggest.h"

namespace trainsim::apps {

namespace {

using namespace launch;
using Clock = std::chrono::steady_clock;

constexpr const char* kCmd = "trainsim launch";
// One machine's ranks: each is a process holding two pipes to the launcher (and rank 0 of a replay holds a
// connection to each of the others). 1024 is far above the accelerators or cores of one machine and keeps
// the launcher's descriptors within what a raised `ulimit -n` allows.
constexpr long kMaxProcs = 1024;
constexpr double kMaxGrace = 86400;  // a day
// A rank's error exit is held this long before it is announced as the job's cause: a rank killed by a signal
// in that time is the cause instead (the killed rank's peers can exit within milliseconds of it, and on a
// loaded machine before it is waitable).
constexpr auto kHold = std::chrono::milliseconds(500);
constexpr auto kTermToKill = std::chrono::seconds(5);  // SIGTERM, then SIGKILL this much later
// After the last rank ended, its output pipes are read to their end for at most this long (a process that
// left the rank's process group may hold one open).
constexpr auto kDrain = std::chrono::seconds(5);

struct LaunchArgs {
  int nproc = 0;
  int master_port = 0;  // 0: a free one
  double grace = 5;
  std::vector<std::string> command;
};

// The launcher's signals reach its loop through a self-pipe (no wake-up is lost between a check and poll).
int g_wake_write = -1;
volatile sig_atomic_t g_signal = 0;   // the last of SIGINT, SIGTERM, SIGHUP received
volatile sig_atomic_t g_signals = 0;  // how many of them
volatile sig_atomic_t g_child = 1;    // SIGCHLD came since the ranks were last looked at
void on_signal(int sig) {
  const int saved = errno;
  if (sig == SIGCHLD) {
    g_child = 1;
  } else {
    g_signal = sig;
    g_signals = g_signals + 1;
  }
  if (g_wake_write >= 0) (void)!write(g_wake_write, "!", 1);
  errno = saved;
}

// A port on 127.0.0.1 that nothing listens on right now (the kernel's choice).
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

// "0-3, 5, 7-8".
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return s;
}

std::string signal_name(int sig) { return fmt::format("signal {} ({})", sig, strsignal(sig)); }

// A descriptor the launcher was started without (0, 1 or 2 closed) would be taken by its first pipe, and the
// ranks' output written into another rank's pipe: open /dev/null there instead.
void ensure_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd)
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      const int n = open("/dev/null", O_RDWR);
      if (n >= 0 && n != fd) {
        dup2(n, fd);
        close(n);
      }
    }
}

// The launcher keeps two descriptors per rank. A soft limit below that (1024 is common) is raised as far as
// the hard limit allows, for the launcher only; the original limit is returned (the ranks get it back).
rlimit raise_descriptor_limit(long needed) {
  rlimit original{};
  if (getrlimit(RLIMIT_NOFILE, &original) != 0) return original;
  if (original.rlim_cur != RLIM_INFINITY && original.rlim_cur < static_cast<rlim_t>(needed)) {
    rlimit raised = original;
    raised.rlim_cur = original.rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(needed)
                                                          : std::min(original.rlim_max, static_cast<rlim_t>(needed));
    setrlimit(RLIMIT_NOFILE, &raised);
  }
  return original;
}

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int code = 0;
  int fd[2] = {-1, -1};  // the read ends of its stdout and stderr pipes
  std::unique_ptr<RankStream> stream[2];
};

// One job: the ranks, where their output goes, and how far the stop has gone.
class Job {
 public:
  Job(const LaunchArgs& a, const std::vector<std::string>& argv, int port, std::string token)
      : a_(a), argv_(argv), port_(port), token_(std::move(token)), ranks_(static_cast<std::size_t>(a.nproc)) {}

  int run();

 private:
  template <typename... Args>
  void say(fmt::format_string<Args...> f, Args&&... args) {
    err_.write(fmt::format("{}: {}\n", kCmd, fmt::format(f, std::forward<Args>(args)...)));
  }
  bool start_all(RankSetup setup);
  void reap();
  void ended(int r, int status);
  void announce(int r, int code, const std::string& how);
  void on_signals();
  void stop(int sig);
  std::vector<int> running_ranks() const;
  void read_output(int r, int which);
  void close_stream(int r, int which);
  int open_streams() const;
  void check_sinks();

  const LaunchArgs& a_;
  const std::vector<std::string>& argv_;
  int port_;
  std::string token_;
  std::vector<Rank> ranks_;
  int started_ = 0, running_ = 0;
  Sink out_{STDOUT_FILENO}, err_{STDERR_FILENO};

  // The stop: `decided` once the job's outcome is known (a failure announced, or a signal to the launcher).
  struct Held {
    int rank, code;
    std::string how;
    Clock::time_point until;
  };
  std::optional<Held> held_;
  bool decided_ = false;
  int exit_code_ = 0;
  std::optional<Clock::time_point> grace_end_, kill_at_, drain_until_;
  bool term_sent_ = false, kill_sent_ = false;
  int signals_seen_ = 0, signals_at_drain_ = 0;
};

std::vector<int> Job::running_ranks() const {
  std::vector<int> r;
  for (int i = 0; i < started_; ++i)
    if (ranks_[i].running) r.push_back(i);
  return r;
}

bool Job::start_all(RankSetup setup) {
  const std::vector<std::string> ours = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",    "LOCAL_WORLD_SIZE",
                                         "MASTER_ADDR", "MASTER_PORT", "TRAINSIM_TOKEN"};
  const std::vector<std::string> base = environment_without(ours);
  const int null_fd = setup.null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);  // every rank's stdin
  if (null_fd < 0) {
    say("cannot open /dev/null: {}", std::strerror(errno));
    decided_ = true;
    exit_code_ = 2;
    return false;
  }
  for (int r = 0; r < a_.nproc; ++r) {
    if (g_signals != signals_seen_) break;  // stopped before every rank started: the loop handles it
    std::vector<std::string> env = base;
    env.push_back(fmt::format("RANK={}", r));
    env.push_back(fmt::format("WORLD_SIZE={}", a_.nproc));
    env.push_back(fmt::format("LOCAL_RANK={}", r));
    env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", a_.nproc));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back(fmt::format("MASTER_PORT={}", port_));
    env.push_back("TRAINSIM_TOKEN=" + token_);
    auto result = start_rank(argv_, env, setup);
    if (auto* e = std::get_if<StartError>(&result)) {
      std::string hint;
      if (e->what.find(std::strerror(EMFILE)) != std::string::npos)
        hint = fmt::format(" (the launcher keeps 2 descriptors per rank; see `ulimit -n`)");
      say("cannot start rank {} of {}: {}{}", r, a_.nproc, e->what, hint);
      decided_ = true;
      exit_code_ = e->exit_code;  // 126/127: the command cannot run (as a shell); 2: the launcher could not start it
      if (started_ > 0) {
        say("stopping the {} rank(s) already started", started_);
        stop(SIGTERM);
      }
      close(null_fd);
      return false;
    }
    const Started& s = std::get<Started>(result);
    Rank& k = ranks_[r];
    k.pid = s.pid, k.running = true;
    k.fd[0] = s.out_fd, k.fd[1] = s.err_fd;
    k.stream[0] = std::make_unique<RankStream>(r, &out_);
    k.stream[1] = std::make_unique<RankStream>(r, &err_);
    ++started_, ++running_;
  }
  close(null_fd);
  return true;
}

void Job::stop(int sig) {
  const std::vector<int> running = running_ranks();
  for (int r : running) signal_rank(ranks_[r].pid, sig);
  if (sig == SIGTERM) {
    term_sent_ = true;
    kill_at_ = Clock::now() + kTermToKill;
  } else {
    kill_sent_ = true;
  }
}

void Job::announce(int r, int code, const std::string& how) {
  decided_ = true;
  exit_code_ = code;
  held_.reset();
  if (running_ == 0 || term_sent_) {
    say("rank {} {}", r, how);
    return;
  }
  say("rank {} {}; the other ranks get {:g} s to stop on their own", r, how, a_.grace);
  grace_end_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a_.grace));
}

void Job::ended(int r, int status) {
  Rank& k = ranks_[r];
  k.running = false;
  --running_;
  k.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (k.code == 0 || decided_) return;
  if (WIFSIGNALED(status))
    announce(r, k.code, fmt::format("was killed by {}", signal_name(WTERMSIG(status))));
  else if (!held_)
    held_ = Held{r, k.code, fmt::format("exited with code {}", k.code), Clock::now() + kHold};
}

void Job::reap() {
  if (!g_child) return;
  g_child = 0;  // (a rank that ends after this sets it again)
  // Those that ended, found without reaping them: while a rank is a zombie its process id (and so its process
  // group's) cannot be reused, so what it left running in its group can be killed safely first.
  std::vector<std::pair<int, int>> done;  // rank, status
  for (int r = 0; r < started_; ++r) {
    Rank& k = ranks_[r];
    if (!k.running) continue;
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(k.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != k.pid)
      continue;
    kill(-k.pid, SIGKILL);  // the rank's group ends with it
    int status = 0;
    while (waitpid(k.pid, &status, 0) < 0 && errno == EINTR) {
    }
    done.push_back({r, status});
  }
  // Among those found together, a process killed by a signal ended first: the others' errors follow from it.
  std::stable_partition(done.begin(), done.end(), [](const auto& d) { return WIFSIGNALED(d.second); });
  for (auto [r, status] : done) ended(r, status);
}

void Job::on_signals() {
  const int count = g_signals, sig = g_signal;
  if (count == signals_seen_) return;
  signals_seen_ = count;
  if (held_) {  // a rank failed before the signal came: it stays the job's cause
    const Held h = *held_;
    announce(h.rank, h.code, h.how);
  }
  if (!decided_) {
    decided_ = true;
    exit_code_ = 128 + sig;
  }
  const std::vector<int> running = running_ranks();
  if (running.empty()) {
    say("got {}", signal_name(sig));
    return;
  }
  if (!term_sent_) {
    say("got {}: stopping rank(s) {} (SIGTERM, SIGKILL {} s later)", signal_name(sig), rank_list(running),
        kTermToKill.count());
    stop(SIGTERM);
  } else if (!kill_sent_) {
    say("got {} again: killing rank(s) {} (SIGKILL)", signal_name(sig), rank_list(running));
    stop(SIGKILL);
  }
}

void Job::read_output(int r, int which) {
  static char buf[kMaxPiece];
  Rank& k = ranks_[r];
  const ssize_t n = read(k.fd[which], buf, sizeof buf);
  if (n > 0) {
    k.stream[which]->take(std::string_view(buf, static_cast<std::size_t>(n)));
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    close_stream(r, which);
  }
  check_sinks();
}

void Job::close_stream(int r, int which) {
  Rank& k = ranks_[r];
  if (k.fd[which] < 0) return;
  k.stream[which]->finish();
  close(k.fd[which]);
  k.fd[which] = -1;
}

int Job::open_streams() const {
  int n = 0;
  for (int r = 0; r < started_; ++r) n += (ranks_[r].fd[0] >= 0) + (ranks_[r].fd[1] >= 0);
  return n;
}

void Job::check_sinks() {
  if (auto e = out_.new_error())
    say("cannot write to standard output ({}); the ranks' standard output is dropped from here on", std::strerror(*e));
}

int Job::run() {
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    say("cannot make a pipe: {}", std::strerror(errno));
    return 2;
  }
  g_wake_write = wake[1];
  struct sigaction sa{}, old_int{}, old_term{}, old_hup{}, old_chld{}, old_pipe{};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&sa.sa_mask, sig);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  sigaction(SIGCHLD, &sa, &old_chld);
  struct sigaction ign{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &old_pipe);  // a closed stdout is an error to report (Sink), not a reason to die
  RankSetup setup{};
  sigprocmask(SIG_SETMASK, nullptr, &setup.mask);
  setup.nofile = raise_descriptor_limit(2 * a_.nproc + 16);

  start_all(setup);

  for (;;) {
    reap();
    const auto now = Clock::now();
    if (held_ && (now >= held_->until || running_ == 0)) {
      const Held h = *held_;  // (announce clears held_)
      announce(h.rank, h.code, h.how);
    }
    on_signals();
    if (grace_end_ && !term_sent_ && running_ > 0 && Clock::now() >= *grace_end_) {
      say("the grace of {:g} s is over: stopping rank(s) {} (SIGTERM, SIGKILL {} s later)", a_.grace,
          rank_list(running_ranks()), kTermToKill.count());
      stop(SIGTERM);
    }
    if (kill_at_ && !kill_sent_ && running_ > 0 && Clock::now() >= *kill_at_) {
      say("rank(s) {} still running {} s after SIGTERM: SIGKILL", rank_list(running_ranks()), kTermToKill.count());
      stop(SIGKILL);
    }
    if (running_ == 0) {
      if (open_streams() == 0) break;
      if (!drain_until_) {
        drain_until_ = Clock::now() + kDrain;
        signals_at_drain_ = signals_seen_;
      }
      const bool signalled = signals_seen_ != signals_at_drain_;  // a signal to the launcher ends the wait at once
      if (Clock::now() >= *drain_until_ || signalled) {
        for (int r = 0; r < started_; ++r) {
          const bool out = ranks_[r].fd[0] >= 0, err = ranks_[r].fd[1] >= 0;
          if (!out && !err) continue;
          if (!signalled)
            say("rank {}'s {} still open {} s after it ended (a process it started, outside its process group, "
              "holds it): not reading on", r, out && err ? "stdout and stderr are" : out ? "stdout is" : "stderr is",
              kDrain.count());
          close_stream(r, 0);
          close_stream(r, 1);
        }
        break;
      }
    }

    // Wait for output, an exit or a signal, or the next deadline.
    std::vector<pollfd> fds{{wake[0], POLLIN, 0}};
    std::vector<std::pair<int, int>> owners{{-1, -1}};
    for (int r = 0; r < started_; ++r)
      for (int w : {0, 1})
        if (ranks_[r].fd[w] >= 0) {
          fds.push_back({ranks_[r].fd[w], POLLIN, 0});
          owners.push_back({r, w});
        }
    auto next = Clock::now() + std::chrono::seconds(1);
    auto until = [&](const std::optional<Clock::time_point>& t, bool pending) {
      if (t && pending) next = std::min(next, *t);
    };
    until(held_ ? std::optional(held_->until) : std::nullopt, true);
    until(grace_end_, !term_sent_ && running_ > 0);
    until(kill_at_, !kill_sent_ && running_ > 0);
    until(drain_until_, running_ == 0);
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count() + 1;
    if (poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(wait, 0, 1000))) < 0 && errno != EINTR) {
      say("poll failed: {}", std::strerror(errno));
      if (!decided_) exit_code_ = 2;
      break;  // (cannot happen with valid descriptors; the ranks still die with the launcher)
    }
    if (fds[0].revents) {
      char drain[64];
      while (read(wake[0], drain, sizeof drain) > 0) {
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_output(owners[i].first, owners[i].second);
  }

  // (every rank was reaped above, unless poll failed: the parent-death signal ends those left)
  g_wake_write = -1;
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  sigaction(SIGCHLD, &old_chld, nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  close(wake[0]);
  close(wake[1]);
  return exit_code_;
}

int run(const LaunchArgs& a, const std::vector<std::string>& option_names) {
  ensure_standard_descriptors();
  std::vector<std::string> cmd = a.command;
  if (!cmd.empty() && cmd.front() == "--") cmd.erase(cmd.begin());
  if (cmd.empty()) {
    fmt::print(stderr, "{}: no command to run (trainsim launch --nproc N -- trainsim replay FILE ...)\n", kCmd);
    return 2;
  }
  // The command starts at the first word that is not one of launch's options, so a mistyped option
  // (`--grce 5`) would be run as the command: no program is named like an option, so it is one.
  if (cmd.front().size() > 1 && cmd.front()[0] == '-') {
    const std::string flag = cmd.front().substr(0, cmd.front().find('='));
    const std::string near = closest_name(flag, option_names);
    fmt::print(stderr, "{}: unknown option '{}'{}; the command to run comes after the options (trainsim launch "
               "--nproc N -- COMMAND ...)\n", kCmd, flag, near.empty() ? "" : fmt::format(": did you mean {}?", near));
    return 2;
  }
  // "trainsim" runs this very binary, wherever it is installed.
  if (cmd.front() == "trainsim") {
    char self[4096] = {};
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    cmd.front() = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string("/proc/self/exe");
  }
  const int port = a.master_port ? a.master_port : free_port();
  if (port == 0) {
    fmt::print(stderr, "{}: found no free port on 127.0.0.1\n", kCmd);
    return 2;
  }
  Job job(a, cmd, port, fresh_token());
  return job.run();
}

// Range checks of the options, before anything starts (CLI11 prints "trainsim launch: --OPTION: MESSAGE" and
// the launcher exits 2).
CLI::Validator whole_number(long min, long max, std::string what) {
  return CLI::Validator(
      [min, max, what](std::string& value) -> std::string {
        long v = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (value.empty() || ec != std::errc() || end != value.data() + value.size() || v < min || v > max)
          return fmt::format("expected a whole number from {} to {} ({}), got '{}'", min, max, what, value);
        return {};
      },
      fmt::format("{}..{}", min, max));
}

CLI::Validator seconds_up_to(double max) {
  return CLI::Validator(
      [max](std::string& value) -> std::string {
        double v = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (value.empty() || ec != std::errc() || end != value.data() + value.size() || !std::isfinite(v) || v < 0 ||
            v > max)
          return fmt::format("expected a number of seconds from 0 to {:g}, got '{}'", max, value);
        return {};
      },
      fmt::format("0..{:g}", max));
}

}  // namespace

void add_launch_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<LaunchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Run N local processes of a command as one job, one per rank, with torchrun's variables (RANK, WORLD_SIZE, "
      "LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT = a free port) and a fresh TRAINSIM_TOKEN: "
      "trainsim launch --nproc 4 -- trainsim replay FILE ... (a first word 'trainsim' runs this binary). Each output "
      "line is prefixed with its rank. When a process fails the others are stopped (after --grace seconds) and the "
      "launcher exits with its code; Ctrl-C stops every rank and exits 130. The ranks die with the launcher. Exit "
      "status: the first failed rank's code (0 when every rank succeeded); 2 a bad option or ranks that could not be "
      "started; 126 or 127 a command that cannot be run.");
  cmd->add_option("--nproc", a->nproc, "Processes (ranks) to start, 1 to 1024")
      ->required()
      ->check(whole_number(1, kMaxProcs, "processes on this machine"));
  cmd->add_option("--master-port", a->master_port, "Rank 0's port on 127.0.0.1, 1 to 65535 (default: a free one)")
      ->check(whole_number(1, 65535, "a TCP port; leave the option out for a free one"));
  cmd->add_option("--grace", a->grace, "Seconds the others get to stop on their own after one fails (0 to 86400)")
      ->capture_default_str()
      ->check(seconds_up_to(kMaxGrace));
  // Everything from the first word that is not one of these options is the command, passed on untouched.
  cmd->prefix_command();
  cmd->allow_extras();
  cmd->callback([a, exit_code, cmd] {
    for (const auto& extra : cmd->remaining()) a->command.push_back(extra);
    *exit_code = run(*a, option_names(*cmd));
  });
}

}  // namespace trainsim::apps
