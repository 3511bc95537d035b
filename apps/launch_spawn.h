// `trainsim launch`: starting one rank's process and signalling it.
//
// Each rank runs in a process group of its own (so that stopping it also stops what it started, and Ctrl-C
// at the terminal reaches only the launcher, which stops the ranks in order), with SIGKILL as its parent-death
// signal (so that it dies with the launcher, even when the launcher is killed with SIGKILL), standard input
// from /dev/null, its stdout and stderr on pipes to the launcher, and no other descriptor the launcher opened
// (they are all close-on-exec; what the launcher itself inherited is passed on, as a shell does). SIGPIPE and the signals the launcher handles are at
// their defaults again in the rank, and its signal mask is the launcher's original one.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <signal.h>

#include <string>
#include <variant>
#include <vector>

namespace trainsim::apps::launch {

/// A started rank: its process id (also its process group's id) and the read ends of its stdout and stderr
/// pipes (close-on-exec; the caller closes them).
struct Started {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
};

/// Why a rank could not start: `what` says so in words ("cannot make a pipe: Too many open files", "cannot
/// run 'prog': No such file or directory"); `exit_code` is the launcher's (127: the program was not found,
/// 126: it could not be run, 2: the launcher could not start it: out of descriptors, processes...).
struct StartError {
  std::string what;
  int exit_code = 2;
};

/// What every rank gets from the launcher besides its command and environment.
struct RankSetup {
  sigset_t mask;   ///< its signal mask (the launcher's original one)
  rlimit nofile;   ///< its RLIMIT_NOFILE (the launcher's original one: the launcher may have raised its own)
  int null_fd;     ///< /dev/null open for reading, its stdin (opened once, so that the child needs no descriptor)
};

/// Starts `argv` (argv[0] is the program: a path, or a name looked up in PATH) with exactly the environment
/// `env` ("NAME=value" entries). Returns once the program is running (its exec succeeded) or did not start;
/// a child that failed to start has been reaped.
std::variant<Started, StartError> start_rank(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                             const RankSetup& setup);

/// Sends `sig` to the rank's process group, and to the rank itself if it left that group. The rank must not
/// have been reaped yet (its process id is still its own).
void signal_rank(pid_t pid, int sig);

/// The launcher's environment without the variables in `names` ("RANK", ...), as "NAME=value" entries.
std::vector<std::string> environment_without(const std::vector<std::string>& names);

}  // namespace trainsim::apps::launch
