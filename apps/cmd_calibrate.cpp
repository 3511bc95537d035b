// `trainsim calibrate TRACE... -o DEVICE.json`: fit a device's efficiency table (and a network's latency and
// bandwidth) to measured replay traces (schedules/calibration.h).
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/hardware_options.h"
#include "apps/output_names.h"
#include "apps/schedule_input.h"
#include "apps/text_file.h"
#include "schedules/calibration.h"
#include "interop/kineto_trace.h"

namespace trainsim::apps {

namespace {

struct CalibrateArgs {
  std::vector<std::string> traces;
  std::string out;
  std::string network_out;
  HardwareOptions hardware;
};

// PyTorch profiler (Kineto) traces of a user's GPU run: the device's table and the network from kernel times
// (interop/kineto_trace.h). --device names the GPU they ran on.
int run_kineto(CalibrateArgs a) {
  if (a.hardware.device.empty()) {
    fmt::print(stderr, "trainsim calibrate: {} is a PyTorch profiler trace: give --device, the GPU it ran on (a preset: "
                       "{}; or a JSON file)\n",
               a.traces.front(), "h100-sxm, h200, a100-80g");
    return 2;
  }
  if (a.hardware.network.empty()) {
    a.hardware.network = "nvlink8-ib400";
    fmt::print(stderr, "trainsim calibrate: network nvlink8-ib400 (8 GPUs per node) tells intra- from inter-node "
                       "groups (no --network given)\n");
  }
  hw::HardwareSetting base;
  try {
    for (const std::string& t : a.traces) check_readable(t);
    HardwareOptions o = a.hardware;
    o.model.clear();
    o.model_spec = hw::model_preset("llama3-8b");  // any valid model: Kineto calibration reads none
    base = hardware_setting(o);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "trainsim calibrate: {}\n", e.what());
    return 2;
  }
  Calibration c;
  try {
    c = calibrate_kineto(a.traces, base);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "trainsim calibrate: {}\n", e.what());
    return 1;
  }
  nlohmann::ordered_json j = hw::to_json(c.device);
  j["calibration"] = {{"source", "pytorch-profiler"}, {"traces", c.traces},       {"kernels", c.kernels},
                      {"compute_ops", c.compute_ops},  {"comm_ops", c.comm_ops},   {"left_out", c.left_out},
                      {"kernel_floor_s", c.kernel_floor_s}};
  if (!write_output("trainsim calibrate", a.out, j.dump(2) + "\n")) return 2;
  if (!a.network_out.empty() && !write_output("trainsim calibrate", a.network_out, hw::to_json(c.network).dump(2) + "\n"))
    return 2;
  const hw::EfficiencyTable& e = c.device.efficiency;
  fmt::print("{} kernels: {} GEMM, attention and memory-bound, {} communications, {} left out, from {} trace{}\n",
             c.kernels, c.compute_ops, c.comm_ops, c.left_out, c.traces.size(), c.traces.size() == 1 ? "" : "s");
  fmt::print("efficiency: forward {:.4g}  backward {:.4g}  attention {:.4g}  memory {:.4g} (kernel floor {:.3g} s; of "
             "peak {:.4g} FLOP/s, {:.4g} bytes/s)\n",
             e.forward, e.backward_input, e.attention, e.memory, c.kernel_floor_s, c.device.peak_flops,
             c.device.hbm_bandwidth);
  if (c.network_fitted)
    fmt::print("network: intra-node {:.4g} s, {:.4g} bytes/s; inter-node {:.4g} s, {:.4g} bytes/s{}\n",
               c.network.intra_latency_s, c.network.intra_bandwidth, c.network.inter_latency_s,
               c.network.inter_bandwidth, a.network_out.empty() ? " (not written: --network-output FILE)" : "");
  fmt::print("wrote {}\n", a.out);
  return 0;
}

int run(CalibrateArgs a) {
  const bool kineto = !a.traces.empty() && looks_like_kineto_file(a.traces.front());
  for (const std::string& t : a.traces)
    if (looks_like_kineto_file(t) != kineto) {
      fmt::print(stderr, "trainsim calibrate: give PyTorch profiler traces or trainsim replay traces, not both ({} is "
                         "{})\n",
                 t, kineto ? "not a profiler trace" : "a profiler trace");
      return 2;
    }
  if (kineto) return run_kineto(std::move(a));
  if (a.hardware.model.empty()) a.hardware.model = "small";
  if (a.hardware.device.empty()) a.hardware.device = "cpu";
  if (a.hardware.network.empty()) a.hardware.network = "cpu";
  // Exit status (README): 2 for a bad option or a trace that cannot be read, 1 for traces that were read and
  // cannot be fitted (not a replay trace, another model, no compute op).
  hw::HardwareSetting base;
  try {
    for (const std::string& t : a.traces) check_readable(t);
    base = hardware_setting(a.hardware);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "trainsim calibrate: {}\n", e.what());
    return 2;
  }
  // The executor's presets carry their own sequences per microbatch (docs/executor.md).
  if (a.hardware.microbatch_size == 0 && base.model.preset == "small") base.microbatch_size = 8;
  if (a.hardware.microbatch_size == 0 && base.model.preset == "tiny") base.microbatch_size = 2;
  Calibration c;
  try {
    c = calibrate(a.traces, base);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "trainsim calibrate: {}\n", e.what());
    return 1;
  }
  nlohmann::ordered_json j = hw::to_json(c.device);
  j["calibration"] = {{"traces", c.traces},   {"steps", c.steps},     {"compute_ops", c.compute_ops},
                      {"comm_ops", c.comm_ops}, {"gap_ops", c.gap_ops}};
  if (!write_output("trainsim calibrate", a.out, j.dump(2) + "\n")) {
    return 2;
  }
  if (!a.network_out.empty()) {
    nlohmann::ordered_json n = hw::to_json(c.network);
    if (!write_output("trainsim calibrate", a.network_out, n.dump(2) + "\n")) {
      return 2;
    }
  }
  const hw::EfficiencyTable& e = c.device.efficiency;
  fmt::print("{} compute ops, {} communications, {} dispatch gaps (per-op medians over {} step{}) from {} trace{}\n",
             c.compute_ops, c.comm_ops, c.gap_ops, c.steps, c.steps == 1 ? "" : "s", c.traces.size(),
             c.traces.size() == 1 ? "" : "s");
  fmt::print("efficiency: forward {:.4g}  backward_input {:.4g}  backward_weight {:.4g}  attention {:.4g}  memory {:.4g}  "
             "op overhead {:.4g} s  dispatch {:.4g} s (of peak {:.4g} FLOP/s, {:.4g} bytes/s)\n",
             e.forward, e.backward_input, e.backward_weight, e.attention, e.memory, e.op_overhead_s, e.dispatch_s,
             c.device.peak_flops, c.device.hbm_bandwidth);
  if (c.network_fitted)
    fmt::print("network: latency {:.4g} s, bandwidth {:.4g} bytes/s{}\n", c.network.intra_latency_s,
               c.network.intra_bandwidth, a.network_out.empty() ? " (not written: --network-output FILE)" : "");
  fmt::print("wrote {}\n", a.out);
  return 0;
}

}  // namespace

void add_calibrate_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Fit a device description's efficiency table (and a network's latency and bandwidth) to measured replay "
      "traces (trainsim replay FILE --trace T), or to a PyTorch profiler (Kineto) trace of your own GPU run "
      "(torch.profiler with record_shapes=True, export_chrome_trace; --device names the GPU; docs/calibration.md). "
      "--model names the model the replays trained (default: small). "
      "Exit status: 0 written; 1 the traces cannot be fitted (not a replay trace, another model); 2 a bad option, a "
      "trace that cannot be read or an output that cannot be written.");
  cmd->add_option("TRACE", a->traces,
                  "Measured traces (Chrome/Perfetto JSON of trainsim replay --trace; with --trace-steps K each op's "
                  "time is its median over the K steps)")
      ->required();
  cmd->add_option("-o,--output", a->out, "Write the calibrated device JSON here (NAME.json)")
      ->required()
      ->check(output_named({".json"}, "JSON", "NAME.json"));
  cmd->add_option("--network-output", a->network_out, "Also write the calibrated network JSON here (NAME.json)")
      ->check(output_named({".json"}, "JSON", "NAME.json"));
  add_hardware_options(cmd, a->hardware);
  cmd->callback([a, exit_code] { *exit_code = run(*a); });
}

}  // namespace trainsim::apps
