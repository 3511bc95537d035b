#include "hardware/network.h"

#include <fmt/format.h>

namespace trainsim::hw {

Link NetworkSpec::link_for(const std::vector<int>& ranks) const {
  bool one_node = true;
  for (int r : ranks) one_node = one_node && node_of(r) == node_of(ranks.front());
  return one_node ? Link{intra_latency_s, intra_bandwidth} : Link{inter_latency_s, inter_bandwidth};
}

void NetworkSpec::validate(const std::string& where) const {
  auto need = [&](bool ok, const char* field, double v, const char* what) {
    if (!ok) throw SpecError(fmt::format("{}: field '{}': {}, got {}", where, field, what, v));
  };
  need(gpus_per_node >= 1, "gpus_per_node", gpus_per_node, "must be at least 1");
  need(intra_bandwidth > 0, "intra_bandwidth", intra_bandwidth, "must be positive (bytes/s)");
  need(inter_bandwidth > 0, "inter_bandwidth", inter_bandwidth, "must be positive (bytes/s)");
  need(intra_latency_s >= 0, "intra_latency_s", intra_latency_s, "must be at least 0 (seconds)");
  need(inter_latency_s >= 0, "inter_latency_s", inter_latency_s, "must be at least 0 (seconds)");
}

const std::vector<Field<NetworkSpec>>& network_fields() {
  using N = NetworkSpec;
  static const std::vector<Field<N>> f = {
      field("gpus_per_node", &N::gpus_per_node),     field("intra_bandwidth", &N::intra_bandwidth),
      field("intra_latency_s", &N::intra_latency_s), field("inter_bandwidth", &N::inter_bandwidth),
      field("inter_latency_s", &N::inter_latency_s),
  };
  return f;
}

const std::vector<std::string>& network_preset_names() {
  static const std::vector<std::string> names{"nvlink8-ib400", "cpu", "custom"};
  return names;
}

NetworkSpec network_preset(const std::string& name) {
  NetworkSpec n;
  if (name == "nvlink8-ib400") {
    // A DGX H100-style cluster. Inside a node: 8 GPUs on NVLink 4, 900 GB/s total per GPU (NVIDIA H100
    // datasheet, "NVLink: 900GB/s"), i.e. 450 GB/s each way. Between nodes: one 400 Gb/s NDR InfiniBand
    // adapter per GPU (ConnectX-7, as in the DGX H100), 50 GB/s each way. Latency per ring step: NCCL's own
    // model for the Ring algorithm and Simple protocol (src/graph/tuning.cc, hwLat: NVLink 3.4 us, NET 14 us).
    n.gpus_per_node = 8;
    n.intra_bandwidth = 450e9, n.intra_latency_s = 3.4e-6;
    n.inter_bandwidth = 50e9, n.inter_latency_s = 14e-6;
  } else if (name == "cpu") {
    // The executor's CPU backend: every rank a thread of one process, messages copied in memory. One "node"
    // holds every rank. Bandwidth and latency as fitted by `trainsim calibrate` with the cpu device
    // (bench/calibration_fidelity.sh, idle machine, 2026-11-24; bench/README.md), rounded to 3 digits:
    // 4.21e9 bytes/s; the latency fitted to 0 (the per-op dispatch gap of the cpu device holds the waits).
    n.gpus_per_node = 1 << 20;
    n.intra_bandwidth = n.inter_bandwidth = 4.21e9;
    n.intra_latency_s = n.inter_latency_s = 0;
  } else if (name != "custom") {
    std::string list;
    for (const auto& p : network_preset_names()) list += (list.empty() ? "" : ", ") + p;
    throw SpecError(fmt::format("unknown network '{}' (the presets are: {}; or a JSON file)", name, list));
  }
  n.preset = name;
  return n;
}

NetworkSpec network_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw SpecError(fmt::format("{}: expected a JSON object describing a network", where));
  std::string base = "custom";
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) throw SpecError(fmt::format("{}: field 'preset': expected a string", where));
    base = j["preset"].get<std::string>();
  }
  NetworkSpec n;
  try {
    n = network_preset(base);
  } catch (const SpecError& e) {
    throw SpecError(fmt::format("{}: field 'preset': {}", where, e.what()));
  }
  apply_json(network_fields(), n, j, where, {"preset"});
  n.validate(where);
  return n;
}

nlohmann::ordered_json to_json(const NetworkSpec& n) {
  nlohmann::ordered_json j;
  j["preset"] = n.preset;
  j.update(fields_json(network_fields(), n));
  return j;
}

}  // namespace trainsim::hw
