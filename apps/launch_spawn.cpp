#include "apps/launch_spawn.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

extern char** environ;

namespace trainsim::apps::launch {

namespace {

// What the child tells the launcher through its close-on-exec status pipe when it cannot exec the program
// (end of file on that pipe means the exec succeeded).
enum class Step : int { kProcessGroup, kParentDeath, kStdin, kStdout, kExec };

struct Failure {
  Step step;
  int error;
};

// Between fork and exec the child calls only async-signal-safe functions; everything it needs (argv, the
// environment) was built by the parent. It never returns.
[[noreturn]] void become_rank(char* const argv[], char* const envp[], const RankSetup& setup, int out_w, int err_w,
                              int status_w, pid_t launcher) {
  auto fail = [status_w](Step step) {
    const Failure f{step, errno};
    (void)!write(status_w, &f, sizeof f);
    _exit(127);
  };
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) sigaction(sig, &dfl, nullptr);
  sigprocmask(SIG_SETMASK, &setup.mask, nullptr);
  setrlimit(RLIMIT_NOFILE, &setup.nofile);  // (lowering a soft limit back cannot fail)
  if (setpgid(0, 0) != 0) fail(Step::kProcessGroup);
  // Die with the launcher. If it died before this line, the signal will never come: check that it is still
  // the parent (otherwise this process was adopted by another).
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(Step::kParentDeath);
  if (getppid() != launcher) _exit(1);
  if (dup2(setup.null_fd, STDIN_FILENO) < 0) fail(Step::kStdin);
  if (dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0) fail(Step::kStdout);
  execvpe(argv[0], argv, envp);
  fail(Step::kExec);
  _exit(127);  // (fail does not return)
}

void close_all(std::initializer_list<int> fds) {
  for (int fd : fds)
    if (fd >= 0) close(fd);
}

}  // namespace

std::vector<std::string> environment_without(const std::vector<std::string>& names) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool ours = false;
    for (const auto& n : names) ours = ours || n == name;
    if (!ours) env.push_back(entry);
  }
  return env;
}

std::variant<Started, StartError> start_rank(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                             const RankSetup& setup) {
  int out[2] = {-1, -1}, err[2] = {-1, -1}, status[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(status, O_CLOEXEC) != 0) {
    const int e = errno;
    close_all({out[0], out[1], err[0], err[1], status[0], status[1]});
    return StartError{fmt::format("cannot make a pipe: {}", std::strerror(e)), 2};
  }
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  // The launcher's handlers must not run in the child before it has reset them: block every signal across
  // the fork; the child unblocks after resetting, the parent right after the fork.
  sigset_t all, before;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &before);
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid == 0) become_rank(args.data(), envp.data(), setup, out[1], err[1], status[1], launcher);
  const int fork_errno = errno;
  sigprocmask(SIG_SETMASK, &before, nullptr);
  close_all({out[1], err[1], status[1]});
  if (pid < 0) {
    close_all({out[0], err[0], status[0]});
    return StartError{fmt::format("cannot start a process: {}", std::strerror(fork_errno)), 2};
  }
  Failure f{};
  ssize_t n;
  while ((n = read(status[0], &f, sizeof f)) < 0 && errno == EINTR) {
  }
  close(status[0]);
  if (n == 0) return Started{pid, out[0], err[0]};  // end of file: the exec succeeded
  close_all({out[0], err[0]});
  int ignored = 0;
  while (waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof f))
    return StartError{fmt::format("the process for it ended before it could run '{}'", argv[0]), 2};
  const char* why = std::strerror(f.error);
  switch (f.step) {
    case Step::kExec:
      return StartError{fmt::format("cannot run '{}': {}", argv[0], why), f.error == ENOENT ? 127 : 126};
    case Step::kProcessGroup:
      return StartError{fmt::format("cannot give it a process group: {}", why), 2};
    case Step::kParentDeath:
      return StartError{fmt::format("cannot set its parent-death signal: {}", why), 2};
    case Step::kStdin:
      return StartError{fmt::format("cannot make /dev/null its standard input: {}", why), 2};
    case Step::kStdout:
      return StartError{fmt::format("cannot connect its output: {}", why), 2};
  }
  return StartError{"cannot start it", 2};
}

void signal_rank(pid_t pid, int sig) {
  kill(-pid, sig);
  if (getpgid(pid) != pid) kill(pid, sig);  // it moved to another process group (or session) of its own
}

}  // namespace trainsim::apps::launch
