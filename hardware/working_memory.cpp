#include "hardware/working_memory.h"

#include <algorithm>
#include <cmath>

#include "hardware/model.h"

namespace trainsim::hw {

namespace {

// The compute op's layer content, tokens and TP degree.
struct OpShape {
  LayerContent layer;
  double n = 0;  // tokens
  int t = 1;     // TP degree of the op's slice
};

OpShape shape_of(const HardwareSetting& s, const TensorSizes& sizes, const Op& op) {
  OpShape o;
  const auto& layers = sizes.layers();
  if (op.layer >= 0 && op.layer < static_cast<int>(layers.size())) o.layer = layers[op.layer];
  o.n = s.tokens_per_microbatch() * op.batches.size();
  for (const TensorList* list : {&op.reads, &op.writes})
    for (const Tensor& t : *list) o.t = std::max(o.t, static_cast<int>(t.tp_size));
  return o;
}

}  // namespace

double op_temporary_bytes(const HardwareSetting& s, const TensorSizes& sizes, const Op& op, int group_size) {
  const ModelSpec& m = s.model;
  const double e = m.activation_bytes;
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward:
    case OpKind::BackwardInput: {
      const OpShape o = shape_of(s, sizes, op);
      if (o.layer.num_blocks == 0) {
        // The embedding or the head alone: the head's input grads (backward), nothing else worth counting.
        return op.kind == OpKind::Forward || !o.layer.head ? 0.0 : 2.0 * e * o.n * m.hidden;
      }
      const double h = m.hidden, f = static_cast<double>(m.ffn) / o.t;
      const double q = static_cast<double>(m.heads) / o.t * m.head_dim(), scores = static_cast<double>(m.heads) / o.t * s.seq_len();
      const double recomputed = 3 * h + 4 * q + 3 * f + scores;  // a block's saved activations beyond its input
      if (op.kind == OpKind::Forward) return s.recompute == Recompute::Full ? e * o.n * recomputed : 0.0;
      // The first block run (the layer's last) writes the grad of its input into a buffer of its own unless it is
      // the layer's output grad (one block, no embedding).
      const bool own_dx = o.layer.num_blocks > 1 || o.layer.embedding;
      double block = (own_dx ? h : 0) + 2 * h + 2 * f + 3 * q + std::max({scores, 3 * q, h});
      if (s.recompute == Recompute::Selective) block += scores;
      if (s.recompute == Recompute::Full) block += recomputed;
      if (o.layer.head) block -= h;  // the head's input grad (h) held, its saved inputs (2h) freed
      return e * o.n * std::max(block, o.layer.head ? 2 * h : 0.0);
    }
    case OpKind::Loss: {
      const OpShape o = shape_of(s, sizes, op);
      return 4.0 * o.n;  // the targets
    }
    case OpKind::ReduceScatter: {
      if (op.reads.empty() || group_size < 1) return 0;
      const Tensor& in = op.reads.front();
      if (in.kind != TensorKind::WeightGrad) return 0;
      const double bytes = sizes.wire_bytes(in);
      const double per = m.grad_bytes;
      const double elements = std::round(bytes / per);
      const double chunk = std::ceil(elements / group_size);
      return chunk * group_size == elements ? 0.0 : chunk * group_size * per;
    }
    default: return 0;
  }
}

double op_working_bytes(const HardwareSetting& s, const TensorSizes& sizes, const Op& op, int group_size) {
  double out = op_temporary_bytes(s, sizes, op, group_size);
  if (op.kind != OpKind::Free)
    for (const Tensor& t : op.writes) out += sizes.wire_bytes(t);
  return out;
}

}  // namespace trainsim::hw
