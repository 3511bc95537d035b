// The hardware cost model's prediction of a replay (hardware/, schedules/hardware_sim.h): the executor's own
// model (the same blocks, sizes, sequence and microbatch, in fp32: hardware/model.h's `tiny`/`small` presets with
// the replay's sizes) on a device and network (the `cpu` presets by default, or a `trainsim calibrate`d device),
// with the replay's activation recomputation and eager attention (the executor's: s x s scores), the schedule
// simulated as `trainsim sim --model ... --device cpu --attention eager` would. What `trainsim replay` prints next to what it measured: step time, peak memory per rank.
#pragma once

#include <string>

#include "exec/model_config.h"
#include "hardware/setting.h"
#include "schedules/hardware_sim.h"
#include "schedules/schedule.h"

namespace trainsim::apps {

/// The hardware setting of a replay of `model`: device and network are preset names or JSON files. Throws
/// hw::SpecError naming a device or network that cannot be loaded.
hw::HardwareSetting replay_setting(const exec::ModelConfig& model, const std::string& device,
                                   const std::string& network, hw::Recompute recompute);

/// Simulates `schedule` (its header switched to the hardware cost model with `setting`), keeping the trace.
/// Throws hw::SpecError or std::invalid_argument when the model does not fit the schedule.
HardwareRun predict_replay(const Schedule& schedule, const hw::HardwareSetting& setting);

/// Within this factor either way a replay's measured step counts as predicted (no note).
inline constexpr double kPredictionMissFactor = 1.25;

/// What the replay's report adds when its measured step (seconds) is more than kPredictionMissFactor times the
/// step predicted on `device` (a preset name or a JSON file), or less than its inverse: the ratio, and that a
/// device fitted to this machine (`trainsim calibrate`, docs/calibration.md) is given with --predict-device.
/// The `cpu` preset is fitted to the `small` model's replays on one development machine (hardware/device.cpp), so
/// other models (`tiny`'s ops are too short for its per-op overheads), other CPUs, or the same one loaded, read
/// otherwise. Empty within the factor, or when either time is not positive.
std::string prediction_miss_note(double predicted_s, double measured_s, const std::string& device);

}  // namespace trainsim::apps
