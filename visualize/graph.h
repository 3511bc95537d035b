// Graphviz dependency graph of a schedule (DESIGN §4): ops as nodes clustered by rank, data edges (an op
// reads what an earlier op on its rank wrote) and message edges (send to receive, collective members).
#pragma once

#include <string>

#include "schedules/schedule.h"

namespace trainsim::visualize {

/// DOT text of the op dependency graph.
std::string dependency_dot(const Schedule& schedule);
/// Renders DOT text to SVG with the Graphviz library (libgvc, layout "dot"). Throws std::runtime_error.
std::string render_dot_svg(const std::string& dot);

}  // namespace trainsim::visualize
