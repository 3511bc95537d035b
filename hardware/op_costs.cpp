#include "hardware/op_costs.h"

#include <fmt/format.h>

namespace trainsim::hw {

std::vector<LayerContent> partition_layers(const ModelSpec& model, int layers, const StageLayout* layout) {
  if (layout) {
    if (layout->layers() != layers)
      throw SpecError(fmt::format("the layout '{}' has {} stages but the schedule has {} layers (one stage per "
                                  "schedule layer)",
                                  layout->str(), layout->layers(), layers));
    if (layout->blocks() != model.blocks)
      throw SpecError(fmt::format("the layout '{}' holds {} blocks but the model '{}' has {} (set model.blocks={} or "
                                  "change the layout)",
                                  layout->str(), layout->blocks(), model.preset, model.blocks, layout->blocks()));
    return layout->contents();
  }
  if (layers < 1 || model.blocks < layers)
    throw SpecError(fmt::format("the schedule has {} layers but the model '{}' has {} blocks: each schedule layer "
                                "needs at least one block",
                                layers, model.preset, model.blocks));
  return StageLayout::even(model.blocks, layers).contents();
}

Work& Work::operator+=(const Work& o) {
  forward_flops += o.forward_flops;
  backward_input_flops += o.backward_input_flops;
  backward_weight_flops += o.backward_weight_flops;
  attention_flops += o.attention_flops;
  bytes += o.bytes;
  return *this;
}

Work block_forward(const ModelSpec& m, double tokens, int seq, TpSplit tp) {
  const double h = m.hidden, f = m.ffn, kv = static_cast<double>(m.kv_width()), e = m.activation_bytes;
  // t = 1 divides by 1 (exact): the figures without TP are the same bytes as before TP existed.
  const double t = tp.degree, replicated = tp.sequence_parallel ? t : 1;
  Work w;
  const double matrix = h * (h + 2 * kv) + h * h + (m.gated_ffn ? 3 : 2) * h * f;
  w.forward_flops = 2 * tokens * matrix / t;
  w.attention_flops = 4 * tokens * seq * h / t;
  // Norms and residual adds (replicated over the TP group; SP: on s/t tokens), the MLP activation and the
  // rotary embedding (on this rank's FFN columns and heads).
  double per_token = (4 * h * e + 6 * h * e) / replicated + (m.gated_ffn ? 3 : 2) * f * e / t;
  if (!m.learned_positions) per_token += 2 * (h + kv) * e / t;
  w.bytes = tokens * per_token;
  return w;
}

Work compute_work(const HardwareSetting& s, const LayerContent& layer, OpKind kind, int batches, double params,
                  TpSplit tp) {
  const ModelSpec& m = s.model;
  const double tokens = s.tokens_per_microbatch() * batches;
  const double h = m.hidden, V = m.vocab, e = m.activation_bytes;
  const double t = tp.degree, replicated = tp.sequence_parallel ? t : 1;
  Work fwd = block_forward(m, tokens, s.seq_len(), tp);
  fwd.forward_flops *= layer.num_blocks, fwd.attention_flops *= layer.num_blocks, fwd.bytes *= layer.num_blocks;
  Work head;  // final norm (replicated) + LM head (column-parallel over the vocabulary), forward
  if (layer.head) head.forward_flops = 2 * tokens * h * V / t, head.bytes = tokens * 2 * h * e / replicated;
  Work w;
  auto backward_input = [&] {
    Work b;
    b.backward_input_flops = fwd.forward_flops + head.forward_flops;
    b.attention_flops = 2 * fwd.attention_flops;
    b.bytes = 2 * (fwd.bytes + head.bytes);
    if (s.recompute == Recompute::Full) {
      b.forward_flops += fwd.forward_flops;
      b.attention_flops += fwd.attention_flops;
      b.bytes += fwd.bytes;
    } else if (s.recompute == Recompute::Selective) {
      b.attention_flops += fwd.attention_flops;
    }
    return b;
  };
  auto backward_weight = [&] {
    Work b;
    b.backward_weight_flops = fwd.forward_flops + head.forward_flops;
    // Scatter-add of the whole output grad into this rank's rows of the embedding grad.
    if (layer.embedding) b.bytes += tokens * h * (e + m.grad_bytes / t);
    return b;
  };
  switch (kind) {
    case OpKind::Forward:
      w = fwd;
      w += head;
      // The gather: this rank's rows of the (vocabulary-parallel) table, the whole (masked) output.
      if (layer.embedding) w.bytes += tokens * h * (m.weight_bytes / t + e);
      return w;
    case OpKind::BackwardInput: return backward_input();
    case OpKind::BackwardWeight: return backward_weight();
    case OpKind::Backward:
      w = backward_input();
      w += backward_weight();
      return w;
    case OpKind::Loss: w.bytes = tokens * V * (8 + e) / t; return w;
    case OpKind::Update: {
      const double state = m.master_bytes > 0 ? m.master_bytes : m.weight_bytes;
      w.bytes = params * (2 * state + 2 * m.optimizer_bytes + m.grad_bytes + (m.master_bytes > 0 ? m.weight_bytes : 0));
      return w;
    }
    default: return w;
  }
}

TpCollectives tp_collectives_inside(const LayerContent& layer, OpKind kind, Recompute r, bool sequence_parallel) {
  const int k2 = 2 * layer.num_blocks;
  // `reduce`: the sums of partial sums (all-reduces; with SP reduce-scatters), `gather`: with SP the
  // all-gathers of sequence shards. The forward's are the backward's conjugates with the embedding's and the
  // head's roles swapped; the schedule's explicit ops take one of each at the layer's boundary.
  int reduce = 0, gather = 0, recomputed = 0;
  switch (kind) {
    case OpKind::Forward:
      reduce = k2 + (layer.embedding ? 1 : 0) - (layer.head ? 0 : 1);
      gather = k2 + (layer.head ? 1 : 0) - (layer.embedding ? 0 : 1);
      break;
    case OpKind::Backward:
    case OpKind::BackwardInput:
      reduce = k2 + (layer.head ? 1 : 0) - (layer.embedding ? 0 : 1);
      gather = k2 + (layer.embedding ? 1 : 0) - (layer.head ? 0 : 1);
      if (r == Recompute::Full) recomputed = k2;
      break;
    default: return {};
  }
  TpCollectives c;
  if (sequence_parallel) {
    c.reduce_scatters = reduce + recomputed;
    c.all_gathers = gather + recomputed;
  } else {
    c.all_reduces = reduce + recomputed;
  }
  return c;
}

double work_seconds(const DeviceSpec& d, const Work& w) {
  if (w.flops() == 0 && w.bytes == 0) return 0;
  const EfficiencyTable& e = d.efficiency;
  return w.forward_flops / (d.peak_flops * e.forward) + w.backward_input_flops / (d.peak_flops * e.backward_input) +
         w.backward_weight_flops / (d.peak_flops * e.backward_weight) +
         w.attention_flops / (d.peak_flops * e.attention) + w.bytes / (d.hbm_bandwidth * e.memory) + e.op_overhead_s;
}

}  // namespace trainsim::hw
