#include "sim/all_to_all.h"

#include <fmt/format.h>

namespace trainsim {

namespace {

const char* what_kind(TensorKind k) { return k == TensorKind::Activation ? "activation" : "activation grad"; }

// Dispatch: the inputs' batches united, each member's kept for the combine.
std::vector<Tensor> dispatch(std::span<const Tensor* const> in, std::vector<IdSet>& origins) {
  const int n = static_cast<int>(in.size());
  const Tensor& first = *in[0];
  IdSet all;
  for (int m = 0; m < n; ++m) {
    const Tensor& t = *in[m];
    if (t.kind != TensorKind::Activation && t.kind != TensorKind::ActivationGrad)
      throw AllToAllError(m, fmt::format("an all-to-all moves tokens (activations or their grads), not {}", t.str()));
    const Route want = t.kind == TensorKind::Activation ? Route::Routed : Route::None;
    if (t.route != want || t.partial || t.tp_size != 1 || !t.complete())
      throw AllToAllError(
          m, t.kind == TensorKind::Activation
                 ? fmt::format("a dispatch sends the router's output, an activation in state <routed> (A{}{{...}}<routed>), "
                               "not {}",
                               t.layer, t.str())
                 : fmt::format("a dispatch of grads sends the complete grad of the layer's output, not {}", t.str()));
    if (t.kind != first.kind || t.layer != first.layer)
      throw AllToAllError(m, fmt::format("the members dispatch different tensors: {} and {}", first.str(), t.str()));
    if (t.batches.intersects(all))
      throw AllToAllError(m, fmt::format("batches {{{}}} of {} are dispatched by two members; each member sends "
                                         "its own tokens",
                                         (t.batches & all).str(), t.str()));
    all = all | t.batches;
    origins.push_back(t.batches);
  }
  std::vector<Tensor> out;
  out.reserve(n);
  for (int m = 0; m < n; ++m) {
    Tensor t = first;
    t.batches = all;
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
    std::vector<IdSet> origins;
    std::vector<Tensor> out = dispatch(in, origins);
    auto [it, fresh] = dispatched_.try_emplace({first.kind, first.layer, out[0].batches}, std::move(origins));
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
  std::vector<Tensor> out;
  out.reserve(n);
  for (int m = 0; m < n; ++m) {
    Tensor t = first;
    t.batches = it->second[m];
    t.ep_size = 0, t.ep_index = 0;
    t.route = t.kind == TensorKind::Activation ? Route::None : Route::Routed;
    out.push_back(std::move(t));
  }
  dispatched_.erase(it);
  return out;
}

}  // namespace trainsim
