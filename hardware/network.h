// Interconnect descriptions for the hardware cost model (DESIGN §2), as NCCL uses them: nodes of
// `gpus_per_node` ranks (rank r sits on node r / gpus_per_node) joined inside by NVLink/NVSwitch, and between
// nodes by `nics_per_node` network adapters (rail-optimised: a collective that crosses nodes uses the NICs of
// every member GPU of each node, not one NIC). hardware/comm.h turns a collective over a group into NCCL's
// algorithm choice (ring, tree, NVLS) and its time. docs/hardware-model.md gives every preset number's source.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware/fields.h"

namespace trainsim::hw {

/// Latency and bandwidth of one kind of link.
struct Link {
  double latency_s = 0;   ///< alpha: seconds per message (p2p) or per ring step (collectives)
  double bandwidth = 0;   ///< beta^-1: bytes/s one rank sends (and receives) at once
};

/// Where a group's ranks sit: how many, on how many nodes, and the most on one node.
struct GroupShape {
  int ranks = 0;          ///< n: members
  int nodes = 0;          ///< N: nodes holding at least one member
  int ranks_per_node = 0; ///< ppn: the most members on one node
};

/// A cluster's interconnect. Bandwidths are bytes/s per direction, latencies seconds.
struct NetworkSpec {
  std::string preset = "custom";
  int gpus_per_node = 1;
  /// NVLink bus bandwidth of one GPU inside a node: what a ring collective's bus bandwidth (nccl-tests'
  /// busbw) reaches over NVLink, and a send inside a node.
  double intra_bandwidth = 0;
  double intra_latency_s = 0;   ///< per ring step inside a node (and a send's latency there)
  double inter_bandwidth = 0;   ///< one network adapter (NIC), per direction
  double inter_latency_s = 0;   ///< per ring step that crosses nodes (and a send's latency between nodes)
  int nics_per_node = 1;        ///< NICs of a node; GPU i of a node uses NIC i·nics/gpus (rail-optimised)
  double collective_latency_s = 0;  ///< fixed cost of every ring collective (NCCL's base latency)
  double tree_intra_latency_s = 0;  ///< per tree hop inside a node (NCCL's tree, all-reduce across nodes)
  double tree_inter_latency_s = 0;  ///< per tree level between nodes
  double nvls_bandwidth = 0;    ///< NVLink SHARP all-reduce bus bandwidth inside a node; 0: no NVLS
  double nvls_latency_s = 0;    ///< fixed cost of an NVLS all-reduce

  /// The node of a rank.
  int node_of(int rank) const { return rank / gpus_per_node; }
  /// Where `ranks` sit (O(n): call it once per group, not per op).
  GroupShape shape_of(const std::vector<int>& ranks) const;
  /// The link a message between two ranks takes: NVLink on one node, else one NIC.
  Link p2p_link(int from, int to) const;
  /// Throws SpecError naming `where` and the field.
  void validate(const std::string& where) const;
  friend bool operator==(const NetworkSpec&, const NetworkSpec&) = default;
};

const std::vector<Field<NetworkSpec>>& network_fields();
/// nvlink8-ib400, nvlink5-ib400, nvlink8-ib200, cpu, custom.
const std::vector<std::string>& network_preset_names();
/// Throws SpecError listing the presets.
NetworkSpec network_preset(const std::string& name);
NetworkSpec network_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::ordered_json to_json(const NetworkSpec& n);

}  // namespace trainsim::hw
