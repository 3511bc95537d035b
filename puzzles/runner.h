// Runs a puzzle in the simulator and judges it: correctness, Timesteps and peak memory against targets.
#pragma once

#include <string>

#include <optional>

#include "puzzles/catalog.h"
#include "schedules/schedule.h"
#include "sim/trace.h"

namespace trainsim::puzzles {

/// One tensor resident at the memory peak, with its size in the cost model's unit.
struct ResidentTensor {
  std::string name;  ///< as the ledger names it: "W0", "A2{0-3}", "dW1{0}"
  double size = 0;
};

/// A rank left waiting when a run stopped (a deadlock): where its timeline is marked.
struct BlockedRank {
  int rank = 0;
  Time since = 0;
  std::string what;  ///< "receive (file:line): waiting for a message from rank 1"
};

/// Outcome of one puzzle run.
struct PuzzleResult {
  std::string name;
  bool correct = false;     ///< ran to the end without error and passed Model::check
  std::string error;        ///< the first error, empty when correct
  Time timesteps = 0;       ///< start of the last op (the puzzles' "Timesteps")
  Time makespan = 0;        ///< end of the last op
  MemoryPeak peak;          ///< highest memory sample, with its rank and time
  double target_time = 0;
  double target_memory = 0;
  bool time_ok = false;     ///< floor(Timesteps) <= target_time
  bool memory_ok = false;   ///< peak <= target_memory
  std::vector<ResidentTensor> peak_resident;  ///< what the peak rank held when its peak op started
  std::string peak_op;      ///< the op that started at the peak, with its source line
  std::vector<BlockedRank> blocked;  ///< ranks left waiting when the run stopped (a deadlock)
  Trace trace;              ///< everything executed (up to the error, if any)
  /// The recorded schedule, when asked for: the whole run's when correct, else what ran up to the error.
  std::optional<Schedule> schedule;

  /// True when the run completed (no error): only then are its targets judged.
  bool completed() const { return error.empty(); }
  /// Correct and within both targets.
  bool passed() const { return correct && time_ok && memory_ok; }
};

/// Runs `puzzle`'s reference solution, or its exercise when `exercise` is true. Never throws for a broken
/// program: the error goes into the result.
/// With `record`, also records the run's Schedule (schedules/recorder.h).
PuzzleResult run_puzzle(const Puzzle& puzzle, bool exercise = false, bool record = false);

/// Runs an arbitrary program on a puzzle's configuration (tests use it for broken programs).
PuzzleResult run_program(const Puzzle& puzzle, Program program, bool record = false);

}  // namespace trainsim::puzzles
