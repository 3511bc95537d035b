// Simulating a schedule on the hardware cost model and reporting its step (hardware/report.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "hardware/report.h"
#include "schedules/rank_source.h"
#include "schedules/replay.h"
#include "sim/cost_model.h"

namespace trainsim {

/// A simulated step and its report.
struct HardwareRun {
  SimResult result;                  ///< the simulation (ok also when the step runs out of device memory: step_failure)
  std::optional<hw::StepReport> report;  ///< when the schedule is valid
  /// The cost model that timed it (for drawing: the timeline and trace draw its inner_comm, the TP
  /// communication inside compute ops).
  std::unique_ptr<CostModel> cost;
};

/// Simulates a schedule whose header uses the hardware cost model. The run is timed as if memory were
/// unlimited, and the first rank, time and op over the device's capacity, with what is resident there, is noted
/// (SimOptions::memory_capacity) in StepReport::oom, so that the figures of a step that runs out of memory are
/// still reported; step_failure() says whether the step fails (out of memory does, unless allowed). The report's
/// figures are gathered while the engine runs (hw::ReportBuilder), so a source that makes each rank's ops when
/// asked is simulated one rank at a time (schedules/stream_sim.h); `record_trace`: also keep every op's record
/// in the result's trace (for drawing); `progress`: as SimOptions::progress; `mirror`: as SimOptions::mirror (a
/// symmetric simulation, schedules/symmetry.h; empty: every rank). Throws std::invalid_argument when the header is
/// not `cost_model hardware`.
HardwareRun simulate_hardware(const RankSource& source, bool record_trace,
                              std::function<void(int issued, int ranks)> progress = {}, std::vector<int> mirror = {});
/// The same for a whole schedule, keeping the trace.
HardwareRun simulate_hardware(const Schedule& schedule);

/// Why a simulated step fails, or "" when it passes: the simulation's error (an invalid schedule), else, unless
/// `allow_oom` (a what-if), running out of device memory: "out of device memory (...): " and the simulator's
/// message, which names the rank, the time, the op about to start and what is resident (StepReport::oom).
/// `sim`, `validate` and `gen --sim` exit 1 with it; their figures are still reported (the report is kept).
std::string step_failure(const HardwareRun& run, bool allow_oom);

}  // namespace trainsim
