#include "visualize/perfetto.h"

namespace trainsim::visualize {

std::string perfetto_trace_json(const Trace&) { return "{}"; }

}  // namespace trainsim::visualize
