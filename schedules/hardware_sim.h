// Simulating a schedule on the hardware cost model and reporting its step (hardware/report.h).
#pragma once

#include <memory>
#include <optional>

#include "hardware/report.h"
#include "schedules/replay.h"
#include "sim/cost_model.h"

namespace trainsim {

/// A simulated step and its report.
struct HardwareRun {
  SimResult result;                  ///< the simulation (ok also when the step runs out of device memory)
  std::optional<hw::StepReport> report;  ///< when the schedule is valid
  /// The cost model that timed it (for drawing: the timeline and trace draw its inner_comm, the TP
  /// communication inside compute ops).
  std::unique_ptr<CostModel> cost;
};

/// Simulates a schedule whose header uses the hardware cost model. Out of memory is not an error of the
/// schedule: the run is timed as if memory were unlimited, then simulated again with the device's capacity
/// as the limit to find the first rank, time and op over it and what is resident there (StepReport::oom).
/// Throws std::invalid_argument when the header is not `cost_model hardware`.
HardwareRun simulate_hardware(const Schedule& schedule);

}  // namespace trainsim
