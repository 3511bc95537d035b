#include "sim/cost_model.h"

#include <cmath>
#include <stdexcept>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace trainsim {

namespace {
// The TP degree of a compute op's weight slice (its weight grad's, for a weight-grad pass that reads no
// weight); 1 without tensor parallelism.
Time tp_degree(const Op& op) {
  for (const Tensor& t : op.reads)
    if (t.kind == TensorKind::Weight && t.tp_sliced()) return t.tp_size;
  for (const Tensor& t : op.writes)
    if (t.kind == TensorKind::WeightGrad && t.tp_sliced()) return t.tp_size;
  return 1;
}
// The expert slice an op computes (its first expert tensor read), or null (docs/design.md, "Mixture of Experts").
const Tensor* expert_read(const Op& op) {
  for (const Tensor& t : op.reads)
    if (t.expert()) return &t;
  return nullptr;
}
}  // namespace

void CostModel::set_expert_load(std::vector<double> load) {
  double total = 0;
  for (double v : load) {
    if (!std::isfinite(v) || v <= 0) throw std::invalid_argument("an expert slice's load must be finite and above 0");
    total += v;
  }
  for (double& v : load) v *= static_cast<double>(load.size()) / total;
  expert_load_ = std::move(load);
}

double CostModel::expert_load_factor(int index, int count) const {
  if (expert_load_.size() != static_cast<std::size_t>(count) || index < 0 || index >= count) return 1;
  return expert_load_[static_cast<std::size_t>(index)];
}

double CostModel::expert_share(const Op& op) const {
  const Tensor* t = expert_read(op);
  return t ? expert_load_factor(t->ep_index, t->ep_size) / t->ep_size : 1.0;
}

// `t` times `share`, exact when the share is 1 (every op but an expert slice's with unequal loads or EP > 1).
static Time scaled(Time t, double share) {
  return share == 1.0 ? t : static_cast<Time>(std::llround(static_cast<double>(t) * share));
}


Time PuzzleCostModel::duration(const Op& op, int /*group_size*/) const {
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward:
      return seconds(op.batches.size() * expert_share(op)) / tp_degree(op);
    // The puzzles have no split backward; each half costs half a full backward.
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight:
      return seconds(0.5 * op.batches.size() * expert_share(op)) / tp_degree(op);
    case OpKind::Update: return seconds(0.5);
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
    case OpKind::Barrier:
    case OpKind::Broadcast:
    case OpKind::Reduce:
    case OpKind::AllToAll: return seconds(0.3);
    case OpKind::Send:
    case OpKind::Recv: return seconds(0.2);
    case OpKind::Loss:
    case OpKind::Load:
    case OpKind::Accumulate:
    case OpKind::Free: return 0;
  }
  return 0;
}

double PuzzleCostModel::memory(const Tensor& t) const {
  return units(t, t.expert() ? expert_load_factor(t.ep_index, t.ep_size) : 1.0);
}

double PuzzleCostModel::units(const Tensor& t, double load) {
  switch (t.kind) {
    case TensorKind::Weight:
    case TensorKind::OptState:
    case TensorKind::WeightGrad:
      // Shards held over the shard count, as the puzzles compute it, then a TP slice's share.
      // An expert slice holds 1/e of the layer's experts, counted here as 1/e of a layer's weight.
      return kHidden * kHidden * t.shards.size() / t.num_shards / (t.tp_sliced() ? t.tp_size : 1) /
             (t.expert() ? t.ep_size : 1);
    case TensorKind::Activation:
    case TensorKind::ActivationGrad:
      // An expert slice's tokens: 1/e of the EP group's batches with balanced routing, times the slice's load.
      return kHidden * kLength * t.batches.size() / (t.tp_sliced() ? t.tp_size : 1) /
             (t.expert() ? t.ep_size / load : 1);
  }
  return 0;
}

UnitCostModel::UnitCostModel(int stages, int layers) {
  if (stages < 1 || layers < stages)
    throw std::invalid_argument("the unit cost model needs 1 <= stages <= layers, got " + std::to_string(stages) +
                                " stages over " + std::to_string(layers) + " layers");
  // Rounded to the nearest nanosecond, exactly, in integers (stages and layers are ints).
  const auto ratio = [&](std::int64_t num, std::int64_t den) { return (2 * num + den) / (2 * den); };
  per_batch_ = ratio(kTicksPerSecond * stages, layers);
  half_batch_ = ratio(kTicksPerSecond * stages, 2 * static_cast<std::int64_t>(layers));
}

UnitCostModel::UnitCostModel(int stages, const std::vector<int>& blocks_per_layer) {
  long long total = 0;
  for (int b : blocks_per_layer) {
    if (b < 0) throw std::invalid_argument("the unit cost model needs layers of 0 or more blocks, got " + std::to_string(b));
    total += b;
  }
  if (stages < 1 || total < 1)
    throw std::invalid_argument("the unit cost model needs 1 <= stages and at least one block, got " +
                                std::to_string(stages) + " stages over " + std::to_string(total) + " blocks");
  // Rounded to the nearest nanosecond, exactly (in 128 bits: 1e9 x stages x blocks exceeds 64).
  const auto ratio = [](__int128 num, __int128 den) { return static_cast<Time>((2 * num + den) / (2 * den)); };
  for (int b : blocks_per_layer) {
    layer_per_batch_.push_back(ratio(static_cast<__int128>(kTicksPerSecond) * stages * b, total));
    layer_half_batch_.push_back(ratio(static_cast<__int128>(kTicksPerSecond) * stages * b, 2 * total));
  }
  per_batch_ = ratio(static_cast<__int128>(kTicksPerSecond) * stages, static_cast<__int128>(blocks_per_layer.size()));
  half_batch_ = ratio(static_cast<__int128>(kTicksPerSecond) * stages, 2 * static_cast<__int128>(blocks_per_layer.size()));
}

Time UnitCostModel::per_batch(int layer) const {
  if (layer >= 0 && layer < static_cast<int>(layer_per_batch_.size())) return layer_per_batch_[layer];
  return per_batch_;
}

Time UnitCostModel::duration(const Op& op, int /*group_size*/) const {
  const auto n = static_cast<Time>(op.batches.size());
  const bool by_layer = op.layer >= 0 && op.layer < static_cast<int>(layer_per_batch_.size());
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward: return scaled(n * (by_layer ? layer_per_batch_[op.layer] : per_batch_), expert_share(op));
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight:
      return scaled(n * (by_layer ? layer_half_batch_[op.layer] : half_batch_), expert_share(op));
    default: return 0;
  }
}

std::unique_ptr<CostModel> make_cost_model(const std::string& name) {
  if (name == "puzzle") return std::make_unique<PuzzleCostModel>();
  if (name == "unit") return std::make_unique<UnitCostModel>();
  throw std::invalid_argument("unknown cost model '" + name + "' (expected puzzle or unit)");
}

}  // namespace trainsim
