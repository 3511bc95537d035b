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

/// DOT text of the op dependency graph: a cluster per rank (and per stream on a rank using several), dashed
/// program-order edges along each stream, data, message and collective edges, and a legend (conventions at
/// the top of visualize/graph.cpp). Byte-identical for the same schedule.
std::string dependency_dot(const Schedule& schedule);
/// Renders DOT text to SVG with the Graphviz library (libgvc, layout "dot"). Throws std::runtime_error.
std::string render_dot_svg(const std::string& dot);
/// Renders DOT text with the Graphviz library (layout "dot") to `format`: "svg", "png" or "pdf" (the bytes
/// of the file). Throws std::runtime_error when Graphviz fails or has no renderer for the format.
std::string render_dot(const std::string& dot, const std::string& format);

/// The format a graph file's name asks for, from its extension (any case): "dot" for .dot and .gv (DOT
/// text), "svg", "png" or "pdf" (laid out by Graphviz). Throws std::invalid_argument naming the extensions
/// for anything else, a name without one included.
std::string graph_format_for(const std::string& path);

}  // namespace trainsim::visualize
