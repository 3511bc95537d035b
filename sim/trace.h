// The record of a simulated run: every op each rank executed, with its start, end and the memory
// resident when it started.
#pragma once

#include <string>
#include <vector>

#include "sim/op.h"
#include "sim/time.h"

namespace trainsim {

/// One executed op.
struct OpRun {
  Op op;
  Time start = 0;     ///< when the op began (collectives: after every member arrived)
  Time end = 0;       ///< start + duration
  double memory = 0;  ///< memory resident on the rank when the op started (cost model unit)
};

/// The highest memory sample of a run.
struct MemoryPeak {
  double memory = 0;
  int rank = 0;
  Time time = 0;
};

/// The figures of a run that reports print, without the ops: what `Trace` computes from its records, or
/// what an engine computes while timing when it keeps no records (`SimOptions::record_trace`).
struct RunSummary {
  Time timesteps = 0;          ///< start of the last timed op (Trace::timesteps)
  Time makespan = 0;           ///< end of the last op (Trace::makespan)
  MemoryPeak peak;             ///< highest memory sample, first strictly highest (Trace::peak)
  double bubble_fraction = 0;  ///< idle fraction of the compute time (Trace::bubble_fraction)
  std::size_t timed_ops = 0;   ///< timed ops executed over all ranks (Trace::op_count)
};

/// Everything a run executed, per rank in program order.
struct Trace {
  int world_size = 0;
  int layers = 0;
  int batches = 0;
  std::string cost_model;
  std::string memory_unit;
  std::vector<std::vector<OpRun>> ranks;

  /// Start of the last timed op over all ranks: the puzzles' "Timesteps" figure.
  Time timesteps() const;
  /// End of the last op over all ranks.
  Time makespan() const;
  /// Highest memory sample: the first strictly highest, scanning ranks in order and each rank's ops in
  /// order (the original puzzles' rule).
  MemoryPeak peak() const;
  /// Idle fraction of the compute time: 1 - (time spent in compute ops) / (world_size x makespan).
  /// With unit costs this is a pipeline's bubble fraction, (p-1)/(m+p-1) for GPipe and 1F1B.
  double bubble_fraction() const;
  /// Number of executed ops over all ranks.
  std::size_t op_count() const;
  /// The figures above in one pass.
  RunSummary summary() const;
};

/// One step of a run of several (the steps a replay measured): its trace, time zero at the step's start, and
/// where the step starts on a timeline the steps share (nanoseconds after the first step's start).
struct StepTrace {
  int step = 0;    ///< 0-based training step
  Time start = 0;  ///< the step's start on the shared timeline
  Trace trace;
};

}  // namespace trainsim
