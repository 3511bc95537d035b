#include "sim/cost_model.h"

#include <stdexcept>

namespace trainsim {

Time PuzzleCostModel::duration(const Op& op, int /*group_size*/) const {
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward:
      return seconds(op.batches.size());
    // The puzzles have no split backward; each half costs half a full backward.
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight:
      return seconds(0.5 * op.batches.size());
    case OpKind::Update: return seconds(0.5);
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
    case OpKind::Barrier: return seconds(0.3);
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
      return kHidden * kHidden * t.shards.size() / t.num_shards;
    case TensorKind::Activation:
    case TensorKind::ActivationGrad:
      return kHidden * kLength * t.batches.size();
  }
  return 0;
}

Time UnitCostModel::duration(const Op& op, int /*group_size*/) const {
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward: return seconds(op.batches.size());
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight: return seconds(0.5 * op.batches.size());
    default: return 0;
  }
}

std::unique_ptr<CostModel> make_cost_model(const std::string& name) {
  if (name == "puzzle") return std::make_unique<PuzzleCostModel>();
  if (name == "unit") return std::make_unique<UnitCostModel>();
  throw std::invalid_argument("unknown cost model '" + name + "' (expected puzzle or unit)");
}

}  // namespace trainsim
