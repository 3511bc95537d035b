#include "schedules/hardware_sim.h"

#include <stdexcept>

namespace trainsim {

HardwareRun simulate_hardware(const Schedule& schedule) {
  const ScheduleHeader& h = schedule.header;
  if (h.cost_model != "hardware" || !h.hardware)
    throw std::invalid_argument("the schedule does not use the hardware cost model (no 'cost_model hardware' block)");
  HardwareRun run;
  run.result = simulate(schedule);
  if (!run.result.ok) return run;
  std::string oom;
  if (run.result.trace.peak().memory > h.hardware->device.memory_bytes) {
    SimOptions limited;
    limited.memory_limit = h.hardware->device.memory_bytes;
    SimResult again = simulate(schedule, limited);
    oom = again.ok ? std::string("out of memory") : again.error;
  }
  run.report = hw::make_report(run.result.trace, *h.hardware, h.microbatches, oom);
  return run;
}

}  // namespace trainsim
