#include "apps/hardware_options.h"

#include <limits>

#include <fmt/format.h>

#include "apps/number_check.h"
#include "hardware/op_costs.h"
#include "interop/hf_config.h"

namespace trainsim::apps {

void add_hardware_options(CLI::App* cmd, HardwareOptions& o) {
  auto list = [](const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  cmd->add_option("--model", o.model,
                  "Hardware cost model: the model, a preset (" + list(hw::model_preset_names()) + ") or a JSON file");
  cmd->add_option("--device", o.device, "Hardware cost model: the device, a preset (" +
                                             list(hw::device_preset_names()) + ") or a JSON file (trainsim calibrate)");
  cmd->add_option("--network", o.network,
                  "Hardware cost model: the network, a preset (" + list(hw::network_preset_names()) + ") or a JSON file");
  // 0 is "not given" inside (HardwareOptions): given, it is refused like any count below 1.
  // Upper bounds far beyond any real run (a microbatch of 65,536 sequences; 16 M tokens per sequence, 16 times
  // the longest contexts trained), so that a typo is an error rather than a prediction in billions of seconds.
  cmd->add_option("--microbatch-size", o.microbatch_size,
                  "Hardware cost model: sequences per microbatch, 1 to 65536 (default 1)")
      ->check(integer_in(1, 65536, "", "N>=1"));
  cmd->add_option("--seq", o.seq, "Hardware cost model: tokens per sequence, 1 to 16777216 (default: the model's)")
      ->check(integer_in(1, 16777216, "", "N>=1"));
  cmd->add_option("--recompute", o.recompute,
                  "Hardware cost model: activation recomputation, none|selective|full|op (op: torchtitan's selective "
                  "op checkpointing, every other matrix multiply recomputed)");
  cmd->add_option("--attention", o.attention,
                  "Hardware cost model: flash (default: FlashAttention, no s x s scores kept) or eager (scores and "
                  "probabilities kept unless recomputed)");
  cmd->add_option("--elementwise", o.elementwise,
                  "Hardware cost model: fused (default: one kernel per norm, activation, ..., as torch.compile or "
                  "Megatron-LM's fused kernels) or eager (PyTorch without torch.compile: every operation a kernel)");
  cmd->add_option("--tp-overlap", o.tp_overlap,
                  "Hardware cost model: how tensor parallelism's collectives overlap the GEMMs: backward (default, "
                  "Megatron-LM's: the input grads' reductions under the weight-grad GEMMs), full (with --sp every TP "
                  "collective under its GEMM: Megatron-LM's --tp-comm-overlap, torchtitan's async TP) or none (all "
                  "synchronous: torchtitan's TP)");
  cmd->add_option("--moe-dispatcher", o.moe_dispatcher,
                  "Hardware cost model, Mixture of Experts: how the all-to-alls run, nccl (default: point-to-point "
                  "sends to every EP member, Megatron-LM's alltoall dispatcher) or deepep (DeepEP's hierarchical "
                  "kernels: a token crosses the network once per destination node, then NVLink)");
  cmd->add_option("--expert-gemm", o.expert_gemm,
                  "Hardware cost model, Mixture of Experts: how the experts' GEMMs are issued, per-expert (default: "
                  "Megatron-Core's grouped linear layers through Transformer Engine, each local expert's GEMMs and "
                  "casts issued from the host, the device's efficiency.expert_launch_s each; an expert op takes the "
                  "longer of that and its GPU work) or grouped (one grouped GEMM kernel per linear layer: torchtitan's "
                  "torch._grouped_mm)");
  cmd->add_flag("--fp8", o.fp8,
                "Hardware cost model: FP8 linear layers (torchao float8 with dynamic scaling) at the device's FP8 peak");
  cmd->add_flag("--fp8-all-gather", o.fp8_all_gather,
                "Hardware cost model: FP8 linear layers and FSDP weight all-gathers in FP8 (implies --fp8)");
  cmd->add_option("--set", o.set,
                  "Hardware cost model: override one field, model.FIELD=V, device.FIELD=V or network.FIELD=V "
                  "(repeatable; e.g. device.efficiency.forward=0.6)");
}

hw::HardwareSetting hardware_setting(const HardwareOptions& o, const std::optional<hw::HardwareSetting>& base) {
  hw::HardwareSetting s;
  if (base) s = *base;
  auto need = [&](const std::string& v, const char* flag) {
    if (v.empty() && !base)
      throw hw::SpecError(fmt::format("{} is needed with the hardware cost model (--model, --device and --network)", flag));
  };
  if (!o.model_spec) need(o.model, "--model");
  auto wrap = [](const char* flag, auto&& f) {
    try {
      f();
    } catch (const hw::SpecError& e) {
      throw hw::SpecError(fmt::format("{}: {}", flag, e.what()));
    }
  };
  if (o.model_spec) s.model = *o.model_spec;
  else if (!o.model.empty()) wrap("--model", [&] { s.model = interop::load_model(o.model); });
  // Without a base, the defaults every path shares (hardware_defaults).
  const std::string device = !o.device.empty() || base ? o.device : kDefaultDevice;
  const std::string network = !o.network.empty() || base ? o.network : kDefaultNetwork;
  if (!device.empty()) wrap("--device", [&] { s.device = hw::load_device(device); });
  if (!network.empty()) wrap("--network", [&] { s.network = hw::load_network(network); });
  // Every override first, then each description checked once: a model's hidden size and heads change together
  // (--set model.hidden=2304 --set model.heads=24), whatever the order.
  std::string model_where, device_where, network_where;
  for (const std::string& kv : o.set) {
    auto eq = kv.find('='), dot = kv.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq)
      throw hw::SpecError(fmt::format("--set: expected model.FIELD=VALUE, device.FIELD=VALUE or network.FIELD=VALUE, got '{}'", kv));
    const std::string part = kv.substr(0, dot), key = kv.substr(dot + 1, eq - dot - 1), value = kv.substr(eq + 1);
    const std::string where = "--set " + kv;
    if (part == "model") hw::apply_override(hw::model_fields(), s.model, key, value, where), model_where = where;
    else if (part == "device") hw::apply_override(hw::device_fields(), s.device, key, value, where), device_where = where;
    else if (part == "network") hw::apply_override(hw::network_fields(), s.network, key, value, where), network_where = where;
    else throw hw::SpecError(fmt::format("--set {}: expected model., device. or network. before the field", kv));
  }
  if (!model_where.empty()) s.model.validate(model_where);
  if (!device_where.empty()) s.device.validate(device_where);
  if (!network_where.empty()) s.network.validate(network_where);
  if (o.microbatch_size < 0) throw hw::SpecError("--microbatch-size must be at least 1");
  if (o.microbatch_size > 0) s.microbatch_size = o.microbatch_size;
  if (o.seq < 0) throw hw::SpecError("--seq must be at least 1");
  if (o.seq > 0) s.seq = o.seq;
  else if (!base || s.seq == 0) s.seq = s.model.seq;
  if (!o.recompute.empty()) s.recompute = hw::recompute_from_name(o.recompute, "--recompute");
  if (!o.attention.empty()) s.attention = hw::attention_from_name(o.attention, "--attention");
  if (!o.elementwise.empty()) s.elementwise = hw::elementwise_from_name(o.elementwise, "--elementwise");
  if (!o.tp_overlap.empty()) s.tp_overlap = hw::tp_overlap_from_name(o.tp_overlap, "--tp-overlap");
  if (!o.moe_dispatcher.empty())
    s.moe_dispatcher = hw::moe_dispatcher_from_name(o.moe_dispatcher, "--moe-dispatcher");
  if (!o.expert_gemm.empty()) s.expert_gemm = hw::expert_gemm_from_name(o.expert_gemm, "--expert-gemm");
  if (o.fp8 || o.fp8_all_gather) s.fp8 = true;
  if (o.fp8_all_gather) s.fp8_all_gather = true;
  s.validate(o.fp8 || o.fp8_all_gather                            ? "--fp8"
             : !o.moe_dispatcher.empty() && !s.model.moe() ? "--moe-dispatcher"
             : !o.expert_gemm.empty() && !s.model.moe()    ? "--expert-gemm"
                                                           : "--attention");
  return s;
}

std::vector<std::string> hardware_defaults(const HardwareOptions& o, bool has_base) {
  std::vector<std::string> notes;
  if (has_base) return notes;
  if (o.device.empty()) notes.push_back(fmt::format("device {} (no --device given)", kDefaultDevice));
  if (o.network.empty()) notes.push_back(fmt::format("network {} (no --network given)", kDefaultNetwork));
  return notes;
}

void apply_hardware(ScheduleHeader& header, const HardwareOptions& o) {
  hw::HardwareSetting hs = hardware_setting(o, header.hardware);
  if (header.layout) hw::partition_layers(hs.model, header.layers, &*header.layout);  // the layout fits the model
  if (!header.layout && hs.model.blocks < header.layers)
    throw hw::SpecError(fmt::format("the schedule has {} layers but the model '{}' has {} blocks (each layer needs "
                                    "at least one block)",
                                    header.layers, hs.model.preset, hs.model.blocks));
  header.cost_model = "hardware";
  header.hardware = hs;
}

}  // namespace trainsim::apps
