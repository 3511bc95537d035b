#include "sim/tensor.h"

#include <bit>
#include <vector>

#include <fmt/format.h>

namespace trainsim {

const char* short_name(TensorKind k) {
  switch (k) {
    case TensorKind::Weight: return "W";
    case TensorKind::OptState: return "O";
    case TensorKind::Activation: return "A";
    case TensorKind::ActivationGrad: return "dA";
    case TensorKind::WeightGrad: return "dW";
  }
  return "?";
}

const char* long_name(TensorKind k) {
  switch (k) {
    case TensorKind::Weight: return "weight";
    case TensorKind::OptState: return "optimizer state";
    case TensorKind::Activation: return "activation";
    case TensorKind::ActivationGrad: return "activation grad";
    case TensorKind::WeightGrad: return "weight grad";
  }
  return "?";
}

namespace {

// The slices of a bit set as an id set ("0-3", "1,3"), the way shards and batches are written.
IdSet slice_set(std::uint64_t bits) {
  std::vector<std::pair<int, int>> runs;
  for (int j = 0; j < Tensor::kMaxTpSize; ++j) {
    if (!(bits >> j & 1)) continue;
    if (!runs.empty() && runs.back().second == j) ++runs.back().second;
    else runs.emplace_back(j, j + 1);
  }
  return IdSet::from_runs(std::move(runs));
}

// The same TP slice (or partial sum) and the same expert slice and token state.
bool same_tp(const Tensor& a, const Tensor& b) {
  return a.tp_size == b.tp_size && a.partial == b.partial && a.tp_slices == b.tp_slices && a.route == b.route &&
         a.ep_size == b.ep_size && a.ep_index == b.ep_index;
}

Tensor make(TensorKind kind, int layer, int step, int num_shards, IdSet batches, IdSet shards) {
  Tensor t;
  t.kind = kind;
  t.layer = layer;
  t.step = step;
  t.num_shards = num_shards;
  t.batches = std::move(batches);
  t.shards = std::move(shards);
  return t;
}

void check_tp_range(const Tensor& t, int index, int count) {
  if (count < 1 || count > Tensor::kMaxTpSize)
    throw TensorError(fmt::format("TP degree {} of {} is out of range (1 to {})", count, t.str(), Tensor::kMaxTpSize));
  if (index < 0 || index >= count)
    throw TensorError(fmt::format("TP slice {} of {} is out of range for {}", index, count, t.str()));
  if (t.tp_size != 1) throw TensorError(fmt::format("{} is already split over a TP group", t.str()));
}

}  // namespace

int Tensor::tp_index() const { return tp_slices ? std::countr_zero(tp_slices) : 0; }

std::string Tensor::str() const {
  std::string s = fmt::format("{}{}", short_name(kind), layer);
  bool batched = kind == TensorKind::Activation || kind == TensorKind::ActivationGrad || kind == TensorKind::WeightGrad;
  if (batched) s += fmt::format("{{{}}}", batches.str());
  if (tp_size != 1 || partial) s += fmt::format("<{}{}/{}>", partial ? "+" : "", slice_set(tp_slices).str(), tp_size);
  if (route == Route::Routed) s += "<routed>";
  if (expert()) s += fmt::format("<e{}/{}{}>", ep_index, ep_size, route == Route::ExpertOut ? ":out" : "");
  if (num_shards != 1) s += fmt::format("[{}/{}]", shards.str(), num_shards);
  if (step != 0) s += fmt::format("@{}", step);
  return s;
}

Tensor weight_tensor(int layer, IdSet shards, int num_shards, int step) {
  return make(TensorKind::Weight, layer, step, num_shards, {}, std::move(shards));
}

Tensor opt_state_tensor(int layer, IdSet shards, int num_shards, int step) {
  return make(TensorKind::OptState, layer, step, num_shards, {}, std::move(shards));
}

Tensor activation_tensor(int layer, IdSet batches) {
  return make(TensorKind::Activation, layer, 0, 1, std::move(batches), {0});
}

Tensor activation_grad_tensor(int layer, IdSet batches) {
  return make(TensorKind::ActivationGrad, layer, 0, 1, std::move(batches), {0});
}

Tensor weight_grad_tensor(int layer, IdSet batches, IdSet shards, int num_shards) {
  return make(TensorKind::WeightGrad, layer, 0, num_shards, std::move(batches), std::move(shards));
}

std::uint64_t all_tp_slices(int count) {
  return count >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << count) - 1;
}

Tensor tp_slice(Tensor t, int index, int count) {
  check_tp_range(t, index, count);
  if (t.partial) throw TensorError(fmt::format("{} is a partial sum, not a tensor to split", t.str()));
  t.tp_size = static_cast<std::uint16_t>(count);
  t.tp_slices = std::uint64_t{1} << index;
  return t;
}

namespace {

void check_ep_range(const Tensor& t, int index, int count) {
  if (count < 1 || count > Tensor::kMaxEpSize)
    throw TensorError(fmt::format("EP degree {} of {} is out of range (1 to {})", count, t.str(), Tensor::kMaxEpSize));
  if (index < 0 || index >= count)
    throw TensorError(fmt::format("expert slice {} of {} is out of range for {}", index, count, t.str()));
  if (t.expert()) throw TensorError(fmt::format("{} is already an expert slice", t.str()));
}

}  // namespace

Tensor expert_slice(Tensor t, int index, int count) {
  check_ep_range(t, index, count);
  if (t.kind == TensorKind::Activation || t.kind == TensorKind::ActivationGrad)
    throw TensorError(fmt::format("{} is an activation or its grad: tokens reach an expert slice by a dispatch "
                                  "all-to-all, not as a slice",
                                  t.str()));
  t.ep_size = static_cast<std::uint16_t>(count);
  t.ep_index = static_cast<std::uint16_t>(index);
  return t;
}

Tensor routed_as(Tensor t, Route r, int index, int count) {
  if (t.kind != TensorKind::Activation && t.kind != TensorKind::ActivationGrad)
    throw TensorError(fmt::format("only activations and activation grads are routed to experts, not {}", t.str()));
  if (t.expert() || t.route != Route::None) throw TensorError(fmt::format("{} is routed already", t.str()));
  t.route = r;
  if (r == Route::ExpertIn || r == Route::ExpertOut) {
    check_ep_range(t, index, count);
    t.ep_size = static_cast<std::uint16_t>(count);
    t.ep_index = static_cast<std::uint16_t>(index);
  }
  return t;
}

std::string route_words(const Tensor& t) {
  switch (t.route) {
    case Route::None: return t.expert() ? fmt::format(" (expert slice {} of {})", t.ep_index, t.ep_size) : "";
    case Route::Routed: return " (tokens routed to experts that have not run)";
    case Route::ExpertIn: return fmt::format(" (the tokens expert slice {} of {} received)", t.ep_index, t.ep_size);
    case Route::ExpertOut: return fmt::format(" (what expert slice {} of {} gives back)", t.ep_index, t.ep_size);
  }
  return "";
}

Tensor tp_partial(Tensor t, int index, int count) {
  if (t.kind != TensorKind::Activation && t.kind != TensorKind::ActivationGrad)
    throw TensorError(fmt::format("only activations and their grads are partial sums, not {}", t.str()));
  t = tp_slice(std::move(t), index, count);
  t.partial = count > 1;
  if (count == 1) t.tp_size = 1;
  return t;
}

namespace {

// The sum of two partial sums of one tensor over disjoint TP slices.
Tensor sum_partials(const Tensor& a, const Tensor& b) {
  if (!a.partial || !b.partial)
    throw TensorError(fmt::format("adding {} + {}: only weight grads and partial sums add up, and a partial sum "
                                  "adds only to another",
                                  a.str(), b.str()));
  if (a.kind != b.kind || a.layer != b.layer || a.batches != b.batches || a.shards != b.shards ||
      a.num_shards != b.num_shards || a.tp_size != b.tp_size || a.route != b.route || a.ep_size != b.ep_size ||
      a.ep_index != b.ep_index)
    throw TensorError(fmt::format("adding partial sums of different tensors: {} + {}", a.str(), b.str()));
  if (a.tp_slices & b.tp_slices)
    throw TensorError(fmt::format("adding partial sums that both hold TP slices {}: {} + {}",
                                  slice_set(a.tp_slices & b.tp_slices).str(), a.str(), b.str()));
  Tensor out = a;
  out.tp_slices = a.tp_slices | b.tp_slices;
  if (out.tp_slices == all_tp_slices(out.tp_size)) out.partial = false, out.tp_size = 1, out.tp_slices = 1;
  return out;
}

}  // namespace

Tensor sum(const Tensor& a, const Tensor& b) {
  if (a.partial || b.partial) return sum_partials(a, b);
  if (a.kind != TensorKind::WeightGrad || b.kind != TensorKind::WeightGrad)
    throw TensorError(fmt::format("only weight grads add up, not {} + {}", a.str(), b.str()));
  if (a.layer != b.layer)
    throw TensorError(fmt::format("adding weight grads of different layers: {} + {}", a.str(), b.str()));
  if (!same_tp(a, b))
    throw TensorError(fmt::format("adding weight grads of different {} slices: {} + {}",
                                  a.ep_size != b.ep_size || a.ep_index != b.ep_index ? "expert" : "TP", a.str(), b.str()));
  if (a.shards != b.shards || a.num_shards != b.num_shards)
    throw TensorError(fmt::format("adding weight grads of different shards: {} + {}", a.str(), b.str()));
  if (a.batches.intersects(b.batches))
    throw TensorError(fmt::format("adding weight grads that both hold batches {{{}}}: {} + {}",
                                  (a.batches & b.batches).str(), a.str(), b.str()));
  Tensor out = a;
  out.batches = a.batches | b.batches;
  return out;
}

Tensor combine(const Tensor& a, const Tensor& b) {
  if (a.kind != b.kind || a.layer != b.layer || a.step != b.step || a.batches != b.batches ||
      a.num_shards != b.num_shards || !same_tp(a, b))
    throw TensorError(fmt::format("combining shards of different tensors: {} and {}", a.str(), b.str()));
  Tensor out = a;
  out.shards = a.shards | b.shards;
  return out;
}

Tensor shard(const Tensor& t, int index, int count) {
  if (t.partial)
    throw TensorError(fmt::format("sharding {} needs the complete sum; it holds the terms of TP slices {} of {} only",
                                  t.str(), slice_set(t.tp_slices).str(), t.tp_size));
  if (!t.complete())
    throw TensorError(fmt::format("sharding {} needs the complete tensor (holds shards {} of {})", t.str(),
                                  t.shards.str(), t.num_shards));
  if (count < 1 || index < 0 || index >= count)
    throw TensorError(fmt::format("shard {} of {} is out of range for {}", index, count, t.str()));
  Tensor out = t;
  out.shards = IdSet{index};
  out.num_shards = count;
  return out;
}

}  // namespace trainsim
