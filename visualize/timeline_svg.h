// Timeline SVG of a simulated run (DESIGN §4): a row per rank with ops as boxes at their times, a memory
// lane per rank with the peak marked, a time axis and a legend.
#pragma once

#include <optional>
#include <string>

#include "sim/trace.h"

namespace trainsim::visualize {

/// What to draw besides the trace.
struct TimelineOptions {
  std::string title;                     ///< heading line, e.g. "ddp - Puzzle 2 - Distributed Data Parallel"
  std::optional<double> target_time;     ///< drawn as a marker on the time axis (seconds / steps)
  std::optional<double> target_memory;   ///< drawn as a line in each memory lane (cost model unit)
  int max_detailed_ranks = 64;           ///< above this many ranks, rows are summarised
};

/// The SVG document (UTF-8 text). Deterministic: the same trace and options give the same bytes.
std::string timeline_svg(const Trace& trace, const TimelineOptions& options = {});

}  // namespace trainsim::visualize
