// The `hardware` cost model (DESIGN §2): seconds and bytes for a schedule on a model, device and network.
//
// Compute ops take the time of their FLOPs and bytes (hardware/op_costs.h) under the device's efficiency
// table. A send takes the p2p time of its tensor (alpha + S/B over the link between the two ranks); its
// recv takes no time of its own (the stream engine starts it when the send has ended, so the message costs
// once). Collectives take the ring formulas (hardware/comm.h) over the group's link: intra-node when every
// member sits on one node, else inter-node. All-gather: S = the gathered tensor; reduce-scatter and
// all-reduce: S = the input grad; barrier: an all-reduce of no bytes. Load, free, accumulate: no time.
// Every timed op (compute, send, recv, collective) then takes the device's efficiency.dispatch_s more: the
// time from its inputs being ready to its start that no op's own time holds (hardware/device.h).
// Memory is in bytes (hardware/memory.h), rank-aware: the input of a layer's forward holds that forward's
// saved activations on the ranks that run it.
#pragma once

#include <memory>
#include <vector>

#include "hardware/memory.h"
#include "sim/cost_model.h"

namespace trainsim::hw {

class HardwareCostModel final : public CostModel {
 public:
  /// `groups`: collective groups by id, group 0 = every rank. `forward_layers[r]`: the layers whose forward
  /// rank r runs (1 = runs). Throws SpecError when the model has fewer blocks than `layers`.
  HardwareCostModel(HardwareSetting setting, int layers, int world_size, std::vector<std::vector<int>> groups,
                    std::vector<std::vector<char>> forward_layers);

  std::string name() const override { return "hardware"; }
  Time duration(const Op& op, int group_size) const override;
  double memory(const Tensor& t) const override { return sizes_.wire_bytes(t); }
  double memory(const Tensor& t, int rank) const override;
  std::string memory_unit() const override { return "bytes"; }

  /// Seconds of an op (before rounding to nanoseconds): its busy time plus, for a timed op, dispatch_s.
  double seconds_of(const Op& op, int group_size) const;
  const HardwareSetting& setting() const { return setting_; }
  const TensorSizes& sizes() const { return sizes_; }

 private:
  double busy_seconds(const Op& op, int group_size) const;  // without dispatch_s

  HardwareSetting setting_;
  TensorSizes sizes_;
  int world_size_;
  std::vector<std::vector<int>> groups_;
  std::vector<std::vector<char>> forward_layers_;
};

}  // namespace trainsim::hw
