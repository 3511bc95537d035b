// Graphviz dependency graph of a schedule (DESIGN §4): ops as nodes clustered by rank, data edges (an op
// reads what an earlier op on its rank wrote) and message edges (send to receive, collective members).
#pragma once

#include <cstddef>
#include <string>

#include "schedules/schedule.h"

namespace trainsim::visualize {

/// The most ops `trainsim sim --dot F.svg` lays out with Graphviz: the "dot" layout grows faster than
/// linearly (on the 2-core development machine, 308 ops took 2 s and 1,256 ops 75 s), so larger schedules
/// get the DOT text only (bench/README.md).
inline constexpr std::size_t kMaxRenderedOps = 600;

/// DOT text of the op dependency graph.
std::string dependency_dot(const Schedule& schedule);
/// Renders DOT text to SVG with the Graphviz library (libgvc, layout "dot"). Throws std::runtime_error.
std::string render_dot_svg(const std::string& dot);

}  // namespace trainsim::visualize
