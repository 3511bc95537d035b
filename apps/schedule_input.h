// What a command reads as a schedule: a .sched file, a PyTorch pipelining CSV (converted on the fly,
// docs/pytorch-csv.md) or the name of a puzzle (its reference solution, recorded as a schedule).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "schedules/schedule.h"

namespace trainsim::apps {

/// The command cannot start on what it was given: its input does not exist (no such file or puzzle), is a
/// directory or cannot be read. The commands exit 2 on it (README, "Exit status"), and 1 on an input that was
/// read and is wrong (it does not parse, import or validate, or does not fit --stage-map or --microbatches).
struct UnreadableInput : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// Checks, without opening it (a pipe can be read once), that `path` names something that exists, is not a
/// directory, and that this process may read. Throws UnreadableInput "cannot read 'PATH': WHY" (WHY from the
/// system: "No such file or directory", "Permission denied", or "it is a directory").
void check_readable(const std::string& path);

/// The lower-case extension of a path, with the dot: ".csv".
std::string extension(const std::string& path);

/// "0,1,2,3", "loop" (stage s on rank s % world) or "v" (stage s on rank s, then 2*world-1-s). Throws
/// std::invalid_argument.
std::vector<int> parse_stage_map(const std::string& spec, int world, int stages);

/// A CLI11 check of --stage-map's form ("0,1,2,3", "loop" or "v"), so that a malformed map is a usage error
/// (exit 2) before any input is read; whether it fits the input is parse_stage_map's to say.
CLI::Validator stage_map_check();

/// Ranks (rows, blank lines at the end left out, at most kMaxWorldSize) and stages (1 + the largest leading stage
/// number below kMaxCount of any cell) of a CSV, for --stage-map loop|v. Linear in the text, no allocation.
void csv_shape(const std::string& csv, int& world, int& stages);

/// How to read a CSV.
struct ScheduleInputOptions {
  int microbatches = 0;   ///< 0: 1 + the largest microbatch index in the CSV
  std::string stage_map;  ///< "": inferred (parse_stage_map's forms otherwise)
};

/// The schedule `what` names: a .sched file, a .csv file (any readable file but a directory: a pipe too),
/// or a puzzle name ("gpipe"). Throws UnreadableInput for a file that does not exist or cannot be read and a name
/// that is neither a file nor a puzzle (listing the puzzles); ParseError for a bad .sched file (also one larger
/// than kMaxInputBytes); std::invalid_argument for a bad CSV (also one larger than kMaxInputBytes or that does not
/// fit the options) and a failing puzzle.
Schedule load_schedule_input(const std::string& what, const ScheduleInputOptions& options = {});

}  // namespace trainsim::apps
