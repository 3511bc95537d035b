#include "schedules/update_check.h"

#include <fmt/format.h>

namespace trainsim {

// The algebra already checked every batch's grad: this counts layers and shards only.
void UpdateCheck::add(const Op& op) {
  if (problem_) return;
  const Tensor& w = op.writes.front();
  if (w.step != 1) {
    problem_ = op_error(op, fmt::format("layer {} is updated again (to step {}); every layer is updated exactly once",
                                        op.layer, w.step));
    return;
  }
  const Tensor& shards = w;
  auto [tp, first] = tp_size_.try_emplace(op.layer, w.tp_size);
  if (!first && tp->second != w.tp_size) {
    problem_ = op_error(op, fmt::format("layer {} is updated as TP slices of {} here but of {} elsewhere", op.layer,
                                        w.tp_size, tp->second));
    return;
  }
  auto [it, fresh] = covered_.try_emplace({op.layer, w.tp_index()}, shards);
  if (fresh) return;
  Tensor& c = it->second;
  if (c.num_shards != shards.num_shards) {
    // Mixed shardings of one layer: count shard fractions by the finer one when both cover fully.
    if (!(c.complete() || shards.complete())) {
      problem_ = op_error(op, fmt::format("layer {} is updated in {} shards here but in {} elsewhere", op.layer,
                                          shards.num_shards, c.num_shards));
      return;
    }
    if (shards.complete()) c = shards;
  } else {
    c.shards = c.shards | shards.shards;
  }
}

void UpdateCheck::finish() const {
  if (problem_) throw *problem_;
  // Layers 0..layers-1 in order, each of its slices 0..t-1 in order, stopping at the first gap (a 100-byte
  // file may declare a million layers).
  auto it = covered_.begin();
  for (int l = 0; l < layers_; ++l) {
    auto tp = tp_size_.find(l);
    if (tp == tp_size_.end()) throw SimError(fmt::format("layer {} is never updated", l));
    for (int j = 0; j < tp->second; ++j, ++it) {
      if (it == covered_.end() || it->first != std::pair{l, j})
        throw SimError(fmt::format("layer {}: TP slice {} of {} is never updated", l, j, tp->second));
      const Tensor& c = it->second;
      if (!c.complete())
        throw SimError(fmt::format("layer {}: shards {} of {}{} are never updated", l,
                                   (IdSet::range(0, c.num_shards) - c.shards).str(), c.num_shards,
                                   tp->second > 1 ? fmt::format(" of TP slice {}", j) : ""));
    }
  }
}

}  // namespace trainsim
