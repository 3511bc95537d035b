// Run the trainsim binary from tests and capture what it prints.
#pragma once

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace trainsim::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  ///< standard output (standard error too when merge_stderr)
};

/// Runs a shell command line; `out` is what it writes to standard output (exit_code -1 when it could not run).
inline CommandResult run_shell(const std::string& cmd) {
  CommandResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// Runs `trainsim ARGS` (the binary built with the tests) through the shell.
inline CommandResult run_trainsim(const std::string& args, bool merge_stderr = false) {
  return run_shell(std::string(TRAINSIM_BINARY) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null"));
}

/// Whole file as bytes ("" when missing).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// Writes `text` to `p` (bytes as they are); returns the path as a string, for a command line.
inline std::string write(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

/// True when `part` occurs in `text`.
inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// A fresh empty directory under the system temp dir.
inline std::filesystem::path fresh_dir(const std::string& name) {
  // The process id keeps concurrent test runs (ctest -j, two checkouts) out of each other's way.
  auto d = std::filesystem::temp_directory_path() / ("trainsim-test-" + std::to_string(getpid()) + "-" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

/// A valid two-rank data-parallel step with the puzzle costs, for CLI tests (`.sched` text).
inline const char* kDdp = R"(trainsim-schedule 1
world_size 2
layers 1
microbatches 2
cost_model puzzle

rank 0
  load -> W0 O0 A0{0}
  forward L0 {0}
  loss {0}
  backward L0 {0}
  all-reduce L0 : dW0{0} -> dW0{0-1}
  update L0
rank 1
  load -> W0 O0 A0{1}
  forward L0 {1}
  loss {1}
  backward L0 {1}
  all-reduce L0 : dW0{1} -> dW0{0-1}
  update L0
)";

}  // namespace trainsim::testing
