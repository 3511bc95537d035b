// Command-line options that choose a hardware setting (hardware/setting.h), shared by `trainsim gen` and
// `trainsim sim`: --model, --device, --network (a preset or a JSON file), --microbatch-size, --seq,
// --recompute, --attention, --elementwise, --tp-overlap, --fp8, --fp8-all-gather, and --set KEY=VALUE overrides ("model.hidden=4096", "device.efficiency.forward=0.6",
// "network.inter_bandwidth=25e9").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "hardware/setting.h"
#include "schedules/schedule.h"

namespace trainsim::apps {

struct HardwareOptions {
  std::string model, device, network;
  /// A model built in memory (gen --from-megatron / --from-torchtitan), taking the place of --model.
  std::optional<hw::ModelSpec> model_spec;
  int microbatch_size = 0;  // 0: 1, or the schedule's
  int seq = 0;              // 0: the model's, or the schedule's
  std::string recompute;    // "": none, or the schedule's
  std::string attention;    // "": flash, or the schedule's
  std::string elementwise;  // "": fused, or the schedule's
  std::string tp_overlap;   // "": backward, or the schedule's
  std::string moe_dispatcher;  // "": nccl, or the schedule's
  std::string expert_gemm;     // "": per-expert, or the schedule's
  bool fp8 = false;         // FP8 linear layers (else: the schedule's)
  bool fp8_all_gather = false;  // and FP8 weight all-gathers
  std::vector<std::string> set;

  /// True when any option was given.
  bool any() const {
    return !model.empty() || model_spec || !device.empty() || !network.empty() || microbatch_size > 0 || seq > 0 ||
           !recompute.empty() || !attention.empty() || !elementwise.empty() || !tp_overlap.empty() || !moe_dispatcher.empty() ||
           !expert_gemm.empty() || fp8 ||
           fp8_all_gather || !set.empty();
  }
};

/// Registers the options on `cmd`.
void add_hardware_options(CLI::App* cmd, HardwareOptions& o);

/// The device and network every command assumes when a model is given without them (gen, sim, validate, the
/// importers and plan alike): an H100 SXM on DGX H100's network.
inline constexpr const char* kDefaultDevice = "h100-sxm";
inline constexpr const char* kDefaultNetwork = "nvlink8-ib400";

/// The setting the options describe, on top of `base` (a schedule's block) when given. Without a base, --model is
/// required and --device and --network default to kDefaultDevice and kDefaultNetwork. Throws hw::SpecError naming
/// the option, file and field.
hw::HardwareSetting hardware_setting(const HardwareOptions& o, const std::optional<hw::HardwareSetting>& base = {});
/// What hardware_setting assumed for options left out ("device h100-sxm (no --device given)"), for the commands
/// to print as notes; none with a base (the schedule's block fills them).
std::vector<std::string> hardware_defaults(const HardwareOptions& o, bool has_base);

/// Switches a schedule's `header` to the hardware cost model with the setting the options give on top of its
/// block (used by `sim`, `validate` and `gen`). Throws hw::SpecError as hardware_setting does, when the
/// model has fewer blocks than the schedule has layers (each layer needs at least one block), and when the
/// header's stage layout holds another number of blocks than the model.
void apply_hardware(ScheduleHeader& header, const HardwareOptions& o);

}  // namespace trainsim::apps
