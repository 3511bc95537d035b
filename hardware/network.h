// Interconnect descriptions for the hardware cost model (DESIGN §2): nodes of `gpus_per_node` ranks
// (rank r sits on node r / gpus_per_node), a fast link inside a node and a slower one between nodes, each an
// alpha-beta pair (latency per ring step, bandwidth per rank and direction). hardware/comm.h turns them into
// collective times.
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

/// A cluster's interconnect.
struct NetworkSpec {
  std::string preset = "custom";
  int gpus_per_node = 1;
  double intra_bandwidth = 0;   ///< bytes/s per rank and direction inside a node
  double intra_latency_s = 0;   ///< seconds per step inside a node
  double inter_bandwidth = 0;   ///< bytes/s per rank and direction between nodes
  double inter_latency_s = 0;   ///< seconds per step between nodes

  /// The node of a rank.
  int node_of(int rank) const { return rank / gpus_per_node; }
  /// The link a group of ranks communicates over: intra-node when every member sits on one node, else the
  /// inter-node link (a ring that crosses nodes runs at its slowest hop).
  Link link_for(const std::vector<int>& ranks) const;
  /// Throws SpecError naming `where` and the field.
  void validate(const std::string& where) const;
  friend bool operator==(const NetworkSpec&, const NetworkSpec&) = default;
};

const std::vector<Field<NetworkSpec>>& network_fields();
/// nvlink8-ib400, cpu, custom.
const std::vector<std::string>& network_preset_names();
/// Throws SpecError listing the presets.
NetworkSpec network_preset(const std::string& name);
NetworkSpec network_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::ordered_json to_json(const NetworkSpec& n);

}  // namespace trainsim::hw
