#include "schedules/hardware_sim.h"

#include <stdexcept>

#include "hardware/cost_model.h"
#include "schedules/cost_models.h"
#include "schedules/stream_sim.h"

namespace trainsim {

namespace {

void check_header(const ScheduleHeader& h) {
  if (h.cost_model != "hardware" || !h.hardware)
    throw std::invalid_argument("the schedule does not use the hardware cost model (no 'cost_model hardware' block)");
}

}  // namespace

HardwareRun simulate_hardware(const RankSource& source, bool record_trace,
                              std::function<void(int issued, int ranks)> progress, std::vector<int> mirror) {
  const ScheduleHeader& h = source.header();
  check_header(h);
  HardwareRun run;
  // One cost model for the run, the report's TP figures and the drawings (HardwareRun::cost). A schedule the model
  // cannot time (a TP slice on a rank without a TP group of its degree) is an invalid schedule: its error, naming
  // the rank and the op, is the run's (exit 1), not an exception out of the command.
  try {
    run.cost = make_schedule_cost_model(source);
  } catch (const std::invalid_argument& e) {
    run.result.error = e.what();
    return run;
  }
  hw::ReportBuilder builder;  // (told the model as the run begins)
  SimOptions options;
  options.cost = run.cost.get();
  options.record_trace = record_trace;
  options.memory_capacity = h.hardware->device.usable_memory_bytes();
  options.observer = &builder;
  options.progress = std::move(progress);
  options.mirror = std::move(mirror);
  run.result = simulate_streams(source, options);
  if (!run.result.ok) return run;
  run.report = builder.report(run.result.summary, *h.hardware, h.microbatches, run.result.over_capacity, h.stage_map);
  return run;
}

HardwareRun simulate_hardware(const Schedule& schedule) {
  if (static_cast<int>(schedule.ranks.size()) != schedule.header.world_size) {
    check_header(schedule.header);
    HardwareRun run;
    run.result = simulate_streams(schedule);  // the error: the lists do not match the world size
    return run;
  }
  return simulate_hardware(ScheduleView(schedule), true);
}

std::string step_failure(const HardwareRun& run, bool allow_oom) {
  if (!run.result.ok) return run.result.error;
  if (allow_oom || !run.report || !run.report->oom) return "";
  return "out of device memory (--allow-oom reports the step anyway): " + run.report->oom->message;
}

}  // namespace trainsim
