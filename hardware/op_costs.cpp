#include "hardware/op_costs.h"

#include <algorithm>

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
  forward_weighted += o.forward_weighted;
  backward_input_weighted += o.backward_input_weighted;
  backward_weight_weighted += o.backward_weight_weighted;
  fp8_weighted += o.fp8_weighted;
  attention_forward_weighted += o.attention_forward_weighted;
  attention_backward_weighted += o.attention_backward_weighted;
  return *this;
}

std::vector<Linear> block_linears(const ModelSpec& m, int tp, BlockPart part) {
  const double h = m.hidden, q = static_cast<double>(m.q_width()), kv = static_cast<double>(m.kv_width()), t = tp;
  // torchtitan's selective op checkpointing counts a block's matrix multiplies 1, 2, 3, ... and keeps the odd.
  std::vector<Linear> out;
  if (m.mla()) {
    // Multi-head latent attention (DeepSeek-V2 §2.1): the query latent and its up-projection (or one W_Q), the KV
    // latent with the rotary key, its up-projection to every head's key and value, the output projection; the
    // latents' down-projections replicated over TP (Megatron-Core's MLA), the rest split by heads.
    const double ql = m.q_lora_rank, kl = m.kv_lora_rank, a = m.heads, o = static_cast<double>(m.o_width());
    if (ql > 0) out = {{h, ql, true}, {ql, q / t, false}};
    else out = {{h, q / t, true}};
    out.push_back({h, kl + m.rope_head_dim, out.size() % 2 == 0});
    out.push_back({kl, a * (m.head_dim() + m.value_head_dim()) / t, out.size() % 2 == 0});
    out.push_back({o / t, h, out.size() % 2 == 0});
  } else if (m.gated_ffn) {
    out = {{h, q / t, true}, {h, kv / t, false}, {h, kv / t, true}, {q / t, h, false}};
  } else {
    out = {{h, (q + 2 * kv) / t, true}, {q / t, h, false}};
  }
  const double f = part == BlockPart::Dense ? m.ffn : static_cast<double>(m.shared_experts) * m.expert_width();
  if (part == BlockPart::MoeShared) out.push_back({h, static_cast<double>(m.experts), true});  // the router
  if (f > 0) {
    const bool odd = out.size() % 2 == 0;  // whether the MLP's first matrix multiply is odd-numbered
    if (m.gated_ffn) out.insert(out.end(), {{h, f / t, odd}, {h, f / t, !odd}, {f / t, h, odd}});
    else out.insert(out.end(), {{h, f / t, odd}, {f / t, h, !odd}});
  }
  return out;
}

namespace {

// FLOPs at the device's best shape that take as long as an M x N x K GEMM whose efficiency at its best shape is
// `eff` of `peak`: its FLOPs over the shape factor, and no less than reading its inputs (in_bytes per element)
// and writing its output (out_bytes) at the memory bandwidth. Without a GEMM table: its FLOPs.
double gemm_weighted(const DeviceSpec& d, double M, double N, double K, double eff, double peak, double in_bytes,
                     double out_bytes) {
  const double flops = 2 * M * N * K;
  if (d.gemm_shapes.empty()) return flops;
  const double bytes = in_bytes * (M * K + K * N) + out_bytes * M * N;
  const double floor = bytes / (d.hbm_bandwidth * d.efficiency.memory) * peak * eff;
  return std::max(flops / d.gemm_shapes.factor(M, N, K), floor);
}

// A linear of in -> out over T tokens in the three passes: adds its FLOPs and their weighted time to `w`
// (forward: T x out x in; input grad: T x in x out; weight grad: in x out x T), FP8 ones to fp8_weighted with
// the bytes of casting both operands of each GEMM.
struct LinearPasses {
  double flops = 0;                       // one pass's FLOPs, 2·T·in·out
  double fwd = 0, input = 0, weight = 0;  // weighted, BF16 (0 when FP8)
  double fp8_fwd = 0, fp8_input = 0, fp8_weight = 0;
  double cast_fwd = 0, cast_input = 0, cast_weight = 0;  // FP8: bytes of the amax passes and casts
};
LinearPasses linear_passes(const HardwareSetting& s, const Linear& l, double T, bool fp8) {
  const DeviceSpec& d = s.device;
  const EfficiencyTable& e = d.efficiency;
  const double act = s.model.activation_bytes;
  LinearPasses p;
  p.flops = 2 * T * l.in * l.out;
  if (!fp8) {
    p.fwd = gemm_weighted(d, T, l.out, l.in, e.forward, d.peak_flops, act, act);
    p.input = gemm_weighted(d, T, l.in, l.out, e.backward_input, d.peak_flops, act, act);
    p.weight = gemm_weighted(d, l.in, l.out, T, e.backward_weight, d.peak_flops, act, act);
    return p;
  }
  p.fp8_fwd = gemm_weighted(d, T, l.out, l.in, e.fp8, d.fp8_peak_flops, 1, act);
  p.fp8_input = gemm_weighted(d, T, l.in, l.out, e.fp8, d.fp8_peak_flops, 1, act);
  p.fp8_weight = gemm_weighted(d, l.in, l.out, T, e.fp8, d.fp8_peak_flops, 1, act);
  // Fused elementwise kernels (torch.compile, TransformerEngine's) do each operand's amax and cast inside the kernel
  // that makes the operand; eager PyTorch runs them as kernels of their own.
  if (s.elementwise == Elementwise::Fused) return p;
  const double cast = 2 * act + 1;  // read for the amax, read again and write one byte
  p.cast_fwd = cast * (T * l.in + l.in * l.out);
  p.cast_input = cast * (T * l.out + l.in * l.out);
  p.cast_weight = cast * (T * l.in + T * l.out);
  return p;
}

}  // namespace

LinearsWork linears_work(const HardwareSetting& s, const std::vector<Linear>& linears, double T) {
  LinearsWork b;
  for (const Linear& l : linears) {
    const LinearPasses p = linear_passes(s, l, T, s.fp8);
    b.forward.forward_flops += p.flops, b.forward.forward_weighted += p.fwd;
    b.forward.fp8_weighted += p.fp8_fwd, b.forward.bytes += p.cast_fwd;
    b.input.backward_input_flops += p.flops, b.input.backward_input_weighted += p.input;
    b.input.fp8_weighted += p.fp8_input, b.input.bytes += p.cast_input;
    b.weight.backward_weight_flops += p.flops, b.weight.backward_weight_weighted += p.weight;
    b.weight.fp8_weighted += p.fp8_weight, b.weight.bytes += p.cast_weight;
    if (!l.kept_by_op_checkpointing) {
      b.op_recompute.forward_flops += p.flops, b.op_recompute.forward_weighted += p.fwd;
      b.op_recompute.fp8_weighted += p.fp8_fwd, b.op_recompute.bytes += p.cast_fwd;
    }
  }
  return b;
}
namespace {

// What one block's (or its dense part's) linears cost on T tokens.
LinearsWork block_linear_work(const HardwareSetting& s, double T, int tp, BlockPart part = BlockPart::Dense) {
  return linears_work(s, block_linears(s.model, tp, part), T);
}

// The attention core of one block on T tokens (its queries; each attends to s keys), forward and backward.
struct AttentionWork {
  Work forward, backward;
};
AttentionWork attention_work(const HardwareSetting& s, double T, int tp) {
  const ModelSpec& m = s.model;
  const DeviceSpec& d = s.device;
  const double q = static_cast<double>(m.q_width()), t = tp, seq = s.seq_len(), e = m.activation_bytes;
  // The counted forward FLOPs, causal mask not halved: QK^T over the query width, attention·V over the value width.
  const double F = m.mla() ? 2 * T * seq * (q + static_cast<double>(m.o_width())) / t : 4 * T * seq * q / t;
  AttentionWork a;
  a.forward.attention_flops = F, a.backward.attention_flops = 2 * F;
  if (s.attention == Attention::Eager) {
    // The softmax over the scores of T/s sequences x a/t heads: read and write them in the forward,
    // probabilities, their grad and the scores' grad in the backward; dropout adds its mask (one byte) and
    // output, and their backward.
    const double dh = m.qk_head_dim(), batch = T / seq * m.heads / t, scores = batch * seq * seq;
    const double dropout = m.dropout ? 2 * e + 1 : 0;
    a.forward.bytes = scores * (2 * e + dropout);
    a.backward.bytes = scores * (3 * e + dropout);
    if (!d.gemm_shapes.empty()) {
      // Batched GEMMs: QK^T (s x s x d) and attention x V (s x d x s); the backward's dP = dO·V^T (s x s x d)
      // and dV, dQ, dK (s x d x s each), at the GEMM efficiencies of their passes.
      auto g = [&](double M, double N, double K, double eff) {
        return batch * gemm_weighted(d, M, N, K, eff, d.peak_flops, e, e);
      };
      const EfficiencyTable& eff = d.efficiency;
      a.forward.forward_weighted = g(seq, seq, dh, eff.forward) + g(seq, dh, seq, eff.forward);
      a.backward.backward_input_weighted =
          g(seq, seq, dh, eff.backward_input) + 3 * g(seq, dh, seq, eff.backward_input);
      return a;
    }
  }
  if (d.attention_shapes.empty()) {  // the counted FLOPs at `attention`
    a.forward.attention_forward_weighted = F, a.backward.attention_backward_weighted = 2 * F;
    return a;
  }
  // FlashAttention's count: a causal forward is half the unmasked FLOPs, its backward 2.5 times the forward;
  // over the flash table at the head dimension and the length of the chunk each kernel sees (a ring step's
  // with context parallelism).
  const double chunk = seq / s.context_parallel, dh = std::max(m.qk_head_dim(), m.value_head_dim());
  a.forward.attention_forward_weighted = 0.5 * F / d.attention_shapes.forward_factor(dh, chunk);
  a.backward.attention_backward_weighted = 1.25 * F / d.attention_shapes.backward_factor(dh, chunk);
  return a;
}

}  // namespace

AttentionSeconds attention_core_seconds(const HardwareSetting& s, double tokens, int tp) {
  const AttentionWork a = attention_work(s, tokens, tp);
  return {work_seconds(s.device, a.forward) - s.device.efficiency.op_overhead_s,
          work_seconds(s.device, a.backward) - s.device.efficiency.op_overhead_s};
}

ElementwiseBytes elementwise_bytes(const HardwareSetting& s, double tokens, TpSplit tp, BlockPart part) {
  const ModelSpec& m = s.model;
  const double h = m.hidden, q = static_cast<double>(m.q_width()), kv = static_cast<double>(m.kv_width());
  const double f = part == BlockPart::Dense ? m.ffn : static_cast<double>(m.shared_experts) * m.expert_width();
  const double e = m.activation_bytes;
  // The router's softmax (or sigmoid) and top-k over E fp32 scores: read and written, then read (Megatron-Core's
  // TopKRouter); twice that backward.
  const double router = part == BlockPart::MoeShared ? 12.0 * m.experts : 0;
  // Rotary embedding: of every query and key channel, or with MLA of the decoupled rotary query and key only.
  const double rope = m.mla() ? (m.heads + 1.0) * m.rope_head_dim : q + kv;
  // t = 1 divides by 1 (exact): the figures without TP are the same bytes as before TP existed.
  const double t = tp.degree, replicated = tp.sequence_parallel ? t : 1;
  // Norms and residual adds (replicated over the TP group; SP: on s/t tokens), the MLP activation and the
  // rotary embedding (on this rank's FFN columns and heads).
  if (s.elementwise == Elementwise::Fused) {
    double per_token = (4 * h * e + 6 * h * e) / replicated + (m.gated_ffn ? 3 : 2) * f * e / t;
    if (!m.learned_positions) per_token += 2 * rope * e / t;
    per_token += router;
    return {tokens * per_token, 2 * tokens * per_token};
  }
  // PyTorch eager, kernel by kernel as torchtitan's Llama code runs them (f32 = 4 bytes):
  // - RMSNorm (x.float(), pow, mean, x * rsqrt, type_as, * weight): 2 + 4, 4 + 4, 4, 4 + 4, 4 + 2, 2 + 2 = 36
  //   bytes per element forward; its autograd backward 56 (the casts' and products' grads, the two paths' sum);
  //   LayerNorm is one kernel either way (4e forward, 8e backward, as fused);
  // - rotary embedding (x.float(), complex multiply, type_as): 6 + 8 + 6 = 20 bytes per element of Q and K,
  //   the same backward;
  // - repeat_kv when kv < h (expand + reshape copies K and V to every query head): e·(kv + h) each, the same
  //   backward (the sum over the repeats);
  // - SwiGLU (silu, then * w3(x)): 2e + 3e per FFN element forward, 9e backward (each product's two grads and
  //   silu's); GeLU is one kernel (2e forward, 4e backward, as fused);
  // - residual adds: one kernel each, as fused (3e forward, 6e backward per element).
  const bool rms = !m.layernorm;
  double fwd = 6 * h * e / replicated, bwd = 12 * h * e / replicated;  // residual adds
  fwd += 2 * (rms ? 36.0 : 2 * e) * h / replicated;
  bwd += 2 * (rms ? 56.0 : 4 * e) * h / replicated;
  if (m.gated_ffn) fwd += 5 * e * f / t, bwd += 9 * e * f / t;
  else fwd += 2 * e * f / t, bwd += 4 * e * f / t;
  if (!m.learned_positions) fwd += 20 * rope / t, bwd += 20 * rope / t;
  if (!m.mla() && kv < q) fwd += 2 * e * (kv + q) / t, bwd += 2 * e * (kv + q) / t;
  fwd += router, bwd += 2 * router;
  return {tokens * fwd, tokens * bwd};
}

Work block_forward(const HardwareSetting& s, double tokens, TpSplit tp, BlockPart part) {
  Work w = block_linear_work(s, tokens, tp.degree, part).forward;
  w += attention_work(s, tokens, tp.degree).forward;
  w.bytes += elementwise_bytes(s, tokens, tp, part).forward;
  return w;
}

Work scaled(Work w, double k) {
  for (double* v : {&w.forward_flops, &w.backward_input_flops, &w.backward_weight_flops, &w.attention_flops, &w.bytes,
                    &w.forward_weighted, &w.backward_input_weighted, &w.backward_weight_weighted, &w.fp8_weighted,
                    &w.attention_forward_weighted, &w.attention_backward_weighted})
    *v *= k;
  return w;
}

Work compute_work(const HardwareSetting& s, const LayerContent& layer, OpKind kind, int batches, double params,
                  TpSplit tp) {
  const ModelSpec& m = s.model;
  const double tokens = s.tokens_per_microbatch() * batches;
  const double h = m.hidden, V = m.vocab, e = m.activation_bytes;
  const double t = tp.degree, replicated = tp.sequence_parallel ? t : 1;
  // The layer's blocks by part: its dense blocks whole (every block of a dense model), and the dense parts of its
  // MoE blocks (their routed experts are the expert ops': expert_work).
  struct Part {
    double k = 0;  // blocks
    LinearsWork lin;
    Work fwd;
    ElementwiseBytes elementwise;  // the k blocks' norms, adds, ...
  };
  const AttentionWork att = attention_work(s, tokens, tp.degree);
  auto part = [&](BlockPart which, double k) {
    Part p;
    p.k = k;
    p.lin = block_linear_work(s, tokens, tp.degree, which);
    p.fwd = scaled(block_forward(s, tokens, tp, which), k);
    p.elementwise = elementwise_bytes(s, tokens * k, tp, which);
    return p;
  };
  const int moe_blocks = m.moe_blocks(layer.first_block, layer.num_blocks);
  std::vector<Part> parts{part(BlockPart::Dense, layer.num_blocks - moe_blocks)};
  if (moe_blocks > 0) parts.push_back(part(BlockPart::MoeShared, moe_blocks));
  // Final norm (replicated) + LM head (column-parallel over the vocabulary, BF16), by pass.
  Work head_fwd, head_input, head_weight;
  if (layer.head) {
    const LinearPasses p = linear_passes(s, Linear{h, V / t, true}, tokens, false);
    head_fwd.forward_flops = p.flops, head_fwd.forward_weighted = p.fwd;
    head_fwd.bytes = tokens * 2 * h * e / replicated;
    head_input.backward_input_flops = p.flops, head_input.backward_input_weighted = p.input;
    head_input.bytes = 2 * head_fwd.bytes;
    head_weight.backward_weight_flops = p.flops, head_weight.backward_weight_weighted = p.weight;
  }
  auto backward_input = [&] {
    Work b;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const Part& p = parts[i];
      Work pb = scaled(p.lin.input, p.k);
      pb += scaled(att.backward, p.k);
      pb.bytes += p.elementwise.backward;
      if (i == 0) b = pb;  // (a dense model's figures, bit for bit as before MoE)
      else b += pb;
    }
    b += head_input;
    for (const Part& p : parts) switch (s.recompute) {
        case Recompute::Full: b += p.fwd; break;  // the blocks' forward again (not the head's)
        case Recompute::Selective: b += scaled(att.forward, p.k); break;
        case Recompute::Op:
          b += scaled(p.lin.op_recompute, p.k);  // the linears whose outputs were not kept, and every elementwise op
          b.bytes += p.elementwise.forward;
          break;
        case Recompute::None: break;
      }
    return b;
  };
  auto backward_weight = [&] {
    Work b = scaled(parts[0].lin.weight, parts[0].k);
    for (std::size_t i = 1; i < parts.size(); ++i) b += scaled(parts[i].lin.weight, parts[i].k);
    b += head_weight;
    // Scatter-add of the whole output grad into this rank's rows of the embedding grad.
    if (layer.embedding) b.bytes += tokens * h * (e + m.grad_bytes / t);
    return b;
  };
  Work w;
  switch (kind) {
    case OpKind::Forward:
      w = parts[0].fwd;
      for (std::size_t i = 1; i < parts.size(); ++i) w += parts[i].fwd;
      w += head_fwd;
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

double linear_seconds(const HardwareSetting& s, const Linear& l, double tokens, OpKind pass, bool bf16) {
  const LinearPasses p = linear_passes(s, l, tokens, s.fp8 && !bf16);
  Work w;
  switch (pass) {
    case OpKind::Forward: w.forward_weighted = p.fwd, w.fp8_weighted = p.fp8_fwd, w.bytes = p.cast_fwd; break;
    case OpKind::BackwardInput: w.backward_input_weighted = p.input, w.fp8_weighted = p.fp8_input, w.bytes = p.cast_input; break;
    case OpKind::BackwardWeight:
      w.backward_weight_weighted = p.weight, w.fp8_weighted = p.fp8_weight, w.bytes = p.cast_weight;
      break;
    default: return 0;
  }
  w.forward_flops = p.flops;  // (any: only whether there is work counts below)
  return work_seconds(s.device, w) - s.device.efficiency.op_overhead_s;
}

double work_seconds(const DeviceSpec& d, const Work& w) {
  if (w.flops() == 0 && w.bytes == 0) return 0;
  const EfficiencyTable& e = d.efficiency;
  double flops = w.forward_weighted / (d.peak_flops * e.forward) +
                 w.backward_input_weighted / (d.peak_flops * e.backward_input) +
                 w.backward_weight_weighted / (d.peak_flops * e.backward_weight) +
                 (w.attention_forward_weighted + w.attention_backward_weighted) / (d.peak_flops * e.attention);
  if (w.fp8_weighted > 0) flops += w.fp8_weighted / (d.fp8_peak_flops * e.fp8);
  return flops / e.sustained + w.bytes / (d.hbm_bandwidth * e.memory) + e.op_overhead_s;
}

}  // namespace trainsim::hw
