#include "sim/all_to_all.h"

#include <fmt/format.h>

namespace trainsim {

namespace {

const char* what_kind(TensorKind k) { return k == TensorKind::Activation ? "activation" : "activation grad"; }

// Dispatch: the inputs' tokens united, each member's kept for the combine. A member sends whole microbatches, or with
// tensor and sequence parallelism under the EP group (Megatron-Core's folded layout, ETP 1) its sequence shard of
// them; the group's pieces must be disjoint and cover every shard of the microbatches they name, so the experts see
// whole microbatches.
std::vector<Tensor> dispatch(std::span<const Tensor* const> in, std::vector<AllToAllGroup::Origin>& origins) {
  const int n = static_cast<int>(in.size());
  const Tensor& first = *in[0];
  // Sequence shards come from tensor parallelism: at most Tensor::kMaxTpSize of them.
  if (first.num_shards < 1 || first.num_shards > Tensor::kMaxTpSize)
    throw AllToAllError(0, fmt::format("a dispatch sends whole microbatches or a sequence shard of at most {} (one per "
                                       "TP rank), not {}",
                                       Tensor::kMaxTpSize, first.str()));
  std::vector<IdSet> by_shard(static_cast<std::size_t>(first.num_shards));  // shard -> batches sent
  for (int m = 0; m < n; ++m) {
    const Tensor& t = *in[m];
    if (t.kind != TensorKind::Activation && t.kind != TensorKind::ActivationGrad)
      throw AllToAllError(m, fmt::format("an all-to-all moves tokens (activations or their grads), not {}", t.str()));
    const Route want = t.kind == TensorKind::Activation ? Route::Routed : Route::None;
    if (t.route != want || t.partial || t.tp_size != 1)
      throw AllToAllError(
          m, t.kind == TensorKind::Activation
                 ? fmt::format("a dispatch sends the router's output, an activation in state <routed> (A{}{{...}}<routed>), "
                               "not {}",
                               t.layer, t.str())
                 : fmt::format("a dispatch of grads sends the complete grad of the layer's output (or its sequence "
                               "shard), not {}",
                               t.str()));
    if (t.kind != first.kind || t.layer != first.layer || t.num_shards != first.num_shards)
      throw AllToAllError(m, fmt::format("the members dispatch different tensors: {} and {}", first.str(), t.str()));
    for (int s : t.shards.ids()) {
      if (s < 0 || s >= t.num_shards) throw AllToAllError(m, fmt::format("{} holds no shard {}", t.str(), s));
      IdSet& sent = by_shard[static_cast<std::size_t>(s)];
      if (t.batches.intersects(sent))
        throw AllToAllError(m, fmt::format("batches {{{}}} of {} are dispatched by two members; each member sends "
                                           "its own tokens",
                                           (t.batches & sent).str(), t.str()));
      sent = sent | t.batches;
    }
    origins.push_back({t.batches, t.shards, t.num_shards});
  }
  // The same sequence shards of every microbatch sent: all of them (an EP group of whole TP groups, expert TP 1),
  // or with expert tensor parallelism the shards of this EP group's TP index, which the expert-TP group all-gathers.
  IdSet all, held;
  for (std::size_t s = 0; s < by_shard.size(); ++s) {
    if (by_shard[s].empty()) continue;
    if (held.empty()) all = by_shard[s];
    held = held | IdSet{static_cast<int>(s)};
    if (by_shard[s] != all)
      throw AllToAllError(0, fmt::format("the EP group dispatches batches {{{}}} of {} by sequence shard {} of {} but "
                                         "batches {{{}}} by shard {}: its members must send the same sequence shards "
                                         "of every microbatch they send (an EP group of whole TP groups, or with "
                                         "expert tensor parallelism one TP index of each)",
                                         all.str(), first.str(), held.ids().front(), first.num_shards,
                                         by_shard[s].str(), s));
  }
  const bool whole = held.size() == first.num_shards;
  std::vector<Tensor> out;
  out.reserve(n);
  for (int m = 0; m < n; ++m) {
    Tensor t = first;
    t.batches = all;
    t.shards = whole ? IdSet{0} : held;
    t.num_shards = whole ? 1 : first.num_shards;
    t.route = Route::ExpertIn;
    t.ep_size = static_cast<std::uint16_t>(n);
    t.ep_index = static_cast<std::uint16_t>(m);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

std::vector<Tensor> AllToAllGroup::call(std::span<const Tensor* const> in) {
  const int n = static_cast<int>(in.size());
  if (n == 0) return {};
  if (n > Tensor::kMaxEpSize)
    throw AllToAllError(0, fmt::format("an all-to-all over {} members: the EP degree is at most {}", n, Tensor::kMaxEpSize));
  const Tensor& first = *in[0];
  if (!first.expert()) {
    Dispatched d;
    std::vector<Tensor> out = dispatch(in, d.origins);
    d.shards = out[0].shards, d.num_shards = out[0].num_shards;
    auto [it, fresh] = dispatched_.try_emplace({first.kind, first.layer, out[0].batches}, std::move(d));
    if (!fresh)
      throw AllToAllError(0, fmt::format("{}{} is dispatched again before its combine", out[0].str(),
                                         route_words(out[0])));
    return out;
  }
  for (int m = 0; m < n; ++m) {
    const Tensor& t = *in[m];
    if (t.route != Route::ExpertOut)
      throw AllToAllError(
          m, t.route == Route::ExpertIn
                 ? fmt::format("{} holds the tokens the experts received, not their output: run the experts "
                               "(forward or backward with the expert weight) before the combine",
                               t.str())
                 : fmt::format("a combine sends what the experts gave (A{}{{...}}<e{}/{}:out>), not {}", t.layer, m, n,
                               t.str()));
    if (t.ep_size != n || t.ep_index != m)
      throw AllToAllError(m, fmt::format("{} is expert slice {} of {}, but it is member {} of an EP group of {}",
                                         t.str(), t.ep_index, t.ep_size, m, n));
    if (t.kind != first.kind || t.layer != first.layer || t.batches != first.batches)
      throw AllToAllError(m, fmt::format("the members combine different tokens: {} and {}", first.str(), t.str()));
  }
  auto it = dispatched_.find({first.kind, first.layer, first.batches});
  if (it == dispatched_.end())
    throw AllToAllError(0, fmt::format("{} was never dispatched over this group: a combine returns the tokens a "
                                       "dispatch of the same {} sent",
                                       first.str(), what_kind(first.kind)));
  for (int m = 0; m < n; ++m) {
    const Tensor& t = *in[m];
    if (t.tp_size != 1)
      throw AllToAllError(m, t.partial ? fmt::format("{} is a partial sum over the expert-TP group: reduce-scatter it "
                                                     "there before the combine",
                                                     t.str())
                                       : fmt::format("a combine sends the experts' tokens, not a TP slice ({})", t.str()));
    if (t.shards != it->second.shards || t.num_shards != it->second.num_shards)
      throw AllToAllError(m, fmt::format("{} holds sequence shards {} of {}, but the dispatch gave the experts shards {} "
                                         "of {}: the combine sends back what the dispatch gave",
                                         t.str(), t.shards.str(), t.num_shards, it->second.shards.str(),
                                         it->second.num_shards));
  }
  const std::vector<Origin>& origins = it->second.origins;
  std::vector<Tensor> out;
  out.reserve(n);
  for (int m = 0; m < n; ++m) {
    Tensor t = first;
    t.batches = origins[m].batches;
    t.shards = origins[m].shards;
    t.num_shards = origins[m].num_shards;
    t.ep_size = 0, t.ep_index = 0;
    t.route = t.kind == TensorKind::Activation ? Route::None : Route::Routed;
    out.push_back(std::move(t));
  }
  dispatched_.erase(it);
  return out;
}

}  // namespace trainsim
