// Which ops are tensor-parallel communication (docs/design.md, "Tensor parallelism: slices and partial sums").
#pragma once

#include "sim/op.h"

namespace trainsim {

/// True for a tensor-parallel collective: a collective whose tensor is a partial sum over TP slices (the TP
/// all-reduce, or its reduce-scatter with sequence parallelism) or an activation or activation grad (sequence
/// parallelism's all-gather). Data-parallel collectives move weights and weight grads. The timeline and the
/// Perfetto trace draw TP collectives in a colour and category of their own.
inline bool is_tp_collective(const Op& op) {
  // (an all-to-all moves activations too, over an EP group: expert parallelism's, drawn apart)
  if (!is_collective(op.kind) || op.kind == OpKind::AllToAll || op.reads.empty()) return false;
  const Tensor& t = op.reads.front();
  return t.partial || t.kind == TensorKind::Activation || t.kind == TensorKind::ActivationGrad;
}

}  // namespace trainsim
