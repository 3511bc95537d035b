// What `trainsim puzzles` prints about its runs: the table, the errors, the explanation of a missed memory
// target, and the JSON form.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "puzzles/runner.h"

namespace trainsim::apps {

/// One JSON object per run (`--json`); a run that did not complete has null `time_ok` and `memory_ok`.
nlohmann::ordered_json puzzle_json(const puzzles::PuzzleResult& r);

/// The table (targets shown only for runs that completed, "-" otherwise), then each run's error, then the
/// explanation of each missed memory target.
void print_table(const std::vector<puzzles::PuzzleResult>& results);

}  // namespace trainsim::apps
