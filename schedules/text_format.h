// The .sched text format, version 1 (docs/schedule-format.md): a header, then one op list per rank, one op
// per line. Parsing then printing a canonical file (as print_schedule writes it) gives the same bytes.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "schedules/schedule.h"

namespace trainsim {

/// A malformed .sched file. what() is "FILE:LINE:COL: what was expected, what was found".
struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parses .sched text. `source` names the file in errors and in each op's `where` ("file.sched:12").
/// Fills omitted reads/writes with their defaults (schedules/defaults.h). Throws ParseError for bad
/// syntax, unknown ops, ranks, layers, batches or shards out of range, numbers above the limits of
/// schedules/limits.h (world_size, layers, microbatches, shard counts), and missing or repeated headers.
/// Costs time and memory in proportion to the text, whatever its header declares.
Schedule parse_schedule(const std::string& text, const std::string& source = "<schedule>");
/// Reads and parses a file (any readable file: a pipe too). Throws ParseError, also when the file cannot be
/// read or is larger than kMaxInputBytes.
Schedule read_schedule_file(const std::string& path);
/// Canonical text: fixed header order, ops indented by two spaces, reads/writes omitted where they equal
/// the defaults, no comments.
std::string print_schedule(const Schedule& schedule);
/// One op as it appears in a file, without indentation: "forward L0 {0-3}".
std::string print_op(const Op& op, const ScheduleHeader& header);
/// Parses a tensor name ("W3[0/4]", "dW1{0-3}[1/4]@1"). Throws std::invalid_argument, also for a layer,
/// shard count or id above kMaxCount (schedules/limits.h) or a step above kMaxNumber.
Tensor parse_tensor(std::string_view text);
/// OpKind from its name in op_name() ("all-gather"); nullopt when unknown.
std::optional<OpKind> op_kind_from_name(std::string_view name);

}  // namespace trainsim
