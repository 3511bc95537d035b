#include "sim/cost_model.h"

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
}  // namespace

Time PuzzleCostModel::duration(const Op& op, int /*group_size*/) const {
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward:
      return seconds(op.batches.size()) / tp_degree(op);
    // The puzzles have no split backward; each half costs half a full backward.
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight:
      return seconds(0.5 * op.batches.size()) / tp_degree(op);
    case OpKind::Update: return seconds(0.5);
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
    case OpKind::Barrier:
    case OpKind::Broadcast:
    case OpKind::Reduce: return seconds(0.3);
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
  switch (t.kind) {
    case TensorKind::Weight:
    case TensorKind::OptState:
    case TensorKind::WeightGrad:
      // Shards held over the shard count, as the puzzles compute it, then a TP slice's share.
      return kHidden * kHidden * t.shards.size() / t.num_shards / (t.tp_sliced() ? t.tp_size : 1);
    case TensorKind::Activation:
    case TensorKind::ActivationGrad:
      return kHidden * kLength * t.batches.size() / (t.tp_sliced() ? t.tp_size : 1);
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

Time UnitCostModel::duration(const Op& op, int /*group_size*/) const {
  const auto n = static_cast<Time>(op.batches.size());
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward: return n * per_batch_;
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight: return n * half_batch_;
    default: return 0;
  }
}

std::unique_ptr<CostModel> make_cost_model(const std::string& name) {
  if (name == "puzzle") return std::make_unique<PuzzleCostModel>();
  if (name == "unit") return std::make_unique<UnitCostModel>();
  throw std::invalid_argument("unknown cost model '" + name + "' (expected puzzle or unit)");
}

}  // namespace trainsim
