// Accelerator descriptions for the hardware cost model (DESIGN §2): peak dense FLOP/s, memory bandwidth and
// capacity, and the efficiency table that turns FLOPs and bytes into seconds. Calibration
// (schedules/calibration.h) replaces the table with one fitted to measured traces.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware/fields.h"

namespace trainsim::hw {

/// Fraction of the peak each kind of work reaches, and fixed costs per op.
///
/// A compute op's time is gemm_flops / (peak_flops x the pass's efficiency) + attention_flops / (peak_flops x
/// attention) + bytes / (hbm_bandwidth x memory) + op_overhead_s (hardware/op_costs.h says what each op's
/// FLOPs and bytes are). Every timed op (compute, send, recv, collective) also takes dispatch_s more
/// (hardware/cost_model.h).
struct EfficiencyTable {
  double forward = 1;          ///< matrix multiplies of the forward
  double backward_input = 1;   ///< matrix multiplies of the input-grad half of the backward
  double backward_weight = 1;  ///< matrix multiplies of the weight-grad half
  double attention = 1;        ///< the attention core (QK^T, softmax, attention x V), forward and backward
  double memory = 1;           ///< fraction of hbm_bandwidth reached by memory-bound ops
  double op_overhead_s = 0;    ///< seconds added to every compute op (launch and scheduling overhead)
  /// Seconds from the moment an op could start (its stream free, its inputs there) to the moment it does,
  /// added to every timed op: thread wake-ups and event waits on the CPU backend, launch latency on a GPU.
  /// Not in any op's own time; `trainsim calibrate` fits it from the gaps between measured ops.
  double dispatch_s = 0;

  friend bool operator==(const EfficiencyTable&, const EfficiencyTable&) = default;
};

/// One accelerator.
struct DeviceSpec {
  std::string preset = "custom";
  double peak_flops = 0;       ///< peak dense FLOP/s at the model's compute precision
  double hbm_bandwidth = 0;    ///< memory bandwidth, bytes/s
  double memory_bytes = 0;     ///< memory capacity, bytes (out-of-memory above it)
  EfficiencyTable efficiency;

  /// Throws SpecError naming `where` and the field.
  void validate(const std::string& where) const;
  friend bool operator==(const DeviceSpec&, const DeviceSpec&) = default;
};

const std::vector<Field<DeviceSpec>>& device_fields();
/// h100-sxm, h200, a100-80g, cpu, custom.
const std::vector<std::string>& device_preset_names();
/// Throws SpecError listing the presets.
DeviceSpec device_preset(const std::string& name);
/// {"preset": base (optional), "peak_flops": ..., "efficiency": {"forward": ...}}; validated.
DeviceSpec device_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::ordered_json to_json(const DeviceSpec& d);

}  // namespace trainsim::hw
