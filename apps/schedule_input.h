// What a command reads as a schedule: a .sched file, a PyTorch pipelining CSV (converted on the fly,
// docs/pytorch-csv.md) or the name of a puzzle (its reference solution, recorded as a schedule).
#pragma once

#include <string>
#include <vector>

#include "schedules/schedule.h"

namespace trainsim::apps {

/// The lower-case extension of a path, with the dot: ".csv".
std::string extension(const std::string& path);

/// "0,1,2,3", "loop" (stage s on rank s % world) or "v" (stage s on rank s, then 2*world-1-s). Throws
/// std::invalid_argument.
std::vector<int> parse_stage_map(const std::string& spec, int world, int stages);

/// Ranks (rows, blank lines at the end left out, at most kMaxWorldSize) and stages (1 + the largest leading stage
/// number below kMaxCount of any cell) of a CSV, for --stage-map loop|v. Linear in the text, no allocation.
void csv_shape(const std::string& csv, int& world, int& stages);

/// How to read a CSV.
struct ScheduleInputOptions {
  int microbatches = 0;   ///< 0: 1 + the largest microbatch index in the CSV
  std::string stage_map;  ///< "": inferred (parse_stage_map's forms otherwise)
};

/// The schedule `what` names: a .sched file, a .csv file (any readable file but a directory: a pipe too),
/// or a puzzle name ("gpipe"). Throws ParseError for a bad .sched file and std::invalid_argument for a bad
/// CSV, an unreadable file or one larger than kMaxInputBytes, a failing puzzle or a name that is none of
/// these (listing the puzzles).
Schedule load_schedule_input(const std::string& what, const ScheduleInputOptions& options = {});

}  // namespace trainsim::apps
