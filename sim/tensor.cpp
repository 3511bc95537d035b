#include "sim/tensor.h"

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

std::string Tensor::str() const {
  std::string s = fmt::format("{}{}", short_name(kind), layer);
  bool batched = kind == TensorKind::Activation || kind == TensorKind::ActivationGrad || kind == TensorKind::WeightGrad;
  if (batched) s += fmt::format("{{{}}}", batches.str());
  if (num_shards != 1) s += fmt::format("[{}/{}]", shards.str(), num_shards);
  if (step != 0) s += fmt::format("@{}", step);
  return s;
}

Tensor weight_tensor(int layer, IdSet shards, int num_shards, int step) {
  return Tensor{TensorKind::Weight, layer, step, num_shards, {}, std::move(shards)};
}

Tensor opt_state_tensor(int layer, IdSet shards, int num_shards, int step) {
  return Tensor{TensorKind::OptState, layer, step, num_shards, {}, std::move(shards)};
}

Tensor activation_tensor(int layer, IdSet batches) {
  return Tensor{TensorKind::Activation, layer, 0, 1, std::move(batches), {0}};
}

Tensor activation_grad_tensor(int layer, IdSet batches) {
  return Tensor{TensorKind::ActivationGrad, layer, 0, 1, std::move(batches), {0}};
}

Tensor weight_grad_tensor(int layer, IdSet batches, IdSet shards, int num_shards) {
  return Tensor{TensorKind::WeightGrad, layer, 0, num_shards, std::move(batches), std::move(shards)};
}

Tensor sum(const Tensor& a, const Tensor& b) {
  if (a.kind != TensorKind::WeightGrad || b.kind != TensorKind::WeightGrad)
    throw TensorError(fmt::format("only weight grads add up, not {} + {}", a.str(), b.str()));
  if (a.layer != b.layer)
    throw TensorError(fmt::format("adding weight grads of different layers: {} + {}", a.str(), b.str()));
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
      a.num_shards != b.num_shards)
    throw TensorError(fmt::format("combining shards of different tensors: {} and {}", a.str(), b.str()));
  Tensor out = a;
  out.shards = a.shards | b.shards;
  return out;
}

Tensor shard(const Tensor& t, int index, int count) {
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
