// A measured timeline next to the simulated one of the same schedule (`trainsim replay ... --compare-svg F.svg`):
// both drawn by timeline_svg on one time scale (the same pixels per second), the measured above, and under them
// the ops whose measured and simulated durations differ most, to say where the cost model is off.
//
// Ops are matched rank by rank: the k-th timed op of a rank with a given description and source line
// ("forward layer 2 batches {0} (p.sched:12)") in one trace is the k-th such op in the other, so two traces of
// one schedule match op for op whatever their order in time.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "sim/cost_model.h"
#include "sim/trace.h"

namespace trainsim::visualize {

/// One op's duration in both traces, in seconds.
struct OpDifference {
  int rank = 0;
  std::string op;  ///< Op::describe() and its source line
  double measured_s = 0, simulated_s = 0;
  double difference_s() const { return measured_s - simulated_s; }
};

/// Every op found in both traces, the largest |measured − simulated| first (ties: by rank, then in program
/// order), at most `count` of them.
std::vector<OpDifference> largest_op_differences(const Trace& measured, const Trace& simulated, std::size_t count);

/// What the comparison draws.
struct ComparisonOptions {
  std::string title;           ///< heading of the whole figure
  std::string measured_title;  ///< heading of the measured timeline ("measured on the cpu backend (last step)")
  std::string simulated_title; ///< heading of the simulated one ("simulated: hardware cost model, device cpu")
  std::vector<double> allocator_peak;  ///< the measured run's allocator peak per rank (TimelineOptions)
  const CostModel* simulated_cost = nullptr;  ///< the model that timed the simulated trace (TP bands), or null
  std::size_t differences = 12;               ///< how many of the largest differences to list
  double time_width = 1400;                   ///< pixels of the longer of the two makespans
};

/// The SVG text: the title, the step times side by side (measured, simulated, their ratio), the two timelines
/// one above the other on one time scale, and a table of the largest per-op differences.
std::string comparison_svg(const Trace& measured, const Trace& simulated, const ComparisonOptions& options);

}  // namespace trainsim::visualize
