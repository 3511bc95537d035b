#include "hardware/experts.h"

#include <algorithm>

namespace trainsim::hw {

double routed_pairs(const ModelSpec& m, double tokens, ExpertSplit x) { return tokens * m.top_k / x.ep * x.load; }

std::vector<Linear> expert_linears(const ModelSpec& m, int tp) {
  const double h = m.hidden, f = m.expert_width() / std::max(tp, 1);
  if (m.gated_ffn) return {{h, f, true}, {h, f, false}, {f, h, true}};
  return {{h, f, true}, {f, h, false}};
}

Work expert_work(const HardwareSetting& s, const LayerContent& layer, OpKind kind, int batches, ExpertSplit x) {
  const ModelSpec& m = s.model;
  const int k = m.moe_blocks(layer.first_block, layer.num_blocks);
  if (k == 0 || m.experts <= 0 || x.ep < 1) return {};
  const double pairs = routed_pairs(m, s.tokens_per_microbatch() * batches, x);
  const double local = static_cast<double>(m.experts) / x.ep;  // experts on the slice
  // One grouped GEMM per linear: `local` GEMMs of pairs / local rows each (balanced over the slice's experts).
  const int t = std::max(x.tp, 1);
  const LinearsWork per_expert = linears_work(s, expert_linears(m, t), pairs / local);
  const double h = m.hidden, f = m.expert_width() / t, e = m.activation_bytes;
  // The MLP activation over the pairs (as a dense MLP's: fused, or PyTorch eager's kernels) and the permutation.
  double act_fwd = (m.gated_ffn ? 3 : 2) * f * e, act_bwd = 2 * act_fwd;
  if (s.elementwise == Elementwise::Eager) act_fwd = (m.gated_ffn ? 5 : 2) * e * f, act_bwd = (m.gated_ffn ? 9 : 4) * e * f;
  // The permutation of the rank's own sequence shard (expert TP beside EP: 1/t of the slice's pairs), or without EP
  // of every pair of the gathered tokens.
  const double permute = 4 * h * e / (x.ep > 1 ? t : 1);
  Work fwd = scaled(per_expert.forward, local * k);
  fwd.bytes += k * pairs * (act_fwd + permute);
  Work input = scaled(per_expert.input, local * k);
  input.bytes += k * pairs * (act_bwd + 2 * permute);
  switch (s.recompute) {
    case Recompute::Full: input += fwd; break;
    case Recompute::Op:
      input += scaled(per_expert.op_recompute, local * k);
      input.bytes += k * pairs * act_fwd;
      break;
    case Recompute::Selective:
    case Recompute::None: break;
  }
  const Work weight = scaled(per_expert.weight, local * k);
  switch (kind) {
    case OpKind::Forward: return fwd;
    case OpKind::BackwardInput: return input;
    case OpKind::BackwardWeight: return weight;
    case OpKind::Backward: {
      Work w = input;
      w += weight;
      return w;
    }
    default: return {};
  }
}

double expert_launch_seconds(const HardwareSetting& s, const LayerContent& layer, OpKind kind, double local_experts) {
  if (s.expert_gemm == ExpertGemm::Grouped) return 0;  // (one kernel per linear layer, whatever the experts)
  const int k = s.model.moe_blocks(layer.first_block, layer.num_blocks);
  const bool full = s.recompute == Recompute::Full;
  double passes = 0;
  switch (kind) {
    case OpKind::Forward: passes = 1; break;
    case OpKind::Backward: passes = full ? 3 : 2; break;
    case OpKind::BackwardInput: passes = full ? 2 : 1; break;
    case OpKind::BackwardWeight: passes = 1; break;
    default: return 0;
  }
  return s.device.efficiency.expert_launch_s * local_experts * k * passes;
}

double expert_activation_bytes(const ModelSpec& m, Recompute r, int tp) {
  const double h = m.hidden, f = m.expert_width() / std::max(tp, 1), e = m.activation_bytes;
  switch (r) {
    case Recompute::Full: return 0;
    case Recompute::Op: return m.gated_ffn ? e * (f + h) : e * f;
    case Recompute::None:
    case Recompute::Selective: break;
  }
  return (m.gated_ffn ? 3 : 2) * e * f;
}

}  // namespace trainsim::hw
