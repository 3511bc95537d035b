// The executor's Mixture-of-Experts FFN (DESIGN §1, §5; docs/executor.md "Mixture of Experts"), written once
// against Kernels<T> as the rest of the model (exec/model.h), and used two ways: whole, inside an MoE block whose
// layer holds its experts (one device, the reference, a schedule without expert parallelism), and cut at the
// all-to-alls of an expert-parallel schedule, whose dense part routes and packs the tokens, whose expert slices
// run on other ranks, and whose combine puts the outputs back.
//
// Routing (Jiang et al. 2024, Mixtral; Fedus et al. 2021): logits = rmsnorm(h)·Wrouter^T (n×E); each token goes
// to the k experts of the largest logits (the lower expert first among equal ones), with gates the softmax of
// those k logits; the block's output is h + Σ_s gate_s · expert_{idx_s}(rmsnorm(h)). Dropless: every token reaches
// its k experts; with a capacity factor (ModelConfig::capacity_factor) each expert keeps at most its capacity of a
// microbatch's pairs and the rest are dropped. With ModelConfig::aux_loss_coeff each block adds the load-balancing
// loss (Switch Transformer's) to each microbatch's loss: moe_aux_coefficients and Kernels::moe_aux_loss.
//
// The packed order of a forward's n·k (token, slot) pairs: by expert, then token (a token reaches an expert at
// most once). An expert slice's rows are the packed rows of its experts from every member of its EP group, by
// expert, then member (exec/rank_executor_moe.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "exec/buffer.h"
#include "exec/kernels.h"

namespace trainsim::exec {

/// Where one forward's tokens go (n tokens, k slots each, E experts).
struct MoeRouting {
  long tokens = 0;
  int experts = 0, top_k = 0;
  long kept = 0;        ///< packed rows: the n·k (token, slot) pairs less those dropped (token dropping)
  BufferPtr idx;        ///< n×k int32: the expert of (token, slot), slots in decreasing gate order
  BufferPtr gates;      ///< n×k: the softmax of the k selected logits
  BufferPtr pair_row;   ///< n×k int32: the packed row of (token, slot), -1 for a dropped pair
  BufferPtr pair_token; ///< kept int32: the token of each packed row
  std::vector<long> counts;  ///< host: packed rows per expert (E), summing to kept
  std::vector<int> host_idx; ///< host: idx
  std::vector<char> host_dropped;  ///< host, n×k: the pair was dropped (empty when dropless)
  /// host, when asked for: per token, how far its k-th largest logit is above the next (the margin a rounding
  /// difference must cross to send it elsewhere), over the largest magnitude of its logits; +inf for k = E
  /// With token dropping, a token whose pair sits at an expert's capacity is as near a tie as the gap between the
  /// last kept and the first dropped gate of that expert, over the largest gate: its margin is at most that.
  std::vector<double> margins;
  BufferPtr logits;  ///< n×E: the router's logits, when kept (moe_route's keep_logits: the auxiliary loss)
  /// Rows of the packed order (the pairs the experts run).
  long pairs() const { return kept; }
};

/// What a microbatch's routing was, for comparing two runs (the executor's --check, exec/training.h): a hash of
/// its tokens' experts (the sum, mod 2^64, of each token's FNV-1a over its index in the microbatch and its k
/// experts: a sum, so that the digests of a microbatch's sequence shards add up to the whole microbatch's), how
/// many of its (token, slot) pairs each expert got (E counts; with token dropping E more: each expert's dropped
/// pairs), and the smallest relative margin among its tokens (moe_route's
/// margins; +inf when not taken). `shard` of `shards`: the sequence shard of the microbatch it covers (an MoE
/// layer's TP slice routes one, exec/model.h); 0 of 1 for the whole microbatch.
struct RoutingDigest {
  std::uint64_t hash = 0;
  std::vector<int> counts;
  double min_margin = 0;
  int shard = 0, shards = 1;
};
/// The digest of rows [first, first + count) of `r`: one microbatch's tokens, or under TP its sequence shard
/// `shard` of `shards` (of each of its sequences of `seq` tokens, the tokens [shard·seq/shards,
/// (shard+1)·seq/shards), exec/sequence_shard.h), which give the tokens' indices in the microbatch.
RoutingDigest routing_digest(const MoeRouting& r, long first, long count, int seq = 1, int shard = 0, int shards = 1);
/// Adds the digest of another sequence shard of the same microbatch to `into` (hash, counts, margin).
void add_shard(RoutingDigest& into, const RoutingDigest& part);

/// What an MoE block keeps from its forward for its backward (BlockStash::moe).
struct MoeState {
  MoeRouting routing;
  bool split = false;          ///< expert-parallel: the experts ran on the ranks of the EP group
  BufferPtr x_pairs, y_pairs;  ///< n·k × d, packed: the experts' inputs (whole block only) and outputs
  BufferPtr gu_pairs, act_pairs;  ///< whole block: the experts' pre-activations (n·k × 2f) and activations (n·k × f)
  BufferPtr dgates;            ///< n×k: the gates' grad (the combine's backward)
  BufferPtr dy_pairs;          ///< whole block: the experts' output grads, for their weight grads
  BufferPtr dlogits;           ///< n×E: the router logits' grad, for the router's weight grad
  BufferPtr dlayer_out;        ///< split, a layer with the LM head: the logits' grad, for the head's weight grad
  BufferPtr experts_dw;        ///< whole block: the experts' weight grads (backward-input), for backward-weight
  BufferPtr aux_coeffs;        ///< with the auxiliary loss: its per-expert weights, G×E (moe_aux_coefficients)
  std::size_t bytes() const;
};

/// Routes `n` tokens (xn: n×d, the FFN norm's output) with the router `Wr` (E×d): logits, top-k, gates and the
/// packed order (counts computed on the host from the indices). Source: Mixtral's router.
/// With `margins`, also the tokens' margins (MoeRouting::margins; the logits read back to the host). `misroute`
/// (fault injection, tests only): the first `misroute` tokens' k-th expert is replaced by the lowest one not chosen.
/// With `capacity_factor` C > 0 (token dropping, ModelConfig::capacity_factor), the tokens come in groups of
/// `group` (a microbatch's; n a multiple of it), and in each group expert e keeps at most ceil(C·group·k/E) of its
/// pairs, those of the largest gates, the lower token first among equal gates (Megatron-LM's "probs" drop policy;
/// GShard's capacity). Throws std::invalid_argument when n is not a multiple of `group`. With `keep_logits`, the
/// logits stay in MoeRouting::logits.
template <typename T>
MoeRouting moe_route(Kernels<T>& k, Allocator& alloc, const T* xn, const T* Wr, long n, int d, int E, int top_k,
                     bool margins = false, int misroute = 0, double capacity_factor = 0, long group = 0,
                     bool keep_logits = false);

/// The (token, slot) pairs the router sent each expert, before any dropping, per group of `group` consecutive
/// tokens (a microbatch's, or under TP its sequence shard's): G×E counts, G = tokens / group, row-major. Throws
/// std::invalid_argument when the tokens are not whole groups.
std::vector<double> routed_counts(const MoeRouting& r, long group);

/// The auxiliary loss's per-expert weights (Kernels::moe_aux_loss's coeffs) from a microbatch's routed counts
/// (routed_counts, summed over the microbatch's sequence shards): α·E/k · count_e / n², n the microbatch's tokens,
/// so that Σ_t Σ_e p_te·coeff_e = α·E/k · Σ_e (count_e/n)·(Σ_t p_te/n) (Megatron-Core's
/// switch_load_balancing_loss_func; Fedus et al. 2021, eq. 4 with f_e over the n·k pairs). In place on `counts`.
void moe_aux_coefficients(std::vector<double>& counts, double alpha, int experts, int top_k, long tokens);

/// The capacity of one expert under token dropping: ceil(C·tokens·k/E) pairs of a group of `tokens` tokens.
long expert_capacity(double capacity_factor, long tokens, int top_k, int experts);

/// out (n·k × d) = x's rows in the routing's packed order.
template <typename T>
void moe_pack(Kernels<T>& k, const MoeRouting& r, const T* x, T* out, int d);

/// Experts on rows grouped by expert: counts[i] rows (back to back in `x`, rows×d) for the i-th expert of `W`
/// (the first held expert's parameters; each expert Wgu 2f×d then Wdown d×f, exec/layout.h).
/// y (rows×d) = Wdown_i·swiglu(Wgu_i·x). With gu and act (rows×2f, rows×f), keeps the pre-activations and
/// activations there.
template <typename T>
void experts_forward(Kernels<T>& k, Allocator& alloc, const T* W, int d, int f, const std::vector<long>& counts,
                     const T* x, T* y, T* gu = nullptr, T* act = nullptr);

/// The experts' backward from dy (rows×d): dx (rows×d) and their weight grads into dW (the same layout as W;
/// overwritten, zero for an expert without rows). With gu and act (experts_forward's), no recomputation.
template <typename T>
void experts_backward(Kernels<T>& k, Allocator& alloc, const T* W, int d, int f, const std::vector<long>& counts,
                      const T* x, const T* dy, T* dx, T* dW, const T* gu = nullptr, const T* act = nullptr);

/// Elements of one expert's parameters: Wgu (2f×d) and Wdown (d×f).
inline long expert_elements(int d, int f) { return 3L * d * f; }

}  // namespace trainsim::exec
