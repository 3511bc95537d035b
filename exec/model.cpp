#include "exec/model.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace trainsim::exec {

template <typename T>
void rope_tables(const ModelConfig& model, std::vector<T>& cos, std::vector<T>& sin) {
  const int half = model.head_dim() / 2;
  cos.assign(static_cast<std::size_t>(model.seq) * half, T(0));
  sin.assign(cos.size(), T(0));
  for (int t = 0; t < model.seq; ++t)
    for (int i = 0; i < half; ++i) {
      double freq = std::pow(static_cast<double>(model.rope_theta), -2.0 * i / model.head_dim());
      double angle = t * freq;
      cos[static_cast<std::size_t>(t) * half + i] = static_cast<T>(std::cos(angle));
      sin[static_cast<std::size_t>(t) * half + i] = static_cast<T>(std::sin(angle));
    }
}

std::size_t LayerStash::bytes() const {
  std::size_t n = 0;
  auto add = [&](const BufferPtr& b) { n += b ? b->bytes() : 0; };
  for (const BlockStash& s : blocks)
    for (const BufferPtr* b : {&s.x_in, &s.xn1, &s.rstd1, &s.q, &s.k, &s.v, &s.probs, &s.att, &s.h, &s.xn2, &s.rstd2,
                               &s.gu, &s.act, &s.d_out, &s.dgu, &s.dxn2, &s.dh, &s.dqkv, &s.dxn1})
      add(*b);
  for (const BlockStash& s : blocks)
    if (s.moe) n += s.moe->bytes();
  for (const BufferPtr* b : {&x_final, &xnf, &rstdf, &dxnf, &dx0}) add(*b);
  return n;
}

long activation_elements(const ModelConfig& m, int l, int layers, int sequences) {
  long n = static_cast<long>(sequences) * m.seq;
  if (l == 0) return n;
  if (l == layers) return n * m.vocab;
  return n * m.dim;
}

long activation_grad_elements(const ModelConfig& m, int l, int layers, int sequences) {
  return l == 0 ? 0 : activation_elements(m, l, layers, sequences);
}

namespace {

template <typename T>
struct Run {
  ModelContext<T>& c;
  const LayerLayout& L;
  const ModelConfig& m;
  // H, da, f, V: the heads, attention width, FFN columns and vocabulary rows of the layout (its TP slice's).
  int B, Tn, H, hd, d, da, f, V, tp_index, tp_size;
  long n;  // rows = B·T
  // Mixture of Experts under TP (Megatron-Core's MoE with sequence parallelism; docs/executor.md "Mixture of
  // Experts"): a TP slice of an expert-parallel MoE layer routes its sequence shard of the tokens (exec/
  // sequence_shard.h's rows), so its MoE block's FFN norm, router and combine, and the layer's final norm, run on
  // ns = n/t rows; the replicated parameters among them (the gains, the router) get partial grads, summed over the
  // group in finish_weight. Without it, ns = n.
  bool sharded;
  long ns;

  Run(ModelContext<T>& ctx, const LayerLayout& layout, int sequences)
      : c(ctx), L(layout), m(layout.model()), B(sequences), Tn(m.seq), H(layout.heads()), hd(m.head_dim()), d(m.dim),
        da(layout.attention_dim()), f(layout.ffn()), V(layout.vocab()), tp_index(layout.tp_index()),
        tp_size(layout.tp_size()), n(static_cast<long>(sequences) * m.seq),
        sharded(tp_size > 1 && moe_split_layer(layout)), ns(sharded ? n / tp_size : n) {
    if (tp_size > 1 && (!c.tp || c.tp->size != tp_size))
      throw std::logic_error("a TP slice's layer computed without its TP group");
    if (sharded && m.capacity_factor > 0) throw std::logic_error("token dropping on a sequence shard (ModelShapes refuses it)");
    if (sharded && Tn % tp_size != 0)
      throw std::invalid_argument(fmt::format("an MoE layer's TP slice routes its sequence shard of the tokens, but a "
                                              "sequence of {} tokens does not split into {} equal shards",
                                              Tn, tp_size));
  }

  // The rows of an MoE block's FFN: its sequence shard's under TP (ns), else all (a dense block's, n).
  long ffn_rows(const BlockOffsets& o) const { return o.moe ? ns : n; }
  // This slice's sequence shard (ns×d) of x (n×d): of each sequence the tokens [j·T/t, (j+1)·T/t).
  BufferPtr shard_of(const T* x) {
    const long per = Tn / tp_size;
    BufferPtr out = make(ns * d);
    for (long i = 0; i < B; ++i) k().copy(x + (i * Tn + tp_index * per) * d, p(out) + i * per * d, per * d);
    return out;
  }
  // The whole x (n×d) from every slice's sequence shard (ns×d), all-gathered over the TP group (member-major,
  // then put back in sequence order).
  BufferPtr gather_shards(const T* x) {
    const long per = Tn / tp_size;
    BufferPtr g = make(n * d), out = make(n * d);
    c.tp->all_gather(x, p(g), ns * d);
    for (long q = 0; q < tp_size; ++q)
      for (long i = 0; i < B; ++i) k().copy(p(g) + (q * ns + i * per) * d, p(out) + (i * Tn + q * per) * d, per * d);
    return out;
  }

  BufferPtr make(long elements) { return c.alloc->allocate(static_cast<std::size_t>(elements) * sizeof(T)); }
  static T* p(const BufferPtr& b) { return b->as<T>(); }
  // The attention kernels' scratch (Kernels::attention_scratch_elements), or nothing when they need none.
  BufferPtr scratch_for(bool backward) {
    const long e = k().attention_scratch_elements(B, Tn, H, hd, backward);
    return e > 0 ? make(e) : nullptr;
  }
  Kernels<T>& k() { return *c.k; }
  T scale() const { return T(1) / std::sqrt(static_cast<T>(hd)); }
  // Sums a row-parallel partial result over the TP group (nothing without TP).
  void reduce(T* x, long count) {
    if (tp_size > 1) c.tp->all_reduce(x, count);
  }

  // One block's forward from x_in to y (n×d). With `partial_out` (TP: the layer's last block, whose output the
  // schedule all-reduces), y is this slice's partial sum, the residual added by slice 0 only. Without
  // `keep_probs` the attention probabilities are dropped once used (selective recomputation). Without `output`
  // (a recomputation: only the saved activations are wanted) the down projection is skipped and y not written.
  void block_forward(const T* W, const BlockOffsets& o, const T* x_in, T* y, BlockStash& s, bool partial_out,
                     bool keep_probs = true, bool output = true) {
    s.xn1 = make(n * d), s.rstd1 = make(n);
    k().rmsnorm_forward(x_in, W + o.attn_norm, p(s.xn1), p(s.rstd1), n, d, static_cast<T>(m.norm_eps));
    BufferPtr qkv = make(n * 3 * da);
    k().gemm(false, true, n, 3 * da, d, T(1), p(s.xn1), d, W + o.wqkv, d, T(0), p(qkv), 3 * da);
    s.q = make(n * da), s.k = make(n * da), s.v = make(n * da);
    k().split_heads_rope(p(qkv), p(s.q), p(s.k), p(s.v), B, Tn, H, hd, c.rope_cos, c.rope_sin);
    qkv.reset();
    s.probs = make(static_cast<long>(B) * H * Tn * Tn);
    s.att = make(n * da);
    {
      BufferPtr scratch = scratch_for(false);
      k().attention_forward(p(s.q), p(s.k), p(s.v), p(s.probs), p(s.att), scratch ? p(scratch) : nullptr, B, Tn, H,
                            hd, scale());
    }
    if (!keep_probs) s.probs.reset();
    s.h = make(n * d);
    k().gemm(false, true, n, d, da, T(1), p(s.att), da, W + o.wo, da, T(0), p(s.h), d);
    reduce(p(s.h), n * d);
    k().add(p(s.h), x_in, p(s.h), n * d);
    if (o.moe && sharded) s.h = shard_of(p(s.h));  // (the residual of the slice's tokens)
    const long r = ffn_rows(o);
    s.xn2 = make(r * d), s.rstd2 = make(r);
    k().rmsnorm_forward(p(s.h), W + o.ffn_norm, p(s.xn2), p(s.rstd2), r, d, static_cast<T>(m.norm_eps));
    if (o.moe) return moe_forward(W, o, y, s, output, partial_out);
    s.gu = make(n * 2 * f);
    k().gemm(false, true, n, 2 * f, d, T(1), p(s.xn2), d, W + o.wgu, d, T(0), p(s.gu), 2 * f);
    s.act = make(n * f);
    k().swiglu_forward(p(s.gu), p(s.act), n, f);
    if (!output) return;
    k().gemm(false, true, n, d, f, T(1), p(s.act), f, W + o.wdown, f, T(0), y, d);
    if (partial_out) {
      if (tp_index == 0) k().add(y, p(s.h), y, n * d);
      return;
    }
    reduce(y, n * d);
    k().add(y, p(s.h), y, n * d);
  }

  // An MoE block's FFN (exec/moe.h) from its normed input s.xn2: route; with its experts here, run them and write
  // y = h + the gated sum of their outputs; with its experts in expert slices (split), write the packed tokens
  // into y for the dispatch. (A split block is never recomputed: layer_forward keeps its stash whole.)
  // Under TP with the experts here, every slice routes every token (the router replicated, its input the same
  // bits on every slice) and runs its TP slice of each expert, whose outputs are partial sums (row-parallel down
  // projections): the gated sum is reduced as a dense block's MLP output is (`partial_out` as block_forward's).
  void moe_forward(const T* W, const BlockOffsets& o, T* y, BlockStash& s, bool output, bool partial_out = false) {
    auto st = std::make_shared<MoeState>();
    const bool aux = m.aux_loss_coeff > 0 && c.microbatch_weight > 0;
    st->routing = moe_route(k(), *c.alloc, p(s.xn2), W + o.router, ns, d, m.experts, m.top_k, static_cast<bool>(c.on_route),
                            c.misroute_tokens, m.capacity_factor, m.tokens_per_microbatch(), aux);
    if (c.on_route) c.on_route(o.block, st->routing);
    if (aux) st->aux_coeffs = aux_coefficients(st->routing);
    const long pairs = st->routing.pairs();
    s.moe = st;
    if (o.experts_held == 0) {
      st->split = true;
      if (output) moe_pack(k(), st->routing, p(s.xn2), y, d);
      return;
    }
    st->x_pairs = make(pairs * d), st->y_pairs = make(pairs * d);
    st->gu_pairs = make(pairs * 2 * f), st->act_pairs = make(pairs * f);
    moe_pack(k(), st->routing, p(s.xn2), p(st->x_pairs), d);
    experts_forward(k(), *c.alloc, W + o.experts, d, f, st->routing.counts, p(st->x_pairs), p(st->y_pairs),
                    p(st->gu_pairs), p(st->act_pairs));
    if (!output) return;
    if (tp_size == 1) return combine(*st, p(s.h), y);
    BufferPtr zero = make(n * d);  // (the gated sum of the partial outputs alone, the residual added after)
    k().fill(p(zero), T(0), n * d);
    combine(*st, p(zero), y);
    if (partial_out) {
      if (tp_index == 0) k().add(y, p(s.h), y, n * d);
      return;
    }
    reduce(y, n * d);
    k().add(y, p(s.h), y, n * d);
  }
  // The load-balancing loss's per-expert weights of each microbatch routed here (exec/moe.h), G×E in backend
  // memory: from the microbatch's counts, which a sharded TP slice sums over the group's sequence shards.
  BufferPtr aux_coefficients(const MoeRouting& r) {
    std::vector<double> counts = routed_counts(r, aux_group());
    if (sharded) {  // (small integers: exact in T, in any order)
      std::vector<T> v(counts.begin(), counts.end());
      BufferPtr b = make(static_cast<long>(v.size()));
      k().to_device(b->data(), v.data(), v.size() * sizeof(T));
      c.tp->all_reduce(p(b), static_cast<long>(v.size()));
      k().to_host(v.data(), b->data(), v.size() * sizeof(T));
      counts.assign(v.begin(), v.end());
    }
    moe_aux_coefficients(counts, m.aux_loss_coeff, m.experts, m.top_k, m.tokens_per_microbatch());
    const std::vector<T> coeffs(counts.begin(), counts.end());
    BufferPtr out = make(static_cast<long>(coeffs.size()));
    k().to_device(out->data(), coeffs.data(), coeffs.size() * sizeof(T));
    return out;
  }
  // The routed rows of one microbatch: its tokens, or under TP its sequence shard's.
  long aux_group() const { return m.tokens_per_microbatch() / (sharded ? tp_size : 1); }

  void combine(const MoeState& st, const T* h, T* y) {
    k().moe_combine(h, p(st.y_pairs), st.routing.pair_row->as<int>(), p(st.routing.gates), y, ns, m.top_k, d);
  }

  // An MoE block's FFN backward-input from dy (the block output's grad) into s.dxn2: the combine's and the
  // experts' backward (with the experts here; split, the experts' input grads are `dx_pairs`, the packed tokens'
  // grads the experts gave back, and the gates' grads came with the dispatch's backward), then the router's. Keeps
  // what backward-weight needs.
  void moe_backward_input(const T* W, const BlockOffsets& o, const T* dy, BlockStash& s, const T* dx_pairs) {
    MoeState& st = *s.moe;
    const long pairs = st.routing.pairs();
    const int K = m.top_k;
    const int* pair_row = st.routing.pair_row->as<int>();
    s.dxn2 = make(ns * d);
    if (st.split) {
      if (!dx_pairs || !st.dgates) throw std::logic_error("an expert-parallel MoE block's backward without its experts' grads");
      k().moe_sum_pairs(dx_pairs, pair_row, p(s.dxn2), ns, K, d);
    } else {
      st.dgates = make(ns * K), st.dy_pairs = make(pairs * d);
      k().moe_combine_backward(dy, p(st.y_pairs), pair_row, p(st.routing.gates), p(st.dy_pairs), p(st.dgates), ns, K, d);
      reduce(p(st.dgates), ns * K);  // (under TP the experts' outputs were partial sums, so the gates' grads are)
      BufferPtr dx = make(pairs * d);
      st.experts_dw = make(static_cast<long>(o.experts_held) * expert_elements(d, f));
      experts_backward(k(), *c.alloc, W + o.experts, d, f, st.routing.counts, p(st.x_pairs), p(st.dy_pairs), p(dx),
                       p(st.experts_dw), p(st.gu_pairs), p(st.act_pairs));
      k().moe_sum_pairs(p(dx), pair_row, p(s.dxn2), ns, K, d);
      reduce(p(s.dxn2), ns * d);  // (and the experts' input grads: column-parallel gate and up projections)
      st.x_pairs.reset(), st.gu_pairs.reset(), st.act_pairs.reset(), st.dy_pairs.reset();
    }
    st.y_pairs.reset();
    st.dlogits = make(ns * m.experts);
    k().moe_topk_backward(st.routing.idx->as<int>(), p(st.routing.gates), p(st.dgates), p(st.dlogits), ns, m.experts, K);
    if (st.aux_coeffs) {  // (the load-balancing loss's gradient; its value counted once per token)
      const bool counted = tp_size == 1 || sharded || tp_index == 0;
      k().moe_aux_loss(p(st.routing.logits), p(st.aux_coeffs), p(st.dlogits), counted ? c.aux_loss_sum : nullptr, ns,
                       m.experts, aux_group(), static_cast<T>(c.microbatch_weight));
      st.routing.logits.reset(), st.aux_coeffs.reset();
    }
    k().gemm(false, false, ns, d, m.experts, T(1), p(st.dlogits), m.experts, W + o.router, d, T(1), p(s.dxn2), d);
  }

  // The attention probabilities of a block whose forward dropped them (selective recomputation): the forward's
  // own kernels on the kept q and k, so the same bits.
  void recompute_probs(BlockStash& s) {
    s.probs = make(static_cast<long>(B) * H * Tn * Tn);
    BufferPtr att = make(n * da);  // (the attention's output again, not wanted)
    BufferPtr scratch = scratch_for(false);
    k().attention_forward(p(s.q), p(s.k), p(s.v), p(s.probs), p(att), scratch ? p(scratch) : nullptr, B, Tn, H, hd,
                          scale());
  }

  // An RMSNorm's input grad onto the residual's grad res, into dx; with norm_dW (the whole backward), its gain's
  // grad into norm_dW + gain in the same pass.
  void norm_backward_onto(const T* dy, const T* x, const T* g, const T* rstd, const T* res, T* dx, T* norm_dW,
                          long gain, long rows) {
    if (norm_dW) k().rmsnorm_backward(dy, x, g, rstd, res, dx, norm_dW + gain, rows, d);
    else k().rmsnorm_backward_input_onto(dy, x, g, rstd, res, dx, rows, d);
  }

  // One block's backward-input: dy (grad of its output) -> dx (grad of its input, overwritten). With
  // `partial_in` (TP: the first block of a layer without the embedding), dx is this slice's partial sum: the
  // attention's input grad is not all-reduced, and slice 0 adds the residual's grad. With `norm_dW` (the whole
  // backward), the two norms' gain grads go there too, from the same pass (block_backward_weight then skips them).
  // `dx_pairs`: an expert-parallel MoE block's packed tokens' grads (moe_backward_input).
  void block_backward_input(const T* W, const BlockOffsets& o, const T* x_in, const T* dy, T* dx, BlockStash& s,
                            bool partial_in, T* norm_dW = nullptr, const T* dx_pairs = nullptr) {
    // Full recomputation kept the block's input only: its forward again, all but the down projection.
    if (!s.xn1) block_forward(W, o, x_in, nullptr, s, false, true, false);
    if (o.moe) {
      moe_backward_input(W, o, dy, s, dx_pairs);
    } else {
      BufferPtr dact = make(n * f);
      k().gemm(false, false, n, f, d, T(1), dy, d, W + o.wdown, f, T(0), p(dact), f);
      s.dgu = make(n * 2 * f);
      k().swiglu_backward(p(s.gu), p(dact), p(s.dgu), n, f);
      dact.reset();
      s.dxn2 = make(n * d);
      k().gemm(false, false, n, d, 2 * f, T(1), p(s.dgu), 2 * f, W + o.wgu, d, T(0), p(s.dxn2), d);
      reduce(p(s.dxn2), n * d);
    }
    s.dh = make(ffn_rows(o) * d);  // the residual's grad dy plus the FFN norm's
    norm_backward_onto(p(s.dxn2), p(s.h), W + o.ffn_norm, p(s.rstd2), dy, p(s.dh), norm_dW, o.ffn_norm, ffn_rows(o));
    if (o.moe && sharded) s.dh = gather_shards(p(s.dh));  // (the attention's output grad: every token's)
    BufferPtr datt = make(n * da);
    k().gemm(false, false, n, da, d, T(1), p(s.dh), d, W + o.wo, da, T(0), p(datt), da);
    if (!s.probs) recompute_probs(s);
    BufferPtr dq = make(n * da), dk = make(n * da), dv = make(n * da);
    {
      BufferPtr scratch = scratch_for(true);
      k().attention_backward(p(s.q), p(s.k), p(s.v), p(s.probs), p(datt), p(dq), p(dk), p(dv),
                             scratch ? p(scratch) : nullptr, B, Tn, H, hd, scale());
    }
    datt.reset();
    s.dqkv = make(n * 3 * da);
    k().merge_heads_rope_backward(p(dq), p(dk), p(dv), p(s.dqkv), B, Tn, H, hd, c.rope_cos, c.rope_sin);
    dq.reset(), dk.reset(), dv.reset();
    s.dxn1 = make(n * d);
    k().gemm(false, false, n, d, 3 * da, T(1), p(s.dqkv), 3 * da, W + o.wqkv, d, T(0), p(s.dxn1), d);
    // dx = the residual's grad dh plus the attention norm's; on TP slices but the first, without dh (the norm's input
    // grad is linear in dxn1: on partial sums it gives the partial sums of dx)
    if (partial_in && tp_index != 0) {
      k().fill(dx, T(0), n * d);
      k().rmsnorm_backward_input(p(s.dxn1), x_in, W + o.attn_norm, p(s.rstd1), dx, n, d);
      if (norm_dW) k().rmsnorm_backward_weight(p(s.dxn1), x_in, p(s.rstd1), norm_dW + o.attn_norm, n, d);
    } else {
      if (!partial_in) reduce(p(s.dxn1), n * d);
      norm_backward_onto(p(s.dxn1), x_in, W + o.attn_norm, p(s.rstd1), p(s.dh), dx, norm_dW, o.attn_norm, n);
    }
    // backward-weight needs neither the attention's inputs nor the FFN's pre-activations any more
    s.q.reset(), s.k.reset(), s.v.reset(), s.probs.reset(), s.gu.reset();
  }

  // One block's backward-weight into the layer's flat gradient dW; the norms' gains too unless `norms` is false
  // (block_backward_input wrote them).
  void block_backward_weight(const BlockOffsets& o, const T* x_in, const T* dy, T* dW, BlockStash& s, bool norms) {
    if (o.moe) {  // the router's grad; the experts' were computed with their input grads
      MoeState& st = *s.moe;
      k().gemm(true, false, m.experts, d, ns, T(1), p(st.dlogits), m.experts, p(s.xn2), d, T(0), dW + o.router, d);
      if (!st.split)
        k().copy(p(st.experts_dw), dW + o.experts, static_cast<long>(o.experts_held) * expert_elements(d, f));
      s.moe.reset();
    } else {
      k().gemm(true, false, d, f, n, T(1), dy, d, p(s.act), f, T(0), dW + o.wdown, f);
      k().gemm(true, false, 2 * f, d, n, T(1), p(s.dgu), 2 * f, p(s.xn2), d, T(0), dW + o.wgu, d);
    }
    if (norms) k().rmsnorm_backward_weight(p(s.dxn2), p(s.h), p(s.rstd2), dW + o.ffn_norm, ffn_rows(o), d);
    k().gemm(true, false, d, da, n, T(1), p(s.dh), d, p(s.att), da, T(0), dW + o.wo, da);
    k().gemm(true, false, 3 * da, d, n, T(1), p(s.dqkv), 3 * da, p(s.xn1), d, T(0), dW + o.wqkv, d);
    if (norms) k().rmsnorm_backward_weight(p(s.dxn1), x_in, p(s.rstd1), dW + o.attn_norm, n, d);
  }
};

// The input of block `b` of the stash: its saved x_in, or the layer's input for the first block of a layer
// without the embedding.
template <typename T>
const T* block_input(const LayerStash& s, int b, const void* in) {
  return s.blocks[b].x_in ? s.blocks[b].x_in->as<T>() : static_cast<const T*>(in);
}

// The final norm and the LM head on the last block's output s.x_final, into `out` (the logits, n × V/t); keeps
// the norm's output and rstd for the backward. Sharded (an MoE layer's TP slice), the final norm runs on the
// slice's sequence shard and its output is all-gathered for the column-parallel LM head, as Megatron-LM's output
// layer does under sequence parallelism.
template <typename T>
void head_forward(Run<T>& r, const LayerLayout& layout, const T* W, LayerStash& s, T* out) {
  s.xnf = r.make(r.ns * r.d), s.rstdf = r.make(r.ns);
  r.k().rmsnorm_forward(Run<T>::p(s.x_final), W + layout.final_norm_offset(), Run<T>::p(s.xnf), Run<T>::p(s.rstdf),
                        r.ns, r.d, static_cast<T>(r.m.norm_eps));
  if (r.sharded) s.xnf = r.gather_shards(Run<T>::p(s.xnf));
  r.k().gemm(false, true, r.n, r.V, r.d, T(1), Run<T>::p(s.xnf), r.d, W + layout.head_offset(), r.d, T(0), out, r.V);
}

}  // namespace

template <typename T>
void layer_forward(ModelContext<T>& c, const LayerLayout& layout, const T* W, const void* in, int sequences, T* out,
                   LayerStash* stash) {
  Run<T> r(c, layout, sequences);
  const LayerSpec& spec = layout.spec();
  LayerStash local;
  LayerStash& s = stash ? *stash : local;
  s = LayerStash{};
  s.sequences = sequences;
  s.blocks.resize(spec.num_blocks);
  // A layer without blocks (a stage layout's embedding or head alone): the embedding writes the layer's output,
  // the head reads the layer's input (kept as x_final, which its backward reads).
  if (spec.num_blocks == 0 && spec.head) {
    s.x_final = r.make(r.n * r.d);
    if (!spec.embedding) c.k->copy(static_cast<const T*>(in), Run<T>::p(s.x_final), r.n * r.d);
  }
  if (spec.embedding) {
    T* x0;
    if (spec.num_blocks > 0) {
      s.blocks[0].x_in = r.make(r.n * r.d);
      x0 = Run<T>::p(s.blocks[0].x_in);
    } else {
      x0 = spec.head ? Run<T>::p(s.x_final) : out;
    }
    if (r.tp_size > 1) {  // vocabulary-parallel: this slice's rows, zeros for the other tokens, summed over the group
      c.k->embedding_forward_range(static_cast<const int*>(in), W + layout.embedding_offset(), x0, r.n, r.d,
                                   layout.vocab_start(), r.V);
      r.reduce(x0, r.n * r.d);
    } else {
      c.k->embedding_forward(static_cast<const int*>(in), W + layout.embedding_offset(), x0, r.n, r.d);
    }
  }
  const bool split = moe_split_layer(layout);  // (the last block stops at its router: moe_layer_combine goes on)
  for (int b = 0; b < spec.num_blocks; ++b) {
    const bool last = b + 1 == spec.num_blocks;
    T* y;
    if (!last) {
      s.blocks[b + 1].x_in = r.make(r.n * r.d);
      y = Run<T>::p(s.blocks[b + 1].x_in);
    } else if (spec.head && !split) {
      s.x_final = r.make(r.n * r.d);
      y = Run<T>::p(s.x_final);
    } else {
      y = out;
    }
    r.block_forward(W, layout.block(b), block_input<T>(s, b, in), y, s.blocks[b], r.tp_size > 1 && last && !spec.head,
                    c.recompute != hw::Recompute::Selective);
    if (!stash && b > 0) s.blocks[b - 1] = BlockStash{};  // nothing to keep: free as we go
    // Full recomputation: keep the block's input only; but an expert-parallel MoE block keeps everything (its
    // combine, later, needs the residual, and its routing cannot be recomputed apart from its experts' outputs).
    if (stash && c.recompute == hw::Recompute::Full && !(split && last)) {
      BufferPtr x_in = s.blocks[b].x_in;
      s.blocks[b] = BlockStash{};
      s.blocks[b].x_in = x_in;
    }
  }
  if (spec.head && !split) {
    head_forward(r, layout, W, s, out);
  }
}

namespace {

// The layer-level pieces of the backward, shared by backward-input, backward-weight and the whole backward.
template <typename T>
struct LayerBackward {
  Run<T>& r;
  const LayerLayout& layout;
  const LayerSpec& spec;
  LayerStash& s;

  // The head's backward-input (final norm, LM head): the grad of the last block's output, kept as its d_out (the
  // embedding's dx0 when the layer has no block; a head alone writes it into din). Returns that grad.
  const T* head_input(const T* W, const T* dout, T* din) {
    s.dxnf = r.make(r.n * r.d);
    r.k().gemm(false, false, r.n, r.d, r.V, T(1), dout, r.V, W + layout.head_offset(), r.d, T(0), Run<T>::p(s.dxnf), r.d);
    r.reduce(Run<T>::p(s.dxnf), r.n * r.d);  // (the LM head is column-parallel: its input grad is a partial sum)
    if (r.sharded) s.dxnf = r.shard_of(Run<T>::p(s.dxnf));  // (the final norm ran on the sequence shard)
    BufferPtr dx = r.make(r.ns * r.d);
    r.k().fill(Run<T>::p(dx), T(0), r.ns * r.d);
    r.k().rmsnorm_backward_input(Run<T>::p(s.dxnf), Run<T>::p(s.x_final), W + layout.final_norm_offset(),
                                 Run<T>::p(s.rstdf), Run<T>::p(dx), r.ns, r.d);
    if (spec.num_blocks > 0) s.blocks.back().d_out = dx;
    else if (spec.embedding) s.dx0 = dx;
    else r.k().copy(Run<T>::p(dx), din, r.n * r.d);  // the head alone: its input grad is the layer's
    return Run<T>::p(dx);
  }

  void head_weight(const T* dout, T* dW) {
    r.k().gemm(true, false, r.V, r.d, r.n, T(1), dout, r.V, Run<T>::p(s.xnf), r.d, T(0), dW + layout.head_offset(), r.d);
    r.k().rmsnorm_backward_weight(Run<T>::p(s.dxnf), Run<T>::p(s.x_final), Run<T>::p(s.rstdf),
                                  dW + layout.final_norm_offset(), r.ns, r.d);
  }

  // Block b's backward-input from dy, into the grad of its input: the d_out of the block before, the
  // embedding's dx0, or din (and its norms' gain grads into norm_dW, when given). Returns that grad.
  T* block_input_grad(const T* W, const void* in, const T* dy, T* din, int b, T* norm_dW = nullptr,
                      const T* dx_pairs = nullptr) {
    T* dx;
    if (b > 0) {
      s.blocks[b - 1].d_out = r.make(r.n * r.d);
      dx = Run<T>::p(s.blocks[b - 1].d_out);
    } else if (spec.embedding) {
      s.dx0 = r.make(r.n * r.d);
      dx = Run<T>::p(s.dx0);
    } else {
      dx = din;
    }
    const bool partial_in = r.tp_size > 1 && b == 0 && !spec.embedding;
    r.block_backward_input(W, layout.block(b), block_input<T>(s, b, in), dy, dx, s.blocks[b], partial_in, norm_dW,
                           dx_pairs);
    return dx;
  }

  void block_weight(const void* in, const T* dout, T* dW, int b, bool norms = true) {
    BlockStash& bs = s.blocks[b];
    const T* dy = bs.d_out ? Run<T>::p(bs.d_out) : dout;
    r.block_backward_weight(layout.block(b), block_input<T>(s, b, in), dy, dW, bs, norms);
  }

  // After every block's weight grads: the first block's attention-norm gain (a partial sum on a TP slice whose
  // input grad is one), the replicated parameters a sharded MoE layer computed from its sequence shard (the MoE
  // block's FFN norm gain and router, the final norm's gain: each slice's part of the grad), and the embedding's grad.
  void finish_weight(const void* in, const T* dout, T* dW) {
    if (s.partial_first_norm) r.reduce(dW + layout.block(0).attn_norm, r.d);
    if (r.sharded) {
      const BlockOffsets& o = layout.block(spec.num_blocks - 1);
      r.reduce(dW + o.ffn_norm, r.d);
      r.reduce(dW + o.router, static_cast<long>(r.m.experts) * r.d);
      if (spec.head) r.reduce(dW + layout.final_norm_offset(), r.d);
    }
    if (!spec.embedding) return;
    T* dE = dW + layout.embedding_offset();
    // The embedding's output grad: the first block's input grad, or with no block the layer's output grad.
    const T* dx0 = s.dx0 ? Run<T>::p(s.dx0) : dout;
    r.k().fill(dE, T(0), static_cast<long>(r.V) * r.d);
    if (r.tp_size > 1)
      r.k().embedding_backward_range(static_cast<const int*>(in), dx0, dE, r.n, r.d, layout.vocab_start(), r.V);
    else
      r.k().embedding_backward(static_cast<const int*>(in), dx0, dE, r.n, r.d);
  }
};

}  // namespace

bool moe_split_layer(const LayerLayout& layout) {
  const int n = layout.spec().num_blocks;
  return layout.expert_split().kind == ExpertSplit::Dense && n > 0 && layout.block(n - 1).moe;
}

const MoeRouting& moe_layer_routing(const LayerStash& stash) {
  if (stash.blocks.empty() || !stash.blocks.back().moe)
    throw std::logic_error("the layer's forward kept no routing (not an expert-parallel MoE layer, or it ran elsewhere)");
  return stash.blocks.back().moe->routing;
}

template <typename T>
void moe_layer_combine(ModelContext<T>& c, const LayerLayout& layout, const T* W, BufferPtr y_pairs, T* out,
                       LayerStash& s) {
  if (!moe_split_layer(layout) || s.sequences == 0 || !s.blocks.back().moe)
    throw std::logic_error("a combine without its expert-parallel MoE layer's forward");
  Run<T> r(c, layout, s.sequences);
  BlockStash& bs = s.blocks.back();
  MoeState& st = *bs.moe;
  if (static_cast<long>(y_pairs->bytes() / sizeof(T)) != st.routing.pairs() * r.d)
    throw std::logic_error("the experts gave back a number of tokens other than the dispatch sent");
  st.y_pairs = std::move(y_pairs);
  if (!layout.spec().head) {
    r.combine(st, Run<T>::p(bs.h), out);
    return;
  }
  s.x_final = r.make(r.ns * r.d);
  r.combine(st, Run<T>::p(bs.h), Run<T>::p(s.x_final));
  head_forward(r, layout, W, s, out);
}

template <typename T>
void moe_layer_dispatch_backward(ModelContext<T>& c, const LayerLayout& layout, const T* W, BufferPtr dout, T* dy_pairs,
                                 LayerStash& s) {
  if (!moe_split_layer(layout) || s.sequences == 0 || !s.blocks.back().moe || !s.blocks.back().moe->y_pairs)
    throw std::logic_error("an expert-parallel MoE layer's backward before its combine");
  Run<T> r(c, layout, s.sequences);
  LayerBackward<T> lb{r, layout, layout.spec(), s};
  BlockStash& bs = s.blocks.back();
  MoeState& st = *bs.moe;
  if (layout.spec().head) {
    lb.head_input(W, Run<T>::p(dout), nullptr);  // (the block's output grad into bs.d_out)
    st.dlayer_out = std::move(dout);
  } else {
    bs.d_out = std::move(dout);
  }
  st.dgates = r.make(r.ns * r.m.top_k);
  c.k->moe_combine_backward(Run<T>::p(bs.d_out), Run<T>::p(st.y_pairs), st.routing.pair_row->as<int>(),
                            Run<T>::p(st.routing.gates), dy_pairs, Run<T>::p(st.dgates), r.ns, r.m.top_k, r.d);
}

// An expert-parallel MoE layer's backward starts from what its dispatch's backward left in the stash
// (moe_layer_dispatch_backward): the last block's output grad, returned (the head's input grad is done); `dout` is
// then the packed tokens' grads. `what` names the pass in the error.
template <typename T>
const T* split_layer_output_grad(const LayerStash& s, const char* what) {
  const BlockStash& last = s.blocks.back();
  if (!last.moe || !last.moe->dgates || !last.d_out)
    throw std::logic_error(std::string("an expert-parallel MoE layer's ") + what + " before its dispatch's backward");
  return Run<T>::p(last.d_out);
}

template <typename T>
void layer_backward_input(ModelContext<T>& c, const LayerLayout& layout, const T* W, const void* in, const T* dout,
                          T* din, LayerStash& s) {
  if (s.sequences == 0) throw std::logic_error("backward-input without the forward's saved activations");
  Run<T> r(c, layout, s.sequences);
  LayerBackward<T> lb{r, layout, layout.spec(), s};
  const T* dy = dout;  // grad of the current block's output
  const T* dx_pairs = nullptr;  // an expert-parallel MoE layer's: its last block's packed tokens' grads
  if (moe_split_layer(layout)) {
    dy = split_layer_output_grad<T>(s, "backward-input");
    dx_pairs = dout;
  } else if (lb.spec.head) {
    dy = lb.head_input(W, dout, din);
  }
  for (int b = lb.spec.num_blocks - 1; b >= 0; --b)
    dy = lb.block_input_grad(W, in, dy, din, b, nullptr, b + 1 == lb.spec.num_blocks ? dx_pairs : nullptr);
  s.partial_first_norm = r.tp_size > 1 && !lb.spec.embedding;
  s.input_grads_done = true;
}

template <typename T>
void layer_backward_weight(ModelContext<T>& c, const LayerLayout& layout, const void* in, const T* dout, T* dW,
                           LayerStash& s) {
  if (!s.input_grads_done) throw std::logic_error("backward-weight before backward-input");
  Run<T> r(c, layout, s.sequences);
  LayerBackward<T> lb{r, layout, layout.spec(), s};
  if (moe_split_layer(layout)) {  // the head's output grad came with the dispatch's backward (moe_layer_dispatch_backward)
    if (lb.spec.head) lb.head_weight(Run<T>::p(s.blocks.back().moe->dlayer_out), dW);
  } else if (lb.spec.head) {
    lb.head_weight(dout, dW);
  }
  for (int b = lb.spec.num_blocks - 1; b >= 0; --b) lb.block_weight(in, dout, dW, b);
  lb.finish_weight(in, dout, dW);
  s = LayerStash{};
}

template <typename T>
void layer_backward(ModelContext<T>& c, const LayerLayout& layout, const T* W, const void* in, const T* dout, T* din,
                    T* dW, LayerStash& s) {
  if (s.sequences == 0) throw std::logic_error("backward without the forward's saved activations");
  Run<T> r(c, layout, s.sequences);
  LayerBackward<T> lb{r, layout, layout.spec(), s};
  const T* dy = dout;
  const T* dx_pairs = nullptr;  // an expert-parallel MoE layer's: its last block's packed tokens' grads
  if (moe_split_layer(layout)) {
    dy = split_layer_output_grad<T>(s, "backward");
    dx_pairs = dout;
    if (lb.spec.head) lb.head_weight(Run<T>::p(s.blocks.back().moe->dlayer_out), dW);
    s.dxnf.reset(), s.xnf.reset(), s.rstdf.reset(), s.x_final.reset();
  } else if (lb.spec.head) {
    dy = lb.head_input(W, dout, din);
    lb.head_weight(dout, dW);
    s.dxnf.reset(), s.xnf.reset(), s.rstdf.reset(), s.x_final.reset();
  }
  for (int b = lb.spec.num_blocks - 1; b >= 0; --b) {
    // (the norms' gain grads with their input grads, in one pass: the same bits as backward-weight's)
    const T* dx = lb.block_input_grad(W, in, dy, din, b, dW, b + 1 == lb.spec.num_blocks ? dx_pairs : nullptr);
    lb.block_weight(in, dout, dW, b, false);
    // Block b is done: its saved activations and grads go (its input, the block before's output, too; the first
    // block's input grad stays for the embedding).
    s.blocks[b] = BlockStash{};
    dy = dx;
  }
  s.partial_first_norm = r.tp_size > 1 && !lb.spec.embedding;
  lb.finish_weight(in, dout, dW);
  s = LayerStash{};
}

template <typename T>
void loss_forward_backward(ModelContext<T>& c, const ModelConfig& model, const T* logits, const int* targets,
                           int sequences, T scale, T* dlogits, double* loss_sums, int tp_index) {
  const long n = static_cast<long>(sequences) * model.seq;
  if (!c.tp || c.tp->size <= 1) {
    c.k->cross_entropy(logits, targets, dlogits, loss_sums, n, model.vocab, model.tokens_per_microbatch(), scale);
    return;
  }
  // Megatron-LM's vocab_parallel_cross_entropy: the rows' maxima over every slice (gathered, then the largest),
  // the sums of exponentials and the target logits (each in one slice) summed over the group.
  const int t = c.tp->size, V = model.vocab / t, lo = tp_index * V;
  BufferPtr mine = c.alloc->allocate(static_cast<std::size_t>(n) * sizeof(T));
  BufferPtr maxes = c.alloc->allocate(static_cast<std::size_t>(n) * t * sizeof(T));
  BufferPtr stats = c.alloc->allocate(static_cast<std::size_t>(n) * 2 * sizeof(double));
  c.k->row_max(logits, mine->as<T>(), n, V);
  c.tp->all_gather(mine->as<T>(), maxes->as<T>(), n);
  c.k->vocab_parallel_ce_stats(logits, targets, maxes->as<T>(), t, stats->as<double>(), n, V, lo);
  c.tp->all_reduce_f64(stats->as<double>(), 2 * n);
  c.k->vocab_parallel_ce_finish(logits, targets, maxes->as<T>(), t, stats->as<double>(), dlogits, loss_sums, n, V, lo,
                                model.tokens_per_microbatch(), scale);
}

long layer_output_elements(const LayerLayout& layout, int sequences) {
  const long n = static_cast<long>(sequences) * layout.model().seq;
  if (moe_split_layer(layout)) return n / layout.tp_size() * layout.model().top_k * layout.model().dim;
  return n * (layout.spec().head ? layout.vocab() : layout.model().dim);
}

#define TRAINSIM_INSTANTIATE(T)                                                                                          \
  template void rope_tables<T>(const ModelConfig&, std::vector<T>&, std::vector<T>&);                                   \
  template void layer_forward<T>(ModelContext<T>&, const LayerLayout&, const T*, const void*, int, T*, LayerStash*);    \
  template void layer_backward_input<T>(ModelContext<T>&, const LayerLayout&, const T*, const void*, const T*, T*,       \
                                         LayerStash&);                                                                \
  template void layer_backward_weight<T>(ModelContext<T>&, const LayerLayout&, const void*, const T*, T*, LayerStash&); \
  template void layer_backward<T>(ModelContext<T>&, const LayerLayout&, const T*, const void*, const T*, T*, T*,        \
                                  LayerStash&);                                                                       \
  template void loss_forward_backward<T>(ModelContext<T>&, const ModelConfig&, const T*, const int*, int, T, T*, double*, \
                                         int);                                                                         \
  template void moe_layer_combine<T>(ModelContext<T>&, const LayerLayout&, const T*, BufferPtr, T*, LayerStash&);     \
  template void moe_layer_dispatch_backward<T>(ModelContext<T>&, const LayerLayout&, const T*, BufferPtr, T*, LayerStash&);
TRAINSIM_INSTANTIATE(float)
TRAINSIM_INSTANTIATE(double)
#undef TRAINSIM_INSTANTIATE

}  // namespace trainsim::exec
