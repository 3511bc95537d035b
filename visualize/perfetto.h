// Chrome / Perfetto trace JSON of a simulated run (DESIGN §4).
#pragma once

#include <string>

#include "sim/trace.h"

namespace trainsim::visualize {

/// Trace Event Format JSON: a process per rank, a thread per stream, complete events with real durations
/// (microseconds), flow events from each send to its receive, memory as a counter track per rank, and a
/// thread "exposed comm" per rank with a slice per exposed-communication interval (sim/exposed_comm.h).
std::string perfetto_trace_json(const Trace& trace);

}  // namespace trainsim::visualize
