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

std::vector<Linear> block_linears(const ModelSpec& m, int tp) {
  const double h = m.hidden, f = m.ffn, kv = static_cast<double>(m.kv_width()), t = tp;
  // torchtitan's selective op checkpointing counts a block's matrix multiplies 1, 2, 3, ... and keeps the odd.
  if (m.gated_ffn)
    return {{h, h / t, true},      {h, kv / t, false}, {h, kv / t, true}, {h / t, h, false},
            {h, f / t, true},      {h, f / t, false},  {f / t, h, true}};
  return {{h, (h + 2 * kv) / t, true}, {h / t, h, false}, {h, f / t, true}, {f / t, h, false}};
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

// What one block's linears cost on T tokens, by pass, and the part selective op checkpointing recomputes.
struct BlockLinears {
  Work forward, input, weight;  // FLOPs and weighted time of each pass
  Work op_recompute;            // the forward of the linears op checkpointing does not keep
};
BlockLinears block_linear_work(const HardwareSetting& s, double T, int tp) {
  BlockLinears b;
  for (const Linear& l : block_linears(s.model, tp)) {
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

// The attention core of one block on T tokens (its queries; each attends to s keys), forward and backward.
struct AttentionWork {
  Work forward, backward;
};
AttentionWork attention_work(const HardwareSetting& s, double T, int tp) {
  const ModelSpec& m = s.model;
  const DeviceSpec& d = s.device;
  const double h = m.hidden, t = tp, seq = s.seq_len(), e = m.activation_bytes;
  const double F = 4 * T * seq * h / t;  // the counted forward FLOPs, causal mask not halved
  AttentionWork a;
  a.forward.attention_flops = F, a.backward.attention_flops = 2 * F;
  if (s.attention == Attention::Eager) {
    // The softmax over the scores of T/s sequences x a/t heads: read and write them in the forward,
    // probabilities, their grad and the scores' grad in the backward; dropout adds its mask (one byte) and
    // output, and their backward.
    const double dh = m.head_dim(), batch = T / seq * m.heads / t, scores = batch * seq * seq;
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
  const double chunk = seq / s.context_parallel, dh = m.head_dim();
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

ElementwiseBytes elementwise_bytes(const HardwareSetting& s, double tokens, TpSplit tp) {
  const ModelSpec& m = s.model;
  const double h = m.hidden, f = m.ffn, kv = static_cast<double>(m.kv_width()), e = m.activation_bytes;
  // t = 1 divides by 1 (exact): the figures without TP are the same bytes as before TP existed.
  const double t = tp.degree, replicated = tp.sequence_parallel ? t : 1;
  // Norms and residual adds (replicated over the TP group; SP: on s/t tokens), the MLP activation and the
  // rotary embedding (on this rank's FFN columns and heads).
  if (s.elementwise == Elementwise::Fused) {
    double per_token = (4 * h * e + 6 * h * e) / replicated + (m.gated_ffn ? 3 : 2) * f * e / t;
    if (!m.learned_positions) per_token += 2 * (h + kv) * e / t;
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
  if (!m.learned_positions) fwd += 20 * (h + kv) / t, bwd += 20 * (h + kv) / t;
  if (kv < h) fwd += 2 * e * (kv + h) / t, bwd += 2 * e * (kv + h) / t;
  return {tokens * fwd, tokens * bwd};
}

Work block_forward(const HardwareSetting& s, double tokens, TpSplit tp) {
  Work w = block_linear_work(s, tokens, tp.degree).forward;
  w += attention_work(s, tokens, tp.degree).forward;
  w.bytes += elementwise_bytes(s, tokens, tp).forward;
  return w;
}

namespace {

Work scaled(Work w, double k) {
  for (double* v : {&w.forward_flops, &w.backward_input_flops, &w.backward_weight_flops, &w.attention_flops, &w.bytes,
                    &w.forward_weighted, &w.backward_input_weighted, &w.backward_weight_weighted, &w.fp8_weighted,
                    &w.attention_forward_weighted, &w.attention_backward_weighted})
    *v *= k;
  return w;
}

}  // namespace

Work compute_work(const HardwareSetting& s, const LayerContent& layer, OpKind kind, int batches, double params,
                  TpSplit tp) {
  const ModelSpec& m = s.model;
  const double tokens = s.tokens_per_microbatch() * batches;
  const double h = m.hidden, V = m.vocab, e = m.activation_bytes;
  const double t = tp.degree, replicated = tp.sequence_parallel ? t : 1;
  const double k = layer.num_blocks;
  // One block's pieces, then k of them.
  const BlockLinears lin = block_linear_work(s, tokens, tp.degree);
  const AttentionWork att = attention_work(s, tokens, tp.degree);
  const Work fwd = scaled(block_forward(s, tokens, tp), k);
  const ElementwiseBytes elementwise = elementwise_bytes(s, tokens * k, tp);  // the blocks' norms, adds, ...
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
    Work b = scaled(lin.input, k);
    b += scaled(att.backward, k);
    b.bytes += elementwise.backward;
    b += head_input;
    switch (s.recompute) {
      case Recompute::Full: b += fwd; break;  // the blocks' forward again (not the head's)
      case Recompute::Selective: b += scaled(att.forward, k); break;
      case Recompute::Op:
        b += scaled(lin.op_recompute, k);  // the linears whose outputs were not kept, and every elementwise op
        b.bytes += elementwise.forward;
        break;
      case Recompute::None: break;
    }
    return b;
  };
  auto backward_weight = [&] {
    Work b = scaled(lin.weight, k);
    b += head_weight;
    // Scatter-add of the whole output grad into this rank's rows of the embedding grad.
    if (layer.embedding) b.bytes += tokens * h * (e + m.grad_bytes / t);
    return b;
  };
  Work w;
  switch (kind) {
    case OpKind::Forward:
      w = fwd;
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
