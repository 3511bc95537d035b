// Figures of a run built while the simulator runs it, without a trace: at 16,384 ranks a trace holds a copy of
// every op (gigabytes), while a report needs a few numbers per rank (the hardware report: hardware/report.h).
#pragma once

#include <span>

#include "sim/cost_model.h"
#include "sim/op.h"
#include "sim/time.h"

namespace trainsim {

/// A timed op of a rank as it ran, without the op: its place in the rank's program, its kind, when it ran and the
/// memory resident on the rank as it started (cost model unit).
struct RanOp {
  int index = 0;  ///< position in the rank's program (0-based; loads, frees and accumulates count)
  OpKind kind = OpKind::Forward;
  Time start = 0;
  Time end = 0;
  double memory = 0;
};

/// What is resident on a rank at one instant, by kind (cost model unit): the split of its highest memory sample.
struct MemoryByKind {
  double weights = 0;      ///< W: weights (whole, shards, TP slices; gathered copies too)
  double grads = 0;        ///< dW: weight grads
  double optimizer = 0;    ///< O: optimizer state (master weights and moments)
  double activations = 0;  ///< A and dA: activations (with the saved activations they hold) and their grads
  double workspace = 0;    ///< what the op starting then holds inside itself (CostModel::workspace)
  Time time = 0;           ///< when (the first op at the rank's peak starts)
  double total() const { return weights + grads + optimizer + activations + workspace; }
};

/// What a caller sees of a run (SimOptions::observer; the stream engine calls it, the puzzle engine does not).
/// The calls come in this order: begin; issued for every op of rank 0 in program order, then of rank 1, ...; once
/// the run is timed, ran (or mirrored) for rank 0, 1, ... A run the engine starts again (schedules/stream_sim.h) calls begin
/// again.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  /// A run of `world_size` ranks, timed with `cost`, begins: forget any earlier one.
  virtual void begin(int world_size, const CostModel& cost) = 0;
  /// The next op of rank `rank`, as it is issued.
  virtual void issued(int rank, const Op& op) = 0;
  /// Rank `rank`'s timed ops that ran, in program order (only those of a run that was timed).
  virtual void ran(int rank, std::span<const RanOp> ops) = 0;
  /// The split of rank `rank`'s highest memory sample (the first op at it), just before ran() for the rank.
  virtual void peak(int rank, const MemoryByKind& at_peak) { (void)rank, (void)at_peak; }
  /// Symmetric simulation (SimOptions::mirror): rank `rank` was not simulated and runs as rank `representative`
  /// (a lower rank, already seen by ran()): its figures are the representative's. Called in rank order, in
  /// place of issued, peak and ran for the rank.
  virtual void mirrored(int rank, int representative) = 0;
};

}  // namespace trainsim
