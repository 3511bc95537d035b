#include "schedules/hardware_sim.h"

#include <stdexcept>

#include "hardware/cost_model.h"
#include "schedules/cost_models.h"

namespace trainsim {

HardwareRun simulate_hardware(const Schedule& schedule) {
  const ScheduleHeader& h = schedule.header;
  if (h.cost_model != "hardware" || !h.hardware)
    throw std::invalid_argument("the schedule does not use the hardware cost model (no 'cost_model hardware' block)");
  // One cost model for the run, the run with the memory limit and the report's TP figures.
  HardwareRun run;
  run.cost = make_schedule_cost_model(schedule);
  const CostModel* cost = run.cost.get();
  SimOptions options;
  options.cost = cost;
  run.result = simulate(schedule, options);
  if (!run.result.ok) return run;
  std::string oom;
  if (run.result.trace.peak().memory > h.hardware->device.memory_bytes) {
    SimOptions limited = options;
    limited.memory_limit = h.hardware->device.memory_bytes;
    SimResult again = simulate(schedule, limited);
    oom = again.ok ? std::string("out of memory") : again.error;
  }
  run.report = hw::make_report(run.result.trace, *h.hardware, h.microbatches, oom,
                               dynamic_cast<const hw::HardwareCostModel*>(cost));
  return run;
}

}  // namespace trainsim
