#include "hardware/op_costs.h"

#include <fmt/format.h>

namespace trainsim::hw {

std::vector<LayerContent> partition_layers(const ModelSpec& model, int layers) {
  if (layers < 1 || model.blocks < layers)
    throw SpecError(fmt::format("the schedule has {} layers but the model '{}' has {} blocks: each schedule layer "
                                "needs at least one block",
                                layers, model.preset, model.blocks));
  std::vector<LayerContent> out;
  for (int i = 0; i < layers; ++i) {
    long long lo = static_cast<long long>(i) * model.blocks / layers;
    long long hi = static_cast<long long>(i + 1) * model.blocks / layers;
    out.push_back({static_cast<int>(lo), static_cast<int>(hi - lo), i == 0, i == layers - 1});
  }
  return out;
}

Work& Work::operator+=(const Work& o) {
  forward_flops += o.forward_flops;
  backward_input_flops += o.backward_input_flops;
  backward_weight_flops += o.backward_weight_flops;
  attention_flops += o.attention_flops;
  bytes += o.bytes;
  return *this;
}

Work block_forward(const ModelSpec& m, double tokens, int seq) {
  const double h = m.hidden, f = m.ffn, kv = static_cast<double>(m.kv_width()), e = m.activation_bytes;
  Work w;
  const double matrix = h * (h + 2 * kv) + h * h + (m.gated_ffn ? 3 : 2) * h * f;
  w.forward_flops = 2 * tokens * matrix;
  w.attention_flops = 4 * tokens * seq * h;
  double per_token = 4 * h * e + 6 * h * e + (m.gated_ffn ? 3 : 2) * f * e;
  if (!m.learned_positions) per_token += 2 * (h + kv) * e;
  w.bytes = tokens * per_token;
  return w;
}

Work compute_work(const HardwareSetting& s, const LayerContent& layer, OpKind kind, int batches, double params) {
  const ModelSpec& m = s.model;
  const double tokens = s.tokens_per_microbatch() * batches;
  const double h = m.hidden, V = m.vocab, e = m.activation_bytes;
  Work fwd = block_forward(m, tokens, s.seq_len());
  fwd.forward_flops *= layer.num_blocks, fwd.attention_flops *= layer.num_blocks, fwd.bytes *= layer.num_blocks;
  Work head;  // final norm + LM head, forward
  if (layer.head) head.forward_flops = 2 * tokens * h * V, head.bytes = tokens * 2 * h * e;
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
    if (layer.embedding) b.bytes += tokens * h * (e + m.grad_bytes);  // scatter-add into the embedding grad
    return b;
  };
  switch (kind) {
    case OpKind::Forward:
      w = fwd;
      w += head;
      if (layer.embedding) w.bytes += tokens * h * (m.weight_bytes + e);
      return w;
    case OpKind::BackwardInput: return backward_input();
    case OpKind::BackwardWeight: return backward_weight();
    case OpKind::Backward:
      w = backward_input();
      w += backward_weight();
      return w;
    case OpKind::Loss: w.bytes = tokens * V * (8 + e); return w;
    case OpKind::Update: {
      const double state = m.master_bytes > 0 ? m.master_bytes : m.weight_bytes;
      w.bytes = params * (2 * state + 2 * m.optimizer_bytes + m.grad_bytes + (m.master_bytes > 0 ? m.weight_bytes : 0));
      return w;
    }
    default: return w;
  }
}

double work_seconds(const DeviceSpec& d, const Work& w) {
  if (w.flops() == 0 && w.bytes == 0) return 0;
  const EfficiencyTable& e = d.efficiency;
  return w.forward_flops / (d.peak_flops * e.forward) + w.backward_input_flops / (d.peak_flops * e.backward_input) +
         w.backward_weight_flops / (d.peak_flops * e.backward_weight) +
         w.attention_flops / (d.peak_flops * e.attention) + w.bytes / (d.hbm_bandwidth * e.memory) + e.op_overhead_s;
}

}  // namespace trainsim::hw
