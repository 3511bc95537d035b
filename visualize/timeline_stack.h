// Timelines one above another on a shared time axis (`trainsim plan --timelines FILE`, issue 34's comparison of
// schedules): each part is a whole timeline (timeline_svg.h) drawn at one scale, seconds to pixels, so that a
// shorter step is a shorter timeline, under one heading.
#pragma once

#include <string>
#include <vector>

#include "sim/cost_model.h"
#include "sim/trace.h"

namespace trainsim::visualize {

/// One timeline of the stack.
struct StackedTimeline {
  std::string title;  ///< its heading (the schedule's name and figures)
  Trace trace;        ///< what it draws (e.g. one pipeline replica, TP collapsed: one representative rank per stage)
  const CostModel* cost = nullptr;  ///< the model that timed it (TP bands), or null
  std::string row_name = "rank";    ///< what a row is (TimelineOptions::row_name): "stage" for one rank per stage
};

/// The SVG of `parts` stacked in order under `title`, every time axis at the scale that fits the longest step in
/// `width` pixels. Deterministic.
std::string timeline_stack_svg(const std::vector<StackedTimeline>& parts, const std::string& title, double width = 1600);

}  // namespace trainsim::visualize
