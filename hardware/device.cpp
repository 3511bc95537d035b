#include "hardware/device.h"

#include <fmt/format.h>

namespace trainsim::hw {

void DeviceSpec::validate(const std::string& where) const {
  auto need = [&](bool ok, const char* field, double v, const char* what) {
    if (!ok) throw SpecError(fmt::format("{}: field '{}': {}, got {}", where, field, what, v));
  };
  need(peak_flops > 0, "peak_flops", peak_flops, "must be positive (FLOP/s)");
  need(hbm_bandwidth > 0, "hbm_bandwidth", hbm_bandwidth, "must be positive (bytes/s)");
  need(memory_bytes > 0, "memory_bytes", memory_bytes, "must be positive (bytes)");
  const EfficiencyTable& e = efficiency;
  for (auto [v, name] : {std::pair{e.forward, "efficiency.forward"}, {e.backward_input, "efficiency.backward_input"},
                         {e.backward_weight, "efficiency.backward_weight"}, {e.attention, "efficiency.attention"},
                         {e.memory, "efficiency.memory"}})
    need(v > 0 && v <= 1, name, v, "must be in (0, 1] (a fraction of the peak)");
  need(e.op_overhead_s >= 0, "efficiency.op_overhead_s", e.op_overhead_s, "must be at least 0 (seconds)");
  need(e.dispatch_s >= 0, "efficiency.dispatch_s", e.dispatch_s, "must be at least 0 (seconds)");
}

const std::vector<Field<DeviceSpec>>& device_fields() {
  using D = DeviceSpec;
  auto eff = [](std::string name, double EfficiencyTable::*m) {
    return Field<D>{"efficiency." + name, FieldType::Number, [m](const D& d) { return d.efficiency.*m; },
                    [m](D& d, double v) { d.efficiency.*m = v; }, {}, {}};
  };
  static const std::vector<Field<D>> f = {
      field("peak_flops", &D::peak_flops),
      field("hbm_bandwidth", &D::hbm_bandwidth),
      field("memory_bytes", &D::memory_bytes),
      eff("forward", &EfficiencyTable::forward),
      eff("backward_input", &EfficiencyTable::backward_input),
      eff("backward_weight", &EfficiencyTable::backward_weight),
      eff("attention", &EfficiencyTable::attention),
      eff("memory", &EfficiencyTable::memory),
      eff("op_overhead_s", &EfficiencyTable::op_overhead_s),
      eff("dispatch_s", &EfficiencyTable::dispatch_s),
  };
  return f;
}

const std::vector<std::string>& device_preset_names() {
  static const std::vector<std::string> names{"h100-sxm", "h200", "a100-80g", "cpu", "custom"};
  return names;
}

namespace {

// Uncalibrated GPUs: every matrix multiply at 52% of peak, the per-GPU throughput Megatron-LM sustained end
// to end on A100s (Narayanan et al. 2021, abstract: 502 petaFLOP/s on 3072 GPUs, 163 TFLOP/s per GPU of 312);
// an end-to-end figure includes bubbles and communication, so a GEMM reaches at least this much. Memory-bound
// ops at the datasheet bandwidth. `trainsim calibrate` replaces the table with measured values.
EfficiencyTable uncalibrated_gpu() {
  EfficiencyTable e;
  e.forward = e.backward_input = e.backward_weight = e.attention = 0.52;
  e.memory = 1;
  e.op_overhead_s = 0;
  return e;
}

}  // namespace

DeviceSpec device_preset(const std::string& name) {
  DeviceSpec d;
  if (name == "h100-sxm") {
    // NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: BF16 Tensor Core 1,979 TFLOPS with sparsity, so 989.4
    // dense (2:4 sparsity doubles the figure); GPU memory 80 GB HBM3 at 3.35 TB/s.
    d.peak_flops = 989.4e12, d.hbm_bandwidth = 3.35e12, d.memory_bytes = 80e9;
    d.efficiency = uncalibrated_gpu();
  } else if (name == "h200") {
    // NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: BF16 Tensor Core 1,979 TFLOPS with sparsity (989.4
    // dense, the H100's compute); 141 GB HBM3e at 4.8 TB/s.
    d.peak_flops = 989.4e12, d.hbm_bandwidth = 4.8e12, d.memory_bytes = 141e9;
    d.efficiency = uncalibrated_gpu();
  } else if (name == "a100-80g") {
    // NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM: BF16 Tensor Core 312 TFLOPS (624 with sparsity);
    // 80 GB HBM2e at 2,039 GB/s.
    d.peak_flops = 312e12, d.hbm_bandwidth = 2.039e12, d.memory_bytes = 80e9;
    d.efficiency = uncalibrated_gpu();
  } else if (name == "cpu") {
    // The executor's CPU backend on the development machine (2 cores, idle, fp32 OpenBLAS, one thread per
    // rank), as fitted by `trainsim calibrate` on 3 rounds x 3 traced steps of gpipe and ddp replays with
    // the `small` model on 2026-11-24 (bench/calibration_fidelity.sh; bench/README.md, "Hardware cost
    // model"), rounded to 3 digits. peak_flops and hbm_bandwidth are nominal scales (1e11 FLOP/s, 1e10
    // bytes/s) that the fitted efficiencies are fractions of; memory_bytes a RAM budget for one replay
    // (8 GiB).
    d.peak_flops = 1e11, d.hbm_bandwidth = 1e10, d.memory_bytes = 8.0 * (1ull << 30);
    d.efficiency.forward = 0.859, d.efficiency.backward_input = 0.866, d.efficiency.backward_weight = 0.866;
    d.efficiency.attention = 0.859, d.efficiency.memory = 0.878, d.efficiency.op_overhead_s = 2.41e-3;
    d.efficiency.dispatch_s = 1.83e-4;
  } else if (name != "custom") {
    std::string list;
    for (const auto& n : device_preset_names()) list += (list.empty() ? "" : ", ") + n;
    throw SpecError(fmt::format("unknown device '{}' (the presets are: {}; or a JSON file)", name, list));
  }
  d.preset = name;
  return d;
}

DeviceSpec device_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw SpecError(fmt::format("{}: expected a JSON object describing a device", where));
  std::string base = "custom";
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) throw SpecError(fmt::format("{}: field 'preset': expected a string", where));
    base = j["preset"].get<std::string>();
  }
  DeviceSpec d;
  try {
    d = device_preset(base);
  } catch (const SpecError& e) {
    throw SpecError(fmt::format("{}: field 'preset': {}", where, e.what()));
  }
  apply_json(device_fields(), d, j, where, {"preset", "calibration"});
  d.validate(where);
  return d;
}

nlohmann::ordered_json to_json(const DeviceSpec& d) {
  nlohmann::ordered_json j;
  j["preset"] = d.preset;
  j.update(fields_json(device_fields(), d));
  return j;
}

}  // namespace trainsim::hw
