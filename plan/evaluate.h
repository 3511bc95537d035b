// One candidate of a plan (plan/search.h) simulated as a real schedule: gen 3d's ops, the hardware cost model,
// one representative rank per pipeline stage where the configuration is symmetric (schedules/symmetry.h: the
// full simulation's figures exactly), and the figures `gen --sim --json` reports. Also the two closed-form bounds
// the planner prunes with before simulating, both provably below what the simulation gives (docs/planning.md,
// "Pruning"; tests/test_plan.cpp checks them against simulated candidates).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "plan/search.h"
#include "sim/cost_model.h"
#include "sim/run_observer.h"
#include "sim/trace.h"

namespace trainsim::plan {

/// A simulated candidate's figures (units: seconds, bytes, tokens).
struct Evaluation {
  /// "": simulated, within memory; "out_of_memory": simulated, over the device's usable memory; "invalid": the
  /// generator refused the configuration (`error` says why, e.g. DualPipeV with fewer than 2 x pp microbatches).
  std::string outcome;
  std::string error;
  double step_time_s = 0, tokens_per_s_per_gpu = 0, mfu = 0, bubble_fraction = 0, exposed_comm_share = 0;
  double peak_memory_bytes = 0;  ///< the heaviest rank's peak
  int peak_memory_rank = 0;
  MemoryByKind peak_breakdown;   ///< that rank's peak by kind
  std::vector<double> stage_peak_bytes;  ///< each pipeline stage's heaviest rank's peak (StepReport::stages)
  int simulated_ranks = 0;       ///< ranks simulated (one per stage when symmetric)
  long long ops = 0;             ///< ops of the whole step
  bool simulated() const { return outcome != "invalid"; }
};

/// Generates and simulates `c` on `r`'s device and network. Never throws for a configuration the generator
/// refuses (outcome "invalid").
Evaluation evaluate(const Candidate& c, const PlanRequest& r);

/// A candidate's step as a timeline draws it: one pipeline replica with TP collapsed, i.e. the first rank of each
/// stage (the representatives of the symmetric simulation), row s being stage s; and the cost model that timed it.
struct ReplicaTrace {
  Trace trace;
  std::unique_ptr<CostModel> cost;
};
/// Simulates `c` again keeping its trace (ReplicaTrace). Throws std::invalid_argument when the generator refuses it.
ReplicaTrace replica_trace(const Candidate& c, const PlanRequest& r);

/// A lower bound on the heaviest rank's peak memory, bytes, from closed forms: for each pipeline rank, its
/// chunks' weights (sharded over DP with FSDP) and optimizer state (sharded with ZeRO-1 and FSDP) as the hardware
/// model sizes them (hardware/memory.h), plus one microbatch's saved activations of its blocks (every schedule
/// holds a microbatch's activations from its forward to its backward), the largest over the ranks. Grads,
/// gathered weights, in-flight microbatches beyond one and workspaces are left out, so the simulated peak is at
/// least this.
double memory_lower_bound(const Candidate& c, const PlanRequest& r);

/// A lower bound on the step time, seconds, from compute alone: the step's model FLOPs, plus the forward FLOPs
/// of the blocks that full recomputation runs again, over every GPU at the device's peak (FP8's for FP8 linear
/// layers): the time at 100 % utilisation with no bubble and no communication.
double time_lower_bound(const Candidate& c, const PlanRequest& r);

}  // namespace trainsim::plan
