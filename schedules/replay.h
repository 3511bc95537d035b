// Simulating a schedule: each rank runs its op list in the simulator, which validates and times it
// (DESIGN §2 checks): the tensor algebra of every op, that what an op reads is resident, that each send is
// matched by a receive of the same tensor in order, that the members of a group call the same collectives
// and agree on the tensors, deadlock with the wait-for cycle, memory over a limit, and at the end that
// every layer was updated exactly once over all its shards.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "schedules/rank_source.h"
#include "schedules/schedule.h"
#include "sim/cost_model.h"
#include "sim/run_observer.h"
#include "sim/trace.h"

namespace trainsim {

/// Settings of a schedule simulation.
struct SimOptions {
  std::optional<double> memory_limit;  ///< per-rank limit in the cost model's unit
  /// False: keep no per-op records, only `SimResult::summary` (the stream engine; the puzzle engine always
  /// records). Saves a copy of every timed op: what `gen --sim` does at 16,384 ranks.
  bool record_trace = true;
  /// When set, the stream engine times the schedule with this model instead of the one its header names
  /// (what-ifs and tests: e.g. passes of equal length; the hardware run, whose report and drawings use the same
  /// model); the puzzle engine ignores it. Not owned. The engine prepares it for each rank of a source that makes
  /// ranks when asked, as it prepares a model of its own (CostModel::prepare_rank).
  CostModel* cost = nullptr;
  /// Like memory_limit (and ignored with it), but the run goes on: the first op over it is only noted, in
  /// SimResult::over_capacity (the stream engine; the hardware model's device memory, hardware_sim.h).
  std::optional<double> memory_capacity;
  /// Sees the run's ops as the stream engine issues them and their times once it has run (sim/run_observer.h);
  /// the puzzle engine ignores it. Not owned.
  RunObserver* observer = nullptr;
  /// Called by the stream engine as it issues the ranks, with the ranks issued so far and the world size: after
  /// every 1/64 of them and after the last (what a long run shows on the terminal). Issuing is most of a run of a
  /// source that makes each rank's ops when asked.
  std::function<void(int issued, int ranks)> progress;
  /// Symmetric simulation (the stream engine; schedules/symmetry.h makes the map and says when it is exact): empty,
  /// or one entry per rank, the rank whose program and times it shares (itself for a rank that is simulated; a
  /// lower rank otherwise). Only the simulated ranks' ops are asked for and timed; a collective starts when its
  /// simulated members are ready and is timed for its whole group, and each other rank is given its
  /// representative's figures (times, memory samples, peak, the observer's calls: RunObserver::mirrored). The
  /// calls of a group with ranks not simulated are not combined (their results are not checked), and the updates
  /// are not checked for covering every layer (UpdateCheck). A send or receive with a rank not simulated is an
  /// error. Throws std::invalid_argument for a map of the wrong size or whose representatives are not simulated
  /// or not lower ranks.
  std::vector<int> mirror;
};

/// Outcome of a schedule simulation.
struct SimResult {
  bool ok = false;
  std::string error;  ///< the first problem found, naming the file:line, rank and op; empty when ok
  Trace trace;        ///< what ran, up to the problem (empty ranks when `SimOptions::record_trace` is false)
  RunSummary summary; ///< the trace's figures (makespan, bubble, peak memory...), with or without the records
  /// After a deadlock: every rank left waiting, in rank order, with when it began to wait, the op it waits
  /// in and what for (the error's report lists the first 16 of them in words); empty otherwise.
  std::vector<World::BlockedRank> blocked;
  /// The ops of the schedule over every rank, timed or not (after a problem met while the ranks were issued:
  /// those issued before it).
  std::size_t op_count = 0;
  /// With SimOptions::memory_capacity and a valid run: the first op (by time, then rank) whose memory sample is
  /// over it, in a memory-limit error's words ("rank R: memory limit exceeded at t=...; resident: ..."); else "".
  std::string over_capacity;
};

/// Simulates `schedule` with the cost model its header names. Never throws for a bad schedule: the
/// problem goes into the result. Throws std::invalid_argument for an unknown cost model.
SimResult simulate(const Schedule& schedule, const SimOptions& options = {});
/// The same for a schedule read one rank at a time (schedules/rank_source.h): the stream engine reads it so
/// (simulate_streams); the puzzle cost model's engine holds every rank's ops.
SimResult simulate(const RankSource& source, const SimOptions& options = {});

}  // namespace trainsim
