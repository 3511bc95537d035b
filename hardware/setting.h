// A hardware setting: the model, device and network a schedule is costed on, and the training shape
// (sequences per microbatch, sequence length, activation recomputation). It is what the `.sched` header's
// `cost_model hardware` block holds (docs/schedule-format.md) and what the generators' and `trainsim sim`'s
// --model/--device/--network flags build.
#pragma once

#include <string>

#include "hardware/device.h"
#include "hardware/model.h"
#include "hardware/network.h"

namespace trainsim::hw {

/// Activation recomputation (Korthikanti et al. 2022): none, selective (the attention core is recomputed in
/// the backward, its s² activations are not kept), full (only each block's input is kept; the backward
/// recomputes the block's forward first).
enum class Recompute { None, Selective, Full };

const char* recompute_name(Recompute r);
/// "none", "selective" or "full"; throws SpecError naming `where`.
Recompute recompute_from_name(const std::string& name, const std::string& where);

/// Everything the hardware cost model needs besides the schedule.
struct HardwareSetting {
  ModelSpec model;
  DeviceSpec device;
  NetworkSpec network;
  int microbatch_size = 1;  ///< sequences per microbatch (b)
  int seq = 0;              ///< tokens per sequence (s); 0 = the model's default
  Recompute recompute = Recompute::None;

  /// The sequence length in use: seq, or the model's when 0.
  int seq_len() const { return seq > 0 ? seq : model.seq; }
  /// Tokens of one microbatch: b·s.
  double tokens_per_microbatch() const { return static_cast<double>(microbatch_size) * seq_len(); }

  friend bool operator==(const HardwareSetting&, const HardwareSetting&) = default;
};

/// The header text of a model, device or network: its preset then " key=value" for each field that differs
/// from the preset ("llama3-8b", "h100-sxm efficiency.forward=0.61"). Canonical: fixed field order.
std::string spec_text(const ModelSpec& m);
std::string spec_text(const DeviceSpec& d);
std::string spec_text(const NetworkSpec& n);

/// Parse the words of a header line back ("llama3-8b", "blocks=40", ...): the preset, then overrides.
/// `where` ("file.sched:5") names the place in errors (SpecError). Validated.
ModelSpec model_from_words(const std::vector<std::string>& words, const std::string& where);
DeviceSpec device_from_words(const std::vector<std::string>& words, const std::string& where);
NetworkSpec network_from_words(const std::vector<std::string>& words, const std::string& where);

/// A model, device or network from a command-line value: a preset name, or a path to a JSON file (a value
/// ending in ".json" or naming an existing file). Throws SpecError naming the file and field.
ModelSpec load_model(const std::string& value);
DeviceSpec load_device(const std::string& value);
NetworkSpec load_network(const std::string& value);

}  // namespace trainsim::hw
