#include "schedules/defaults.h"

#include "sim/algebra.h"

namespace trainsim {

std::optional<TensorList> default_reads(const Op& op, int layers, int microbatches) {
  const int l = op.layer;
  const IdSet& b = op.batches;
  switch (op.kind) {
    case OpKind::Forward: return TensorList{activation_tensor(l, b), weight_tensor(l)};
    case OpKind::Backward:
    case OpKind::BackwardInput:
      return TensorList{activation_tensor(l, b), activation_grad_tensor(l + 1, b), weight_tensor(l)};
    case OpKind::BackwardWeight: return TensorList{activation_tensor(l, b), activation_grad_tensor(l + 1, b)};
    case OpKind::Loss: return TensorList{activation_tensor(layers, b)};
    case OpKind::Update:
      return TensorList{weight_grad_tensor(l, IdSet::range(0, microbatches)), weight_tensor(l), opt_state_tensor(l)};
    default: return std::nullopt;
  }
}

std::optional<TensorList> default_writes(const Op& op, int layers, int /*microbatches*/) {
  const int l = op.layer;
  const IdSet& b = op.batches;
  switch (op.kind) {
    case OpKind::Forward: return TensorList{activation_tensor(l + 1, b)};
    case OpKind::Backward: return TensorList{weight_grad_tensor(l, b), activation_grad_tensor(l, b)};
    case OpKind::BackwardInput: return TensorList{activation_grad_tensor(l, b)};
    case OpKind::BackwardWeight: return TensorList{weight_grad_tensor(l, b)};
    case OpKind::Loss: return TensorList{activation_grad_tensor(layers, b)};
    case OpKind::Update: {
      // From the reads when they are given: the shards the optimizer state covers, one step later.
      const Tensor* w = nullptr;
      const Tensor* o = nullptr;
      for (const Tensor& t : op.reads) {
        if (t.kind == TensorKind::Weight) w = &t;
        if (t.kind == TensorKind::OptState) o = &t;
      }
      if (w && o) {
        try {
          Tensor no = *o;
          ++no.step;
          return TensorList{updated_weight(*w, *o), no};
        } catch (const TensorError&) {
          return std::nullopt;  // the algebra check reports it
        }
      }
      return TensorList{weight_tensor(l, {0}, 1, 1), opt_state_tensor(l, {0}, 1, 1)};
    }
    default: return std::nullopt;
  }
}

void fill_defaults(Op& op, int layers, int microbatches) {
  if (op.reads.empty())
    if (auto r = default_reads(op, layers, microbatches)) op.reads = std::move(*r);
  if (op.writes.empty())
    if (auto w = default_writes(op, layers, microbatches)) op.writes = std::move(*w);
}

Op compute(OpKind kind, int rank, int layer, IdSet batches, int layers, int microbatches) {
  Op op;
  op.kind = kind;
  op.rank = rank;
  op.layer = kind == OpKind::Loss ? layers : layer;
  op.batches = std::move(batches);
  fill_defaults(op, layers, microbatches);
  return op;
}

}  // namespace trainsim
