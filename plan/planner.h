// The planner's driver and ranking (issue 34; docs/planning.md): enumerate a request's candidates (plan/search.h),
// prune only what provably cannot win (the closed-form memory bound over the device's usable memory; a compute-only
// step-time bound above the top rows' simulated times), simulate the rest on every core (plan/evaluate.h) and rank
// them. Deterministic: the candidates are cut into fixed batches and the dominance threshold changes only between
// batches, so the same request gives the same rows, byte for byte, on any number of threads.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "plan/evaluate.h"
#include "plan/search.h"

namespace trainsim::plan {

/// A simulated candidate.
struct PlanRow {
  Candidate candidate;
  Evaluation eval;
  double memory_bound_bytes = 0;  ///< memory_lower_bound
  double time_bound_s = 0;        ///< time_lower_bound
  bool fits() const { return eval.outcome.empty(); }
};

/// A plan's answer.
struct PlanResult {
  long long combinations = 0;  ///< every combination of the search space's knobs
  /// Combinations not simulated or not ranked, by reason: indivisible, tp_across_nodes, redundant (enumerate),
  /// memory_bound (the closed-form memory bound above the usable memory), dominated (the compute-only time bound
  /// above the top rows' simulated step times), out_of_memory (simulated, over the usable memory), invalid (the
  /// generator refused it).
  std::map<std::string, long long> rejected;
  /// Every simulated candidate, best first: those that fit by tokens/s per GPU (ties: lower peak memory, then
  /// enumeration order), then those out of memory by peak memory.
  std::vector<PlanRow> rows;
  long long simulated = 0;  ///< rows.size() plus the invalid ones
  std::string first_invalid;  ///< why the generator refused the first invalid candidate (in simulation order), or ""
};

/// Candidates per batch of the driver: the dominance threshold is updated between batches (a fixed number, so
/// the result does not depend on the thread count).
inline constexpr std::size_t kPlanBatch = 256;

/// Runs the plan for `r` on `threads` threads (0: every core). `progress(done, total)` is called from the calling
/// thread after each batch and at the end (total: the candidates left after the memory bound). Throws
/// hw::SpecError as enumerate does.
PlanResult run_plan(const PlanRequest& r, unsigned threads = 0,
                    const std::function<void(std::size_t done, std::size_t total)>& progress = {});

}  // namespace trainsim::plan
