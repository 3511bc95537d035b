// Text that explains a puzzle run's figures to the learner: grouped numbers, and what was resident at a
// missed memory peak.
#pragma once

#include <string>

#include "puzzles/runner.h"

namespace trainsim::puzzles {

/// "3,276,800": a memory figure with thousands separators.
std::string grouped(double v);

/// "ddp: memory target 2,300,000 missed: ..." and one line per tensor resident on the peak rank at the
/// peak, with its size, then the total; "" when the run did not complete or met its memory target.
std::string memory_miss_text(const PuzzleResult& r);

/// One line per tensor resident at the peak ("W0  500,000"), for tooltips; "" when none is known.
std::string resident_lines(const PuzzleResult& r);

}  // namespace trainsim::puzzles
