#include "visualize/timeline_tp_inside.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "visualize/palette.h"
#include "visualize/timeline_exposed.h"
#include "visualize/timeline_units.h"

namespace trainsim::visualize {

Time tp_inside(const CostModel* cost, const OpRun& run) {
  if (!cost || run.end <= run.start) return 0;
  return std::clamp<Time>(cost->inner_comm(run.op), 0, run.end - run.start);
}

bool has_tp_inside(const Trace& trace, const CostModel* cost) {
  if (!cost) return false;
  for (const auto& runs : trace.ranks)
    for (const OpRun& r : runs)
      if (tp_inside(cost, r) > 0) return true;
  return false;
}

namespace {
std::string length_text(Time t, bool real) { return real ? time_text(t, true) : short_seconds(t); }
}  // namespace

std::string tp_inside_line(const CostModel* cost, const OpRun& run, bool real) {
  const Time inside = tp_inside(cost, run);
  if (inside <= 0) return {};
  return fmt::format("TP communication inside: {} ({:.0f}% of the op; magenta band)", length_text(inside, real),
                     100.0 * static_cast<double>(inside) / static_cast<double>(run.end - run.start));
}

std::string tp_inside_heading(const Trace& trace, const CostModel* cost, bool real) {
  if (!cost || trace.ranks.empty()) return {};
  double sum = 0;  // in double: the total over many ranks can pass the range of Time
  Time most = 0;
  int most_rank = 0;
  for (std::size_t r = 0; r < trace.ranks.size(); ++r) {
    Time t = 0;
    for (const OpRun& run : trace.ranks[r]) t += tp_inside(cost, run);
    sum += static_cast<double>(t);
    if (t > most) most = t, most_rank = static_cast<int>(r);
  }
  if (most == 0) return {};
  const double mean = sum / static_cast<double>(trace.ranks.size());
  const Time makespan = trace.makespan();
  return fmt::format(
      "TP communication inside compute ops (magenta band at the end of each op; exposed: the rank's compute waits "
      "on it): mean {} per rank ({:.1f}% of the {}), most {} on rank {}",
      length_text(static_cast<Time>(std::llround(mean)), real),
      makespan > 0 ? 100 * mean / static_cast<double>(makespan) : 0.0, real ? "step time" : "makespan",
      length_text(most, real), most_rank);
}

void draw_tp_inside_band(Svg& svg, double x, double w, double top, double h, Time inside, Time duration) {
  if (inside <= 0 || duration <= 0) return;
  const double bw = std::max(0.5, w * static_cast<double>(inside) / static_cast<double>(duration));
  const double bh = std::min(h, std::max(2.0, h / 3));
  svg.put("<rect class=\"tp-inside\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\" "
          "stroke=\"none\" pointer-events=\"none\"/>\n",
          x + w - bw, top + h - bh, bw, bh, kTpCollectiveColour);
}

}  // namespace trainsim::visualize
