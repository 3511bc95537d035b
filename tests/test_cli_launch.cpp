// `trainsim launch` with small shell commands as its ranks (fast, and independent of the replay): the
// messages, the exit codes, stopping the ranks (on a failure, on a signal to the launcher, when the launcher
// is killed or cannot start them all), the forwarding of their output, what the ranks inherit, and the range
// checks of the options. Waits are bounded generously; no test asserts a duration except where noted.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_helpers.h"
#include "launch_helpers.h"

using namespace trainsim::testing;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// The launcher's arguments: `launch OPTIONS -- sh -c SCRIPT`.
std::vector<std::string> launch_sh(const std::vector<std::string>& options, const std::string& script) {
  std::vector<std::string> args{"launch"};
  args.insert(args.end(), options.begin(), options.end());
  for (const char* a : {"--", "sh", "-c"}) args.push_back(a);
  args.push_back(script);
  return args;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// A launcher run to its end with its stdout and stderr in files of `dir`.
struct Run {
  Launcher launcher;
  std::string out, err;
  bool in_time = false;
};

Run run_launch(const std::vector<std::string>& args, const fs::path& dir, LaunchIo io = {},
               std::chrono::duration<double> limit = 120s) {
  if (io.out.empty() && io.stdout_fd < 0) io.out = dir / "out.txt";
  io.err = dir / "err.txt";
  Run r;
  r.launcher = start_launch(args, io);
  r.in_time = wait_launcher(r.launcher, limit);
  if (!io.out.empty()) r.out = slurp(io.out);
  r.err = slurp(io.err);
  return r;
}

}  // namespace

TEST_CASE("launch: a rank that exits with a code is named exactly, the others are stopped, the job exits with it") {
  OrphanCatcher catcher;
  const fs::path dir = fresh_dir("launch-code");
  Run r = run_launch(launch_sh({"--nproc", "2", "--grace", "0.5"}, "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 300"),
                     dir);
  INFO(r.err);
  CHECK(r.in_time);
  CHECK(r.launcher.exit_code == 3);
  CHECK(r.out.empty());
  CHECK(lines_of(r.err) == std::vector<std::string>{
                               "trainsim launch: rank 1 exited with code 3; the other ranks get 0.5 s to stop on their own",
                               "trainsim launch: the grace of 0.5 s is over: stopping rank(s) 0 (SIGTERM, SIGKILL 5 s later)"});
  CHECK(catcher.survivors(10s).empty());
  fs::remove_all(dir);
}

TEST_CASE("launch: a job whose ranks all succeed exits 0, lines are prefixed on their own stream, the variables") {
  const fs::path dir = fresh_dir("launch-ok");
  Run r = run_launch(launch_sh({"--nproc", "3"}, "echo \"out $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR\"; "
                                                 "echo \"port $MASTER_PORT token $TRAINSIM_TOKEN\"; echo \"err $RANK\" >&2"),
                     dir);
  INFO(r.out, r.err);
  CHECK(r.launcher.exit_code == 0);
  const auto out = lines_of(r.out), err = lines_of(r.err);
  std::set<std::string> ports;
  for (int q = 0; q < 3; ++q) {
    CHECK(std::count(out.begin(), out.end(), fmt::format("[rank {}] out {} 3 {} 3 127.0.0.1", q, q, q)) == 1);
    CHECK(std::count(err.begin(), err.end(), fmt::format("[rank {}] err {}", q, q)) == 1);
    for (const auto& l : out)
      if (l.rfind(fmt::format("[rank {}] port ", q), 0) == 0) ports.insert(l.substr(9));
  }
  REQUIRE(ports.size() == 1);  // the same port and token for every rank
  const std::string p = *ports.begin();
  const auto token = p.substr(p.find(" token ") + 7);
  CHECK(token.size() == 32);
  CHECK(token.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(err.size() == 3);  // nothing from the launcher itself
  fs::remove_all(dir);
}

TEST_CASE("launch: with several failures the first one's code is the job's") {
  OrphanCatcher catcher;
  const fs::path dir = fresh_dir("launch-first");
  // Rank 1 exits only once rank 0 has ended and been reaped (kill -0 succeeds on a zombie).
  const std::string r0 = (dir / "r0").string();
  Run r = run_launch(
      launch_sh({"--nproc", "2", "--grace", "30"},
                fmt::format("if [ \"$RANK\" = 0 ]; then echo $$ > {0}.tmp; mv {0}.tmp {0}; exit 3; fi; "
                            "while [ ! -e {0} ]; do sleep 0.05; done; while kill -0 $(cat {0}) 2>/dev/null; do sleep 0.05; done; exit 5",
                            r0)),
      dir);
  INFO(r.err);
  CHECK(r.launcher.exit_code == 3);
  CHECK(r.err.rfind("trainsim launch: rank 0 exited with code 3", 0) == 0);
  CHECK(r.err.find("rank 1") == std::string::npos);  // a later failure is not announced
  CHECK(catcher.survivors(10s).empty());
  fs::remove_all(dir);
}

TEST_CASE("launch: ranks already started are stopped when the next one cannot start (no descriptors left)") {
  OrphanCatcher catcher;
  const fs::path dir = fresh_dir("launch-nofile");
  LaunchIo io;
  io.nofile = 24;  // a few ranks' pipes fit, not 64 ranks'
  Run r = run_launch(launch_sh({"--nproc", "64"}, "exec sleep 300"), dir, io);
  INFO(r.err);
  CHECK(r.in_time);
  CHECK(r.launcher.exit_code == 2);  // the launcher could not start the job
  const auto err = lines_of(r.err);
  REQUIRE(err.size() >= 2);
  int k = -1;
  CHECK(std::sscanf(err[0].c_str(), "trainsim launch: cannot start rank %d of 64", &k) == 1);
  CHECK(k >= 1);  // some ranks were running when it failed
  CHECK(err[0] == fmt::format("trainsim launch: cannot start rank {} of 64: cannot make a pipe: Too many open files (the "
                              "launcher keeps 2 descriptors per rank; see `ulimit -n`)",
                              k));
  CHECK(err[1] == fmt::format("trainsim launch: stopping the {} rank(s) already started", k));
  // Every rank started was ended and reaped before the launcher exited: nothing is left to adopt.
  CHECK(catcher.survivors(10s).empty());
  fs::remove_all(dir);
}

TEST_CASE("launch: a low soft limit of descriptors is raised for the launcher, not for the ranks") {
  const fs::path dir = fresh_dir("launch-softlimit");
  LaunchIo io;
  io.nofile = 40, io.nofile_hard = 4096;  // 64 ranks need 128 descriptors in the launcher
  Run r = run_launch(launch_sh({"--nproc", "64"}, "ulimit -n"), dir, io);
  INFO(r.err);
  CHECK(r.launcher.exit_code == 0);
  const auto out = lines_of(r.out);
  CHECK(out.size() == 64);
  CHECK(std::all_of(out.begin(), out.end(), [](const std::string& l) { return l.size() > 3 && l.substr(l.size() - 3) == " 40"; }));
  fs::remove_all(dir);
}

TEST_CASE("launch: the ranks die with the launcher when it is killed (SIGKILL)") {
  OrphanCatcher catcher;
  const fs::path dir = fresh_dir("launch-killed");
  Launcher l = start_launch(launch_sh({"--nproc", "3"}, fmt::format("echo > {}/$RANK.ready; exec sleep 300", dir.string())),
                            {dir / "out.txt", dir / "err.txt"});
  REQUIRE(wait_for_files({dir / "0.ready", dir / "1.ready", dir / "2.ready"}, 60s));
  kill(l.pid, SIGKILL);
  wait_launcher(l, 60s);
  CHECK(l.exit_code == 128 + SIGKILL);
  // The ranks, orphaned, are adopted by this process; their parent-death signal ends them.
  CHECK(catcher.survivors(30s).empty());
  fs::remove_all(dir);
}

TEST_CASE("launch: SIGINT (Ctrl-C) and SIGTERM to the launcher stop every rank, and what they started, exit 130 and 143") {
  for (int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    OrphanCatcher catcher;
    const fs::path dir = fresh_dir("launch-sig");
    // Each rank is a shell waiting for a process it started (in the rank's process group).
    Launcher l = start_launch(
        launch_sh({"--nproc", "3"}, fmt::format("sleep 300 & echo > {}/$RANK.ready; wait", dir.string())),
        {dir / "out.txt", dir / "err.txt"});
    REQUIRE(wait_for_files({dir / "0.ready", dir / "1.ready", dir / "2.ready"}, 60s));
    kill(l.pid, sig);
    CHECK(wait_launcher(l, 60s));
    const std::string err = slurp(dir / "err.txt");
    INFO(err);
    CHECK(l.exit_code == 128 + sig);
    CHECK(lines_of(err) == std::vector<std::string>{fmt::format("trainsim launch: got signal {} ({}): stopping rank(s) 0-2 "
                                                                "(SIGTERM, SIGKILL 5 s later)",
                                                                sig, strsignal(sig))});
    CHECK(catcher.survivors(10s).empty());
    fs::remove_all(dir);
  }
}

TEST_CASE("launch: a second Ctrl-C kills the ranks that ignore SIGTERM at once") {
  OrphanCatcher catcher;
  const fs::path dir = fresh_dir("launch-sig2");
  Launcher l = start_launch(launch_sh({"--nproc", "1"}, fmt::format("trap '' TERM; echo > {}/ready; while :; do sleep 1; done",
                                                                    dir.string())),
                            {dir / "out.txt", dir / "err.txt"});
  REQUIRE(wait_for_files({dir / "ready"}, 60s));
  kill(l.pid, SIGINT);
  const std::string first = "trainsim launch: got signal 2 (Interrupt): stopping rank(s) 0 (SIGTERM, SIGKILL 5 s later)\n";
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (slurp(dir / "err.txt") != first && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);  // polling for the launcher's message, not synchronising
  kill(l.pid, SIGINT);
  CHECK(wait_launcher(l, 60s));
  CHECK(l.exit_code == 130);
  const std::string err = slurp(dir / "err.txt");
  // (the SIGKILL 5 s after SIGTERM may come first on a very slow machine: then there is no second signal to act on)
  CHECK((err == first + "trainsim launch: got signal 2 (Interrupt) again: killing rank(s) 0 (SIGKILL)\n" ||
         err == first + "trainsim launch: rank(s) 0 still running 5 s after SIGTERM: SIGKILL\n"));
  CHECK(catcher.survivors(10s).empty());
  fs::remove_all(dir);
}

TEST_CASE("launch: what a rank leaves running in its process group ends with it") {
  OrphanCatcher catcher;
  const fs::path dir = fresh_dir("launch-leftover");
  Run r = run_launch(launch_sh({"--nproc", "2"}, "sleep 300 & echo started"), dir, {}, 60s);
  CHECK(r.in_time);  // (the background sleep holds the rank's stdout open: the launcher does not wait for it)
  CHECK(r.launcher.exit_code == 0);
  CHECK(lines_of(r.out).size() == 2);
  CHECK(catcher.survivors(10s).empty());
  fs::remove_all(dir);
}

TEST_CASE("launch: a process that left a rank's process group cannot keep the launcher reading its output") {
  OrphanCatcher catcher;  // (it is not ended by the launcher: this ends it)
  const fs::path dir = fresh_dir("launch-escaped");
  const std::string ready = (dir / "ready").string();
  Run r = run_launch(launch_sh({"--nproc", "1"}, fmt::format("setsid sh -c 'echo > {0}; exec sleep 300' & "
                                                             "while [ ! -e {0} ]; do sleep 0.05; done; echo x",
                                                             ready)),
                     dir, {}, 120s);
  CHECK(r.in_time);
  CHECK(r.launcher.exit_code == 0);
  CHECK(r.out == "[rank 0] x\n");
  CHECK(r.err ==
        "trainsim launch: rank 0's stdout and stderr are still open 5 s after it ended (a process it started, outside "
        "its process group, holds it): not reading on\n");
  fs::remove_all(dir);
}

TEST_CASE("launch: started with its stdout closed, the launcher does not hand that descriptor to a rank's pipe") {
  const fs::path dir = fresh_dir("launch-nostdout");
  LaunchIo io;
  io.close_stdout = true;
  Run r = run_launch(launch_sh({"--nproc", "2"}, "echo out; echo err >&2"), dir, io);
  INFO(r.err);
  CHECK(r.launcher.exit_code == 0);
  auto err = lines_of(r.err);
  std::sort(err.begin(), err.end());
  CHECK(err == std::vector<std::string>{"[rank 0] err", "[rank 1] err"});  // (not "echo: I/O error")
  fs::remove_all(dir);
}

TEST_CASE("launch: a rank that ignores SIGTERM is killed 5 s later") {
  OrphanCatcher catcher;
  const fs::path dir = fresh_dir("launch-stubborn");
  const std::string ready = (dir / "ready").string();
  Run r = run_launch(launch_sh({"--nproc", "2", "--grace", "0"},
                               fmt::format("if [ \"$RANK\" = 1 ]; then while [ ! -e {0} ]; do sleep 0.05; done; exit 2; fi; "
                                           "trap '' TERM; echo > {0}; while :; do sleep 1; done",
                                           ready)),
                     dir);
  INFO(r.err);
  CHECK(r.launcher.exit_code == 2);
  CHECK(r.err.find("trainsim launch: rank(s) 0 still running 5 s after SIGTERM: SIGKILL\n") != std::string::npos);
  CHECK(catcher.survivors(10s).empty());
  fs::remove_all(dir);
}

TEST_CASE("launch: 64 MiB without a newline comes out whole, in prefixed pieces of 64 KiB, in bounded memory") {
  const fs::path dir = fresh_dir("launch-noline");
  Run small = run_launch(launch_sh({"--nproc", "1"}, "echo hi"), dir);
  REQUIRE(small.launcher.exit_code == 0);
  Run big = run_launch(launch_sh({"--nproc", "1"}, "head -c 67108864 /dev/zero | tr '\\000' x"), dir);
  INFO(big.err);
  CHECK(big.launcher.exit_code == 0);
  CHECK(big.err.empty());
  const auto lines = lines_of(big.out);
  CHECK(lines.size() == 1024);
  std::size_t xs = 0;
  bool shape = true;
  for (const auto& l : lines) {
    shape = shape && l.rfind("[rank 0] ", 0) == 0 && l.size() == 9 + 65536 && l.find_first_not_of('x', 9) == std::string::npos;
    xs += l.size() - 9;
  }
  CHECK(shape);
  CHECK(xs == 67108864);
  // The launcher held at most a piece or two; without the bound it held all 64 MiB, and more.
  MESSAGE("peak RSS: " << small.launcher.max_rss_kib << " KiB for one line, " << big.launcher.max_rss_kib << " KiB for 64 MiB");
  CHECK(big.launcher.max_rss_kib < small.launcher.max_rss_kib + 16 * 1024);
  fs::remove_all(dir);
}

TEST_CASE("launch: a long line is cut before a UTF-8 sequence, not inside one, a line of 64 KiB stays whole") {
  const fs::path dir = fresh_dir("launch-utf8");
  Run r = run_launch(launch_sh({"--nproc", "1"}, "head -c 65536 /dev/zero | tr '\\000' a; echo; "
                                                 "head -c 65535 /dev/zero | tr '\\000' b; printf '\\303\\251yz'"),
                     dir);
  CHECK(r.launcher.exit_code == 0);
  CHECK(lines_of(r.out) == std::vector<std::string>{"[rank 0] " + std::string(65536, 'a'),
                                                    "[rank 0] " + std::string(65535, 'b'), "[rank 0] \xc3\xa9yz"});
  fs::remove_all(dir);
}

TEST_CASE("launch: a rank that closes its output and runs on does not slow the others' output") {
  const fs::path dir = fresh_dir("launch-closed");
  const std::string done = (dir / "done").string();
  const auto t0 = std::chrono::steady_clock::now();
  LaunchIo io;
  io.out = "/dev/null";
  Run r = run_launch(
      launch_sh({"--nproc", "2"},
                fmt::format("if [ \"$RANK\" = 0 ]; then exec >&- 2>&-; while [ ! -e {0} ]; do sleep 0.05; done; exit 4; fi; "
                            "yes 0123456789 | head -c 33554432; echo > {0}",
                            done)),
      dir, io, 300s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.err);
  CHECK(r.launcher.exit_code == 4);
  CHECK(r.err.rfind("trainsim launch: rank 0 exited with code 4", 0) == 0);
  // 32 MiB through the launcher takes well under a few seconds even on a loaded machine. The launcher used to
  // wait 200 ms per 64 KiB read while a rank had closed its output but not ended (over 100 s here).
  CHECK(took < 60);
  fs::remove_all(dir);
}

TEST_CASE("launch: each rank gets /dev/null as stdin, its own pipes as stdout and stderr, and no other descriptor") {
  const fs::path dir = fresh_dir("launch-fds");
  int in[2];
  REQUIRE(pipe(in) == 0);  // the launcher's stdin: a pipe that never ends (the ranks must not read it)
  LaunchIo io;
  io.stdin_fd = in[0];
  Run r = run_launch(launch_sh({"--nproc", "3"}, "cat; ls -l /proc/$$/fd"), dir, io, 60s);
  close(in[0]);
  close(in[1]);
  INFO(r.out, r.err);
  CHECK(r.in_time);
  CHECK(r.launcher.exit_code == 0);
  std::map<int, std::map<int, std::string>> fds;  // rank -> fd -> target
  for (const auto& l : lines_of(r.out)) {
    int rank = -1;
    const auto arrow = l.find(" -> ");
    if (std::sscanf(l.c_str(), "[rank %d]", &rank) != 1 || arrow == std::string::npos) continue;
    const auto space = l.rfind(' ', arrow - 1);
    fds[rank][std::stoi(l.substr(space + 1, arrow - space - 1))] = l.substr(arrow + 4);
  }
  REQUIRE(fds.size() == 3);
  std::set<std::string> pipes;
  for (auto& [rank, m] : fds) {
    CAPTURE(rank);
    std::vector<int> numbers;
    for (const auto& [fd, target] : m) numbers.push_back(fd);
    CHECK(numbers == std::vector<int>{0, 1, 2});
    CHECK(m[0] == "/dev/null");
    CHECK(m[1].rfind("pipe:", 0) == 0);
    CHECK(m[2].rfind("pipe:", 0) == 0);
    pipes.insert(m[1]), pipes.insert(m[2]);
  }
  CHECK(pipes.size() == 6);
  fs::remove_all(dir);
}

TEST_CASE("launch: a closed stdout of the launcher is reported once, the job runs on and its stderr still comes out") {
  OrphanCatcher catcher;
  const fs::path dir = fresh_dir("launch-epipe");
  int p[2];
  REQUIRE(pipe(p) == 0);
  close(p[0]);  // nobody reads the launcher's stdout
  LaunchIo io;
  io.stdout_fd = p[1];
  Run r = run_launch(launch_sh({"--nproc", "2"}, "i=0; while [ $i -lt 3000 ]; do echo line $i; i=$((i+1)); done; echo finished >&2"),
                     dir, io);
  close(p[1]);
  INFO(r.err);
  CHECK(r.launcher.exit_code == 0);
  const auto err = lines_of(r.err);
  CHECK(std::count(err.begin(), err.end(),
                   "trainsim launch: cannot write to standard output (Broken pipe); the ranks' standard output is dropped "
                   "from here on") == 1);
  CHECK(std::count(err.begin(), err.end(), "[rank 0] finished") == 1);
  CHECK(std::count(err.begin(), err.end(), "[rank 1] finished") == 1);
  CHECK(err.size() == 3);
  CHECK(catcher.survivors(10s).empty());
  fs::remove_all(dir);
}

TEST_CASE("launch: the ranks get SIGPIPE at its default (the launcher ignores it for itself)") {
  const fs::path dir = fresh_dir("launch-sigpipe");
  Run r = run_launch(launch_sh({"--nproc", "1"}, "yes | head -n 1"), dir);
  CHECK(r.launcher.exit_code == 0);
  CHECK(r.out == "[rank 0] y\n");
  CHECK(r.err == "");  // not "yes: standard output: Broken pipe"
  fs::remove_all(dir);
}

TEST_CASE("launch: a program that cannot run is named, nothing else starts (exit 127, 126)") {
  const fs::path dir = fresh_dir("launch-noexec");
  Run missing = run_launch({"launch", "--nproc", "3", "--", "/nonexistent/trainsim-test-program", "x"}, dir);
  CHECK(missing.launcher.exit_code == 127);
  CHECK(missing.err ==
        "trainsim launch: cannot start rank 0 of 3: cannot run '/nonexistent/trainsim-test-program': No such file or "
        "directory\n");
  CHECK(missing.out.empty());
  const fs::path script = dir / "not-executable";
  { std::ofstream(script) << "#!/bin/sh\necho ran\n"; }
  fs::permissions(script, fs::perms::owner_read | fs::perms::owner_write);
  Run denied = run_launch({"launch", "--nproc", "2", "--", script.string()}, dir);
  CHECK(denied.launcher.exit_code == 126);
  CHECK(denied.err ==
        fmt::format("trainsim launch: cannot start rank 0 of 2: cannot run '{}': Permission denied\n", script.string()));
  fs::remove_all(dir);
}

TEST_CASE("launch: options out of range are refused with a message naming the sub-command (exit 2), nothing starts") {
  const fs::path dir = fresh_dir("launch-options");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc", "2000000000"}, "--nproc: expected a whole number from 1 to 1024 (processes on this machine), got '2000000000'"},
      {{"--nproc", "0"}, "--nproc: expected a whole number from 1 to 1024 (processes on this machine), got '0'"},
      {{"--nproc=-3"}, "--nproc: expected a whole number from 1 to 1024 (processes on this machine), got '-3'"},
      {{"--nproc", "1025"}, "--nproc: expected a whole number from 1 to 1024 (processes on this machine), got '1025'"},
      {{"--nproc", "2.5"}, "--nproc: expected a whole number from 1 to 1024 (processes on this machine), got '2.5'"},
      {{"--nproc", "2", "--grace", "nan"}, "--grace: expected a number of seconds from 0 to 86400, got 'nan'"},
      {{"--nproc", "2", "--grace=-1"}, "--grace: expected a number of seconds from 0 to 86400, got '-1'"},
      {{"--nproc", "2", "--grace", "inf"}, "--grace: expected a number of seconds from 0 to 86400, got 'inf'"},
      {{"--nproc", "2", "--grace", "1e300"}, "--grace: expected a number of seconds from 0 to 86400, got '1e300'"},
      {{"--nproc", "2", "--master-port", "70000"},
       "--master-port: expected a whole number from 1 to 65535 (a TCP port; leave the option out for a free one), got '70000'"},
      {{"--nproc", "2", "--master-port", "0"},
       "--master-port: expected a whole number from 1 to 65535 (a TCP port; leave the option out for a free one), got '0'"},
  };
  for (const auto& [options, message] : cases) {
    CAPTURE(message);
    Run r = run_launch(launch_sh(options, "echo started"), dir);
    CHECK(r.launcher.exit_code == 2);
    CHECK(r.out.empty());
    const auto err = lines_of(r.err);
    REQUIRE(!err.empty());
    CHECK(err[0] == "trainsim launch: " + message);
  }
  // A mistyped option after a valid one would be the first word of the command: it is refused, not run.
  {
    Run typo = run_launch(launch_sh({"--nproc", "2", "--grce", "1"}, "echo started"), dir);
    CHECK(typo.launcher.exit_code == 2);
    CHECK(typo.out.empty());
    const auto err = lines_of(typo.err);
    REQUIRE(!err.empty());
    CHECK(err[0] == "trainsim launch: unknown option '--grce': did you mean --grace?; the command to run comes after the "
                    "options (trainsim launch --nproc N -- COMMAND ...)");
  }
  // The edges are accepted.
  Run r = run_launch(launch_sh({"--nproc", "1", "--master-port", "65535", "--grace", "0"}, "echo $MASTER_PORT"), dir);
  CHECK(r.launcher.exit_code == 0);
  CHECK(r.out == "[rank 0] 65535\n");
  fs::remove_all(dir);
}
