#include "visualize/timeline_svg.h"

namespace trainsim::visualize {

std::string timeline_svg(const Trace&, const TimelineOptions&) { return "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n"; }

}  // namespace trainsim::visualize
