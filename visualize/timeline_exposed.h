// The timeline's exposed-communication marks (sim/exposed_comm.h): a red strip along the bottom of a rank's
// row over each span where its communication runs and none of its compute does, with a tooltip giving the
// span and its length, and the totals the heading and the rows' right margin print.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "sim/exposed_comm.h"
#include "visualize/svg_writer.h"

namespace trainsim::visualize {

/// One strip to draw: one exposed interval, or several whose gaps are narrower than a pixel joined into one.
struct ExposedStrip {
  Time start = 0;         ///< start of the first interval
  Time end = 0;           ///< end of the last interval
  Time length = 0;        ///< summed length of its intervals (<= end - start), Time units
  std::size_t count = 0;  ///< number of intervals joined (>= 1)
};

/// `exposed` (sorted, disjoint) as strips at `px_per_second` pixels per simulated second: an interval joins the
/// strip before it when the gap between them is under `join_below_px` pixels. Deterministic.
std::vector<ExposedStrip> exposed_strips(const std::vector<TimeInterval>& exposed, double px_per_second,
                                         double join_below_px = 1.0);

/// Tooltip of a strip of `rank`: "rank 1: exposed communication from 2 s to 2.5 s, 0.5 s", or for joined
/// intervals "rank 1: exposed communication, N intervals from a s to b s, L s in all".
std::string exposed_strip_title(int rank, const ExposedStrip& strip);

/// Draws `strips` of `rank` as <rect class="exposed"> elements (each with its <title>; no fill: the caller's
/// group gives it) from `top`, `height` pixels tall; x = `x0` + seconds x `px_per_second`; at least 1 px wide.
void draw_exposed_strips(Svg& svg, int rank, const std::vector<ExposedStrip>& strips, double x0,
                         double px_per_second, double top, double height);

/// A length of simulated time in seconds for labels, with 4 significant digits: "0.5 s", "0.001235 s", "0 s".
std::string short_seconds(Time t);

/// The heading's clause on `exposed` (one list per rank) over a run of `makespan`: "exposed communication
/// (no compute running): mean 0.25 s per rank (12.5% of the makespan), most 0.5 s on rank 1", or "exposed
/// communication: none, all hidden under compute". With `real` units, lengths as time_text words them ("15.2 ms").
std::string exposed_heading(const std::vector<std::vector<TimeInterval>>& exposed, Time makespan, bool real = false);

}  // namespace trainsim::visualize
