// The whole-schedule check of updates (DESIGN §1): every layer is updated exactly once, over all its shards
// (and with tensor parallelism, every TP slice of it over all the slice's shards; with Mixture of Experts, the
// layer's dense weight and every expert slice of it).
// The op algebra (sim/algebra.h) checks each update alone; this checks them together, fed each update as a
// simulation meets it and asked at the end.
#pragma once

#include <map>
#include <optional>
#include <tuple>

#include "sim/errors.h"
#include "sim/op.h"

namespace trainsim {

/// Coverage of the layers by the updates of one schedule of `layers` layers. O(updates log updates): a
/// 100-byte file may declare a million layers.
class UpdateCheck {
 public:
  explicit UpdateCheck(int layers) : layers_(layers) {}
  /// Counts one Update op (its first write is the weight it updates, as the algebra orders it); updates come
  /// in rank and program order. A Load op's expert weights say which layers have experts, and over how many
  /// expert slices: each of them must be updated too. Other ops are ignored. Never throws: the first problem (a
  /// layer updated twice, a layer updated in two incompatible shardings, TP or EP degrees) is kept, and later
  /// updates are ignored.
  void add(const Op& update);
  /// Throws SimError: the first problem add() met, else the first layer whose shards (or TP slices) are not
  /// all updated, or the first layer never updated.
  void finish() const;

 private:
  bool note_experts(const Op& op, const Tensor& w);

  int layers_;
  // (layer, expert slice or -1 for the dense weight, TP slice) -> the shards updated so far
  std::map<std::tuple<int, int, int>, Tensor> covered_;
  std::map<std::pair<int, bool>, int> tp_size_;  // (layer, expert) -> the TP degree of its updates
  std::map<int, int> ep_size_;                   // layer -> the EP degree of its expert slices (MoE layers)
  std::optional<SimError> problem_;
};

}  // namespace trainsim
