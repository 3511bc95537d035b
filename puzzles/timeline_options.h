// How a puzzle's run is drawn: the timeline options (title, targets, failure banner, blocked ranks, the
// peak's explanation) that `trainsim puzzles` draws each puzzle's SVG with.
#pragma once

#include "puzzles/catalog.h"
#include "puzzles/runner.h"
#include "visualize/timeline_svg.h"

namespace trainsim::puzzles {

/// Timeline options for puzzle `p`'s run `r`: title "NAME - TITLE" (" (your solution)" for an exercise);
/// the time target (drawn at its floor boundary) and memory target only when the run completed; the run's
/// error and blocked ranks; the peak's op and resident tensors when known. Throws nothing.
visualize::TimelineOptions timeline_options(const Puzzle& p, const PuzzleResult& r, bool exercise);

}  // namespace trainsim::puzzles
