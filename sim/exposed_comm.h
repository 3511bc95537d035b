// Exposed communication: per rank, the time during which a communication op runs and no compute op does
// (the communication that is not hidden under compute). The hardware report totals it
// (hardware/report.h, exposed_comm_s); the timeline and the Perfetto trace draw its intervals.
#pragma once

#include <compare>
#include <span>
#include <vector>

#include "sim/run_observer.h"
#include "sim/trace.h"

namespace trainsim {

/// A half-open span of simulated time [start, end), in Time units (nanoseconds; one puzzle step and one unit-
/// model pass are one simulated second).
struct TimeInterval {
  Time start = 0;
  Time end = 0;
  auto operator<=>(const TimeInterval&) const = default;
};

/// `v` sorted, with overlapping or touching intervals joined and empty ones (end <= start) dropped: sorted,
/// disjoint, non-empty.
std::vector<TimeInterval> merge_intervals(std::vector<TimeInterval> v);
/// The parts of `a` not covered by `b`. Both sorted and disjoint (as merge_intervals gives); so is the result.
std::vector<TimeInterval> subtract_intervals(const std::vector<TimeInterval>& a, const std::vector<TimeInterval>& b);
/// Summed length of `v` (disjoint), in Time units.
Time total_length(const std::vector<TimeInterval>& v);

/// When one rank's compute ops (is_compute: forward, backward and its halves, loss, update; any stream) run:
/// merged intervals.
std::vector<TimeInterval> compute_intervals(const std::vector<OpRun>& runs);
/// When one rank's communication ops (send, recv and collectives, on any stream) run: merged intervals, so
/// two overlapping ops on two streams count once.
std::vector<TimeInterval> comm_intervals(const std::vector<OpRun>& runs);
/// The same two of a rank's timed ops as the simulator shows them to a RunObserver (sim/run_observer.h).
std::vector<TimeInterval> compute_intervals(std::span<const RanOp> runs);
std::vector<TimeInterval> comm_intervals(std::span<const RanOp> runs);
/// One rank's exposed communication: comm_intervals minus compute_intervals (sorted, disjoint, non-empty).
std::vector<TimeInterval> exposed_comm_intervals(const std::vector<OpRun>& runs);
/// Exposed communication of every rank: element r is exposed_comm_intervals(trace.ranks[r]).
std::vector<std::vector<TimeInterval>> exposed_comm(const Trace& trace);

/// Whether the drawings mark exposed communication for `trace`: some communication op takes time, and the
/// cost model is not `puzzle` (whose rules run one stream per rank and block a rank in every pass and
/// collective, so all of its communication is exposed by rule and its timelines stay as the puzzles draw
/// them). Under the `unit` model communication takes no time, so nothing is marked either.
bool marks_exposed_comm(const Trace& trace);

}  // namespace trainsim
