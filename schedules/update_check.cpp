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
  auto [it, fresh] = covered_.try_emplace(op.layer, shards);
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
  int expected = 0;  // layers 0..expected-1 are covered completely
  for (const auto& [l, c] : covered_) {
    if (l != expected) break;
    if (!c.complete())
      throw SimError(fmt::format("layer {}: shards {} of {} are never updated", l,
                                 (IdSet::range(0, c.num_shards) - c.shards).str(), c.num_shards));
    ++expected;
  }
  if (expected < layers_) throw SimError(fmt::format("layer {} is never updated", expected));
}

}  // namespace trainsim
