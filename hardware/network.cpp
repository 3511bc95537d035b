#include "hardware/network.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace trainsim::hw {

GroupShape NetworkSpec::shape_of(const std::vector<int>& ranks) const {
  GroupShape g;
  g.ranks = static_cast<int>(ranks.size());
  std::map<int, int> per_node;
  for (int r : ranks) ++per_node[node_of(r)];
  g.nodes = static_cast<int>(per_node.size());
  for (const auto& [node, n] : per_node) g.ranks_per_node = std::max(g.ranks_per_node, n);
  return g;
}

Link NetworkSpec::p2p_link(int from, int to) const {
  return node_of(from) == node_of(to) ? Link{intra_latency_s, intra_bandwidth} : Link{inter_latency_s, inter_bandwidth};
}

void NetworkSpec::validate(const std::string& where) const {
  auto need = [&](bool ok, const char* field, double v, const char* what) {
    if (!ok) throw SpecError(fmt::format("{}: field '{}': {}, got {}", where, field, what, v));
  };
  need(gpus_per_node >= 1, "gpus_per_node", gpus_per_node, "must be at least 1");
  need(intra_bandwidth > 0, "intra_bandwidth", intra_bandwidth, "must be positive (bytes/s)");
  need(inter_bandwidth > 0, "inter_bandwidth", inter_bandwidth, "must be positive (bytes/s)");
  need(nics_per_node >= 1, "nics_per_node", nics_per_node, "must be at least 1");
  need(nvls_bandwidth >= 0, "nvls_bandwidth", nvls_bandwidth, "must be at least 0 (bytes/s; 0: no NVLS)");
  for (auto [v, name] : {std::pair{intra_latency_s, "intra_latency_s"}, {inter_latency_s, "inter_latency_s"},
                         {collective_latency_s, "collective_latency_s"}, {tree_intra_latency_s, "tree_intra_latency_s"},
                         {tree_inter_latency_s, "tree_inter_latency_s"}, {nvls_latency_s, "nvls_latency_s"}})
    need(v >= 0, name, v, "must be at least 0 (seconds)");
}

const std::vector<Field<NetworkSpec>>& network_fields() {
  using N = NetworkSpec;
  static const std::vector<Field<N>> f = {
      field("gpus_per_node", &N::gpus_per_node),
      field("intra_bandwidth", &N::intra_bandwidth),
      field("intra_latency_s", &N::intra_latency_s),
      field("inter_bandwidth", &N::inter_bandwidth),
      field("inter_latency_s", &N::inter_latency_s),
      field("nics_per_node", &N::nics_per_node),
      field("collective_latency_s", &N::collective_latency_s),
      field("tree_intra_latency_s", &N::tree_intra_latency_s),
      field("tree_inter_latency_s", &N::tree_inter_latency_s),
      field("nvls_bandwidth", &N::nvls_bandwidth),
      field("nvls_latency_s", &N::nvls_latency_s),
  };
  return f;
}

const std::vector<std::string>& network_preset_names() {
  static const std::vector<std::string> names{"nvlink8-ib400", "nvlink5-ib400", "nvlink8-ib200", "cpu", "custom"};
  return names;
}

namespace {

// NCCL's own performance model (NVIDIA/nccl, src/graph/tuning.cc, ncclTopoTuneModel, NCCL 2.18-2.19), the
// constants it predicts the Simple protocol's time with: per ring step 3.4 us over NVLink and 14 us over the
// network (hwLat[...][Ring][Simple]), a base latency of 8.4 us per ring collective (baseLat[Ring][Simple]),
// 28 us per tree hop over NVLink and per tree level over the network (hwLat[...][Tree][Simple]), 23 us for an
// NVLS all-reduce (hwLat[NVLINK][NVLS][Simple]).
void nccl_latencies(NetworkSpec& n) {
  n.intra_latency_s = 3.4e-6, n.inter_latency_s = 14e-6;
  n.collective_latency_s = 8.4e-6;
  n.tree_intra_latency_s = 28e-6, n.tree_inter_latency_s = 28e-6;
  n.nvls_latency_s = 23e-6;
}

}  // namespace

NetworkSpec network_preset(const std::string& name) {
  NetworkSpec n;
  if (name == "nvlink8-ib400") {
    // A DGX H100-class cluster (also Meta's Grand Teton, whose hosts have 8 H100 on NVLink and 400 Gb/s per GPU:
    // torchtitan benchmarks/llama3_h100_202412_torchtitan.md). Inside a node: 8 GPUs on NVSwitch, 18 NVLink 4
    // links per H100 (NVIDIA H100 datasheet: "NVLink: 900GB/s", 18 links of 50 GB/s both ways), each worth
    // 20.6 GB/s of bus bandwidth in NCCL's model (src/graph/topo.h, SM90_NVLINK_BW): 370.8 GB/s. Between
    // nodes: 8 ConnectX-7 adapters of 400 Gb/s, one per GPU (DGX H100 datasheet), 50 GB/s each way. NVLink
    // SHARP (third-generation NVSwitch): "a 2X increase in all-reduce throughput within eight H100 GPU
    // servers compared to the previous-generation A100" (NVIDIA NVLink and NVSwitch product page), twice the
    // A100's 240 GB/s below: 480 GB/s. Latencies: NCCL's model (nccl_latencies).
    n.gpus_per_node = 8;
    n.intra_bandwidth = 18 * 20.6e9;
    n.inter_bandwidth = 50e9, n.nics_per_node = 8;
    n.nvls_bandwidth = 480e9;
    nccl_latencies(n);
  } else if (name == "nvlink5-ib400") {
    // A DGX B200-class cluster: 8 B200 per node on fifth-generation NVLink, 18 links per GPU (DGX B200
    // datasheet: "14.4TB/s aggregate NVLink bandwidth", 1.8 TB/s per GPU both ways), each worth 40.1 GB/s of bus
    // bandwidth in NCCL's model (src/graph/topo.h, SM100_NVLINK_BW): 721.8 GB/s; between nodes 8 ConnectX-7 of
    // 400 Gb/s, one per GPU (ibid.). NVLink SHARP is not modelled here (no published all-reduce figure in the
    // sources used): all-reduces go by ring or tree. Latencies: NCCL's model (nccl_latencies).
    n.gpus_per_node = 8;
    n.intra_bandwidth = 18 * 40.1e9;
    n.inter_bandwidth = 50e9, n.nics_per_node = 8;
    nccl_latencies(n);
    n.nvls_latency_s = 0;
  } else if (name == "nvlink8-ib200") {
    // A DGX A100-class cluster such as NVIDIA's Selene (Narayanan et al. 2021, §5: "Each cluster node has 8
    // NVIDIA 80-GB A100 GPUs connected to each other by NVLink and NVSwitch. Each node has eight NVIDIA
    // Mellanox 200Gbps HDR Infiniband HCAs"). 12 NVLink 3 links per A100 (NVIDIA A100 datasheet: 600 GB/s, 12
    // links of 50 GB/s both ways), 20.0 GB/s of bus bandwidth each in NCCL's model (SM80_NVLINK_BW): 240
    // GB/s; 8 HDR adapters of 200 Gb/s, 25 GB/s each way; no NVLS (second-generation NVSwitch).
    n.gpus_per_node = 8;
    n.intra_bandwidth = 12 * 20.0e9;
    n.inter_bandwidth = 25e9, n.nics_per_node = 8;
    nccl_latencies(n);
    n.nvls_latency_s = 0;
  } else if (name == "cpu") {
    // The executor's CPU backend: every rank a thread of one process, messages copied in memory. One "node"
    // holds every rank. Bandwidth and latency as fitted by `trainsim calibrate` with the cpu device
    // (bench/calibration_fidelity.sh, idle machine, 2026-11-28, after issue 23's fifth round; bench/README.md),
    // rounded to 3 digits: 1.03e9 bytes/s; the latency fitted to 0 (the per-op dispatch gap of the cpu device
    // holds the waits).
    n.gpus_per_node = 1 << 20;
    n.intra_bandwidth = n.inter_bandwidth = 1.03e9;
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
