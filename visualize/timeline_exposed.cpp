#include "visualize/timeline_exposed.h"

#include <cmath>

#include "visualize/timeline_units.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/world.h"

namespace trainsim::visualize {

std::vector<ExposedStrip> exposed_strips(const std::vector<TimeInterval>& exposed, double px_per_second,
                                         double join_below_px) {
  std::vector<ExposedStrip> out;
  for (const TimeInterval& i : exposed) {
    if (!out.empty() && to_seconds(i.start - out.back().end) * px_per_second < join_below_px) {
      ExposedStrip& s = out.back();
      s.end = i.end;
      s.length += i.end - i.start;
      ++s.count;
    } else {
      out.push_back({i.start, i.end, i.end - i.start, 1});
    }
  }
  return out;
}

std::string exposed_strip_title(int rank, const ExposedStrip& s) {
  if (s.count == 1)
    return fmt::format("rank {}: exposed communication from {} s to {} s, {} s", rank, format_time(s.start),
                       format_time(s.end), format_time(s.length));
  return fmt::format("rank {}: exposed communication, {} intervals from {} s to {} s, {} s in all", rank, s.count,
                     format_time(s.start), format_time(s.end), format_time(s.length));
}

void draw_exposed_strips(Svg& svg, int rank, const std::vector<ExposedStrip>& strips, double x0,
                         double px_per_second, double top, double height) {
  for (const ExposedStrip& s : strips) {
    const double xa = x0 + to_seconds(s.start) * px_per_second;
    const double xb = x0 + to_seconds(s.end) * px_per_second;
    svg.put("<rect class=\"exposed\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"><title>", xa, top,
            std::max(xb - xa, 1.0), height);
    append_escaped(svg.s, exposed_strip_title(rank, s));
    svg.s += "</title></rect>\n";
  }
}

std::string short_seconds(Time t) { return fmt::format("{:.4g} s", to_seconds(t)); }

std::string exposed_heading(const std::vector<std::vector<TimeInterval>>& exposed, Time makespan, bool real) {
  Time most = 0;
  int most_rank = 0;
  double sum = 0;  // in double: the total over many ranks can pass the range of Time
  for (std::size_t r = 0; r < exposed.size(); ++r) {
    const Time t = total_length(exposed[r]);
    sum += static_cast<double>(t);
    if (t > most) most = t, most_rank = static_cast<int>(r);
  }
  if (most == 0) return "exposed communication: none, all hidden under compute";
  const double mean = sum / static_cast<double>(exposed.size());
  const std::string mean_text = real ? time_text(static_cast<Time>(std::llround(mean)), true)
                                     : fmt::format("{:.4g} s", mean / static_cast<double>(kTicksPerSecond));
  return fmt::format("exposed communication (no compute running): mean {} per rank ({:.1f}% of the makespan), "
                     "most {} on rank {}",
                     mean_text, makespan > 0 ? 100 * mean / static_cast<double>(makespan) : 0.0,
                     real ? time_text(most, true) : short_seconds(most), most_rank);
}

}  // namespace trainsim::visualize
