#include "schedules/update_check.h"

#include <fmt/format.h>

namespace trainsim {

// Layer `w.layer` has experts in slices of `w.ep_size`; false (the problem kept) when another op said otherwise.
bool UpdateCheck::note_experts(const Op& op, const Tensor& w) {
  auto [ep, fresh] = ep_size_.try_emplace(w.layer, w.ep_size);
  if (fresh || ep->second == w.ep_size) return true;
  problem_ = op_error(op, fmt::format("layer {}'s experts are expert slices of {} here but of {} elsewhere", w.layer,
                                      w.ep_size, ep->second));
  return false;
}

// The algebra already checked every batch's grad: this counts layers and shards only.
void UpdateCheck::add(const Op& op) {
  if (problem_) return;
  if (op.kind == OpKind::Load) {
    for (const Tensor& t : op.writes)
      if (t.kind == TensorKind::Weight && t.expert()) note_experts(op, t);
    return;
  }
  if (op.kind != OpKind::Update || op.writes.empty()) return;
  const Tensor& w = op.writes.front();
  if (w.step != 1) {
    problem_ = op_error(op, w.expert() ? fmt::format("layer {}'s expert slice {} of {} is updated again (to step {}); "
                                                     "every layer and expert slice is updated exactly once",
                                                     op.layer, w.ep_index, w.ep_size, w.step)
                                       : fmt::format("layer {} is updated again (to step {}); every layer is updated "
                                                     "exactly once",
                                                     op.layer, w.step));
    return;
  }
  const Tensor& shards = w;
  auto [tp, first] = tp_size_.try_emplace({op.layer, w.expert()}, w.tp_size);
  if (!first && tp->second != w.tp_size) {
    problem_ = op_error(op, fmt::format("layer {} is updated as TP slices of {} here but of {} elsewhere", op.layer,
                                        w.tp_size, tp->second));
    return;
  }
  if (w.expert() && !note_experts(op, w)) return;
  auto [it, fresh] = covered_.try_emplace({op.layer, w.expert() ? w.ep_index : -1, w.tp_index()}, shards);
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
  // Layers 0..layers-1 in order; in each, the dense weight's TP slices, then each expert slice's, stopping at the
  // first gap (a 100-byte file may declare a million layers).
  auto it = covered_.begin();
  for (int l = 0; l < layers_; ++l) {
    auto tp = tp_size_.find({l, false});
    if (tp == tp_size_.end()) throw SimError(fmt::format("layer {} is never updated", l));
    auto ep = ep_size_.find(l);
    const int parts = ep == ep_size_.end() ? 0 : ep->second;
    for (int part = -1; part < parts; ++part) {
      auto expert_tp = tp_size_.find({l, true});
      if (part >= 0 && expert_tp == tp_size_.end())
        throw SimError(fmt::format("layer {}: its experts (expert slices of {}) are never updated", l, parts));
      const int t = part < 0 ? tp->second : expert_tp->second;
      const std::string expert = part < 0 ? "" : fmt::format(" of expert slice {} of {}", part, parts);
      for (int j = 0; j < t; ++j, ++it) {
        if (it == covered_.end() || it->first != std::tuple{l, part, j}) {
          if (part >= 0 && j == 0)
            throw SimError(fmt::format("layer {}: expert slice {} of {} is never updated", l, part, parts));
          throw SimError(fmt::format("layer {}: TP slice {} of {}{} is never updated", l, j, t, expert));
        }
        const Tensor& c = it->second;
        if (!c.complete())
          throw SimError(fmt::format("layer {}: shards {} of {}{}{} are never updated", l,
                                     (IdSet::range(0, c.num_shards) - c.shards).str(), c.num_shards,
                                     t > 1 ? fmt::format(" of TP slice {}", j) : "", expert));
      }
    }
  }
}

}  // namespace trainsim
