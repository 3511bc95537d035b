// What a long command is doing, on the terminal: one status line on standard error ("trainsim gen:
// simulating 10,436,608 ops on 16,384 ranks...") for each stage of a run that can take seconds (generating,
// reading, simulating, drawing), replaced by the next and erased when the run reports. Written only when
// standard error is a terminal, so that redirected output, pipes and logs never hold it.
#pragma once

#include <cstdio>
#include <string>
#include <unistd.h>

#include <fmt/format.h>

namespace trainsim::apps {

class StageLine {
 public:
  /// Lines prefixed "`command`: " on standard error, when it is a terminal (isatty).
  explicit StageLine(std::string command) : StageLine(std::move(command), stderr, isatty(STDERR_FILENO) != 0) {}
  /// The same on `out`, shown only when `terminal` (for tests).
  StageLine(std::string command, std::FILE* out, bool terminal)
      : command_(std::move(command)), out_(out), terminal_(terminal) {}
  StageLine(const StageLine&) = delete;
  StageLine& operator=(const StageLine&) = delete;
  /// Erases the line if one is shown.
  ~StageLine() { clear(); }

  /// Shows "`command`: `what`..." in place of the line shown before.
  void show(const std::string& what) {
    if (!terminal_) return;
    fmt::print(out_, "\r\033[K{}: {}...", command_, what);
    std::fflush(out_);
    shown_ = true;
  }
  /// Erases the line (before the command prints its result).
  void clear() {
    if (!shown_) return;
    fmt::print(out_, "\r\033[K");
    std::fflush(out_);
    shown_ = false;
  }

 private:
  std::string command_;
  std::FILE* out_;
  bool terminal_;
  bool shown_ = false;
};

}  // namespace trainsim::apps
