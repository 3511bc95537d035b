// The timeline's annotations beyond ops and memory: the failure banner, blocked ranks, where the peak is
// marked and what explains it, and the memory heatmap strip used when there are too many lanes to plot.
#pragma once

#include <string>
#include <vector>

#include "sim/trace.h"
#include "visualize/svg_writer.h"
#include "visualize/timeline_svg.h"

namespace trainsim::visualize {

/// The banner's lines for a failed run: "RUN FAILED - this timeline stops at the error:" and the error's
/// first `max_lines` lines (then "... N more lines").
std::vector<std::string> failure_lines(const std::string& error, std::size_t max_lines = 8);
/// Height in pixels of a banner of `lines` lines (0 for none).
double failure_banner_height(std::size_t lines);
/// Draws the banner (class "failure") from `top`, `width` wide.
void draw_failure_banner(Svg& svg, const std::vector<std::string>& lines, double top, double width);

/// Marks a blocked rank's row or stream sub-row (class "blocked"): a red line at `x` and a hatched band to
/// `x_end`, titled with what it waits for, and the word "blocked" inside the band where it fits.
void draw_blocked_mark(Svg& svg, const BlockedMark& mark, double x, double x_end, double top, double height);

/// Where the peak is held longest: among the peak rank's memory samples equal to the peak, the one whose
/// value lasts longest until that rank's next sample (the first on a tie). `start` and `end` of that span.
struct PeakSpan {
  Time start = 0;
  Time end = 0;
};
PeakSpan peak_held_longest(const Trace& trace, const MemoryPeak& peak);

/// Tooltip of the peak marker: the peak, the op that started then and each resident tensor with its size. With
/// `real` units (a hardware model or a measured replay: timeline_units.h) sizes in MiB/GiB and times in s/ms.
std::string peak_tooltip(const MemoryPeak& peak, const PeakSpan& span, const PeakExplanation* why,
                         const std::string& unit, bool real = false);
/// The caption line under the lanes: "Peak ...: as OP started, rank R held T1 (size), T2 (size), ...",
/// cut to about `max_chars` characters.
std::string peak_caption(const MemoryPeak& peak, const PeakExplanation& why, std::size_t max_chars);

/// A memory lane drawn as a heatmap strip (a <g class="mem-heat">): each step's span filled with the memory
/// colour at an opacity of value / scale rounded up to tenths; equal neighbours are merged.
void heatmap_strip(Svg& svg, const std::vector<std::pair<double, double>>& steps, double x_end, double top, double h,
                   double scale);

}  // namespace trainsim::visualize
