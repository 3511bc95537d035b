#include "hardware/memory.h"

#include <algorithm>

#include "hardware/experts.h"

namespace trainsim::hw {

double activation_bytes_per_block(const ModelSpec& m, double s, double b, Recompute r, int tp, bool sp,
                                  Attention attention, BlockPart part) {
  const double h = m.hidden, a = m.heads, kv = static_cast<double>(m.kv_width()), e = m.activation_bytes;
  const double f = part == BlockPart::Dense ? m.ffn : static_cast<double>(m.shared_experts) * m.expert_width();
  const double q = static_cast<double>(m.q_width());  // h unless head_dim says other
  const double sbh = s * b * h, sbq = s * b * q, t = tp;
  if (r == Recompute::Full) return e * sbh / (sp ? t : 1);  // the block's input, a sequence shard with SP
  const double statistics = 4 * a * s * b;  // flash attention's fp32 log-sum-exp per head and token
  // An MoE block's router scores (fp32, kept for the softmax's and top-k's backward), on every TP rank.
  const double router = part == BlockPart::MoeShared ? 4.0 * m.experts * s * b : 0;
  if (r == Recompute::Op) {
    const double kept = m.gated_ffn ? e * s * b * (q + kv + f) : e * s * b * (q + 2 * kv + f);  // odd mms' outputs
    const double attention_out = e * sbq + statistics;
    const double replicated = e * sbh + (m.gated_ffn ? e * sbh : 0);  // the block's input (and w2's output)
    return (kept + attention_out) / t + replicated / (sp ? t : 1) + router;
  }
  const double mask = m.dropout ? 1 : 0;
  // Terms split by tensor parallelism (inside the attention and the MLP).
  double split = e * s * b * (q + kv) + e * s * b * kv + e * sbq + (m.gated_ffn ? 3 : 2) * e * s * b * f;
  if (m.mla()) {
    // Latent attention: the latents (and the rotary key) its up-projections read, then every head's Q and K
    // (q wide), V and the projection's input (o wide).
    const double o = static_cast<double>(m.o_width());
    split = e * s * b * (m.q_lora_rank + m.kv_lora_rank + m.rope_head_dim) + e * s * b * 2 * q + e * s * b * 2 * o +
            (m.gated_ffn ? 3 : 2) * e * s * b * f;
  }
  double scores = attention == Attention::Flash ? statistics : (e + mask * (1 + e)) * a * s * s * b;
  if (r == Recompute::Selective) scores = 0;
  // Terms replicated across tensor-parallel ranks unless sequence parallelism splits them.
  double replicated = e * sbh + mask * sbh + e * sbh + mask * sbh + 2 * e * sbh;
  return (split + scores) / t + replicated / (sp ? t : 1) + router;
}

ModelStates model_state_bytes(const ModelSpec& m, double params, int stage, int dp, int tp) {
  ModelStates st;
  params /= tp;
  st.weights = params * m.weight_bytes / (stage >= 3 ? dp : 1);
  st.grads = params * m.grad_bytes / (stage >= 2 ? dp : 1);
  st.optimizer = params * (m.master_bytes + m.optimizer_bytes) / (stage >= 1 ? dp : 1);
  return st;
}

TensorSizes::TensorSizes(const HardwareSetting& s, int layers, const StageLayout* layout, bool tied_copy)
    : s_(s), layers_(partition_layers(s.model, layers, layout)), tied_copy_(tied_copy && s.model.tied_embeddings) {}

double TensorSizes::layer_parameters(int l) const {
  const LayerContent& c = layers_.at(l);
  const ModelSpec& m = s_.model;
  const double copy = c.head && tied_copy_ ? static_cast<double>(m.vocab) * m.hidden : 0;
  const int moe = layer_moe_blocks(l);
  const double blocks = (moe == 0 ? c.num_blocks * m.block_parameters()
                                  : (c.num_blocks - moe) * m.block_parameters() + moe * m.dense_part_parameters(m.blocks - 1)) +
                        (experts_inside(l) ? layer_expert_parameters(l) : 0);
  return blocks + (c.embedding ? m.embedding_parameters() : 0) + (c.head ? m.head_parameters() : 0) + copy;
}

void TensorSizes::set_experts_inside(int l) {
  if (l < 0 || l >= static_cast<int>(layers_.size()) || layer_moe_blocks(l) == 0) return;
  if (inside_.empty()) inside_.assign(layers_.size(), 0);
  inside_[l] = 1;
}

// Bytes the routed pairs of `tokens` tokens keep per MoE block with EP 1: each pair's gathered input and its
// expert's output (which the gates' grad reads, as Megatron-Core's unpermute keeps it), none under full
// recomputation, and its expert's saved activations (expert_activation_bytes).
// With TP (each expert split over the TP group) every TP rank holds every pair of the gathered tokens, its expert's
// terms at 1/tp of the width.
static double inside_pair_bytes(const ModelSpec& m, double tokens, Recompute r, int tp = 1) {
  const double pairs = routed_pairs(m, tokens, ExpertSplit{1, 1});
  return pairs * ((r == Recompute::Full ? 0 : 2.0 * m.hidden * m.activation_bytes) + expert_activation_bytes(m, r, tp));
}

int TensorSizes::layer_moe_blocks(int l) const {
  const LayerContent& c = layers_.at(l);
  return s_.model.moe_blocks(c.first_block, c.num_blocks);
}

double TensorSizes::layer_expert_parameters(int l) const {
  return layer_moe_blocks(l) * s_.model.routed_parameters(s_.model.blocks - 1);
}

double TensorSizes::layer_linear_parameters(int l) const {
  double per_block = 0;
  for (const Linear& x : block_linears(s_.model)) per_block += x.in * x.out;
  return layers_.at(l).num_blocks * per_block;
}

double TensorSizes::wire_bytes(const Tensor& t, double load) const {
  const ModelSpec& m = s_.model;
  const double frac = t.held_fraction();
  const double tokens = s_.tokens_per_microbatch() * t.batches.size();
  const int L = static_cast<int>(layers_.size());
  const bool expert_state = t.expert() && t.route == Route::None;  // an expert slice's weights, grads, state
  if ((t.route == Route::ExpertIn || t.route == Route::ExpertOut) && t.layer > 0 && t.layer <= L)
    return routed_pairs(m, tokens, ExpertSplit{t.ep_size, load}) * m.hidden * m.activation_bytes *
           (frac * t.ep_size);  // (the shards held; held_fraction's 1/ep is in the pairs)
  // A dense part's output waiting for the dispatch (and its grad back from the combine): hidden states, also for
  // the last layer, whose LM head the schedule's dense part runs.
  if (t.route == Route::Routed) return tokens * m.hidden * m.activation_bytes * frac;
  const double params = expert_state ? layer_expert_parameters(t.layer) : 0;
  switch (t.kind) {
    case TensorKind::Weight: return (expert_state ? params : layer_parameters(t.layer)) * m.weight_bytes * frac;
    case TensorKind::OptState:
      return (expert_state ? params : layer_parameters(t.layer)) * (m.master_bytes + m.optimizer_bytes) * frac;
    case TensorKind::WeightGrad: return (expert_state ? params : layer_parameters(t.layer)) * m.grad_bytes * frac;
    case TensorKind::Activation:
      if (t.layer == 0) return tokens * 4 * frac;
      if (t.layer >= L) return tokens * 4.0 * m.vocab * frac;
      return tokens * m.hidden * m.activation_bytes * frac;
    case TensorKind::ActivationGrad:
      if (t.layer == 0) return 0;
      if (t.layer >= L) return tokens * static_cast<double>(m.vocab) * m.activation_bytes * frac;
      return tokens * m.hidden * m.activation_bytes * frac;
  }
  return 0;
}

bool TensorSizes::holds_saved(const Tensor& t, TpSplit tp) {
  // With sequence parallelism the rank keeps its sequence shard of a layer's input between the forward and the
  // backward, and all-gathers the whole input afresh for each pass (Korthikanti et al. 2022 §4.2.2); the model
  // input (the token ids) is loaded whole by every TP rank. Without it the rank keeps the whole input.
  if (tp.sequence_parallel && tp.degree > 1 && t.layer > 0)
    return t.num_shards == tp.degree && t.shards.size() == 1;
  return t.complete();
}

double TensorSizes::resident_bytes(const Tensor& t, bool forward_runs_here, TpSplit tp, double load) const {
  const int L = static_cast<int>(layers_.size());
  if (t.kind == TensorKind::Activation && t.route == Route::ExpertIn && forward_runs_here && t.complete() &&
      t.layer >= 1 && t.layer <= L) {
    // The experts of layer t.layer - 1 ran on these tokens (with expert TP, all-gathered: a dispatched shard is
    // only its bytes): what they saved, per MoE block, of the rank's expert-TP slice (tp.degree) of the width.
    const double input = wire_bytes(t, load);
    const int k = layer_moe_blocks(t.layer - 1);
    const double pairs = input / (s_.model.hidden * s_.model.activation_bytes);
    return input + k * pairs * expert_activation_bytes(s_.model, s_.recompute, std::max(tp.degree, 1)) +
           std::max(k - 1, 0) * input;
  }
  if (t.kind != TensorKind::Activation || t.layer >= L || !forward_runs_here || t.tp_size != 1 ||
      t.route != Route::None || !holds_saved(t, tp))
    return wire_bytes(t, load);
  const LayerContent& c = layers_.at(t.layer);
  const double b = static_cast<double>(s_.microbatch_size) * t.batches.size();
  const double s = static_cast<double>(s_.seq_len()) / s_.context_parallel;  // this rank's tokens of a sequence
  const int moe = layer_moe_blocks(t.layer);
  double bytes = (c.num_blocks - moe) * activation_bytes_per_block(s_.model, s, b, s_.recompute, tp.degree,
                                                                   tp.sequence_parallel, s_.attention);
  if (moe > 0)
    bytes += moe * activation_bytes_per_block(s_.model, s, b, s_.recompute, tp.degree, tp.sequence_parallel,
                                              s_.attention, BlockPart::MoeShared);
  if (moe > 0 && experts_inside(t.layer))
    bytes += moe * inside_pair_bytes(s_.model, s * b, s_.recompute, std::max(tp.degree, 1));
  if (c.head)
    bytes += 2.0 * s * b * s_.model.hidden * s_.model.activation_bytes / (tp.sequence_parallel ? tp.degree : 1);
  if (c.embedding) bytes += wire_bytes(t);  // the token ids; the embedding's output is block 0's input
  return bytes;
}

double TensorSizes::workspace_bytes(const Op& op, TpSplit tp, double load) const {
  const int L = static_cast<int>(layers_.size());
  if (op.kind == OpKind::Loss) {
    double logits = 0;
    for (const Tensor& t : op.reads)
      if (t.kind == TensorKind::Activation && t.layer >= L) logits += wire_bytes(t);
    return 2 * logits;
  }
  const bool recomputing = op.kind == OpKind::Backward || op.kind == OpKind::BackwardInput;
  if (!recomputing || s_.recompute != Recompute::Full || op.layer < 0 || op.layer >= L ||
      layers_[op.layer].num_blocks == 0)
    return 0;
  const double b = static_cast<double>(s_.microbatch_size) * op.batches.size();
  for (const Tensor& x : op.reads)
    if (x.expert() && x.kind == TensorKind::Weight)  // an expert slice's backward: one MoE block's experts again
      return routed_pairs(s_.model, s_.tokens_per_microbatch() * op.batches.size(), ExpertSplit{x.ep_size, load}) *
             expert_activation_bytes(s_.model, Recompute::None, x.tp_size);
  const double s = static_cast<double>(s_.seq_len()) / s_.context_parallel;
  const int t = std::max(tp.degree, 1);
  if (layer_moe_blocks(op.layer) > 0 && layer_moe_blocks(op.layer) == layers_[op.layer].num_blocks)
    return activation_bytes_per_block(s_.model, s, b, Recompute::None, t, tp.sequence_parallel, s_.attention,
                                      BlockPart::MoeShared) -
           activation_bytes_per_block(s_.model, s, b, Recompute::Full, t, tp.sequence_parallel, s_.attention,
                                      BlockPart::MoeShared) +
           (experts_inside(op.layer) ? inside_pair_bytes(s_.model, s * b, Recompute::None, t) : 0);
  return activation_bytes_per_block(s_.model, s, b, Recompute::None, t, tp.sequence_parallel, s_.attention) -
         activation_bytes_per_block(s_.model, s, b, Recompute::Full, t, tp.sequence_parallel, s_.attention);
}

}  // namespace trainsim::hw
