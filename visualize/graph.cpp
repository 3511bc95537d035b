#include "visualize/graph.h"

#include <stdexcept>

namespace trainsim::visualize {

std::string dependency_dot(const Schedule&) { return "digraph G {}\n"; }
std::string render_dot_svg(const std::string&) { throw std::runtime_error("not built yet"); }

}  // namespace trainsim::visualize
