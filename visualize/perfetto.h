// Chrome / Perfetto trace JSON of a simulated run (DESIGN §4).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/cost_model.h"
#include "sim/trace.h"

namespace trainsim::visualize {

/// Trace Event Format JSON: a process per rank, a thread per stream, complete events with real durations
/// (microseconds), flow events from each send to its receive, memory as a counter track per rank, and a
/// thread "exposed comm" per rank with a slice per exposed-communication interval (sim/exposed_comm.h).
/// `cost`: the cost model that timed the trace, or null; a compute op with TP communication inside it (its
/// inner_comm, visualize/timeline_tp_inside.h) gets args.tp_comm_inside_us and a nested slice "TP comm inside"
/// (cat "tp-collective") over the last that many microseconds of it.
std::string perfetto_trace_json(const Trace& trace, const CostModel* cost = nullptr);

/// The same for several steps of one run (a replay's measured steps, in order): one timeline, each step at
/// its start, args.step on every op event, otherData.steps ({"step", "start_us", "makespan_us"} per step) and
/// otherData.step_makespan_median_us (the conventions are in perfetto.cpp). No steps: an empty trace.
/// `extra`'s members are added to otherData (a replay's "model": what calibrate checks its --model against).
std::string perfetto_steps_json(const std::vector<StepTrace>& steps, const nlohmann::json& extra = nlohmann::json::object());

}  // namespace trainsim::visualize
