// The model's compute for one schedule layer (exec/model_config.h), written once against Kernels<T> so
// that every backend runs the same arithmetic: forward, backward-input (the activation gradient) and
// backward-weight (the weight gradients), the last two split as zero-bubble schedules need (Qi et al.
// 2024: B and W), and the cross-entropy loss.
//
// Activations between layers: layer 0 reads token ids (n = B·T int32); a middle layer reads and writes the
// residual stream (n×d); the last layer writes logits (n×V). The forward keeps what the backward needs in a
// LayerStash (the saved activations); backward-input keeps what backward-weight needs and drops the rest.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "exec/buffer.h"
#include "exec/kernels.h"
#include "exec/layout.h"
#include "exec/moe.h"
#include "hardware/setting.h"

namespace trainsim::exec {

/// The TP group a layer's TP slice is computed with (docs/design.md "Tensor parallelism"): the reductions
/// inside a layer (between sublayers and blocks, after the vocabulary-parallel embedding, the vocabulary-
/// parallel cross-entropy's) run over it. Each call is a collective: every member of the group makes the same
/// calls in the same order. Buffers are backend memory.
template <typename T>
struct TpComm {
  /// x (count elements) = the sum of every member's x, the same bits on every member.
  std::function<void(T* x, long count)> all_reduce;
  /// The same for doubles (the cross-entropy's sums of exponentials).
  std::function<void(double* x, long count)> all_reduce_f64;
  /// out (k·count, k the group's size) = every member's `count` elements of `in`, member-major.
  std::function<void(const T* in, T* out, long count)> all_gather;
  int size = 1;  ///< the group's size (the TP degree)
};

/// What the model's functions run on.
template <typename T>
struct ModelContext {
  Kernels<T>* k = nullptr;
  Allocator* alloc = nullptr;
  const T* rope_cos = nullptr;  ///< T × hd/2, backend memory (rope_tables())
  const T* rope_sin = nullptr;
  /// The TP group, for a layout that is a TP slice (LayerLayout::tp_size() > 1); null otherwise.
  const TpComm<T>* tp = nullptr;
  /// Activation recomputation (Korthikanti et al. 2022, the modes of hardware/setting.h): what a forward keeps
  /// for its backward. None: every saved activation. Selective: all but each block's attention probabilities
  /// (B·H·T·T), which the backward recomputes from the kept q and k. Full: only each block's input; the backward
  /// recomputes the block's forward (all but its down projection, whose output it does not need) just before
  /// the block's backward. The recomputation is the same arithmetic redone, so results are bit-identical.
  hw::Recompute recompute = hw::Recompute::None;
  /// Mixture of Experts: called with each MoE block's routing (global block index) as its forward routes, for
  /// comparing two runs' routing (exec/training.h --check); empty: nothing is recorded.
  std::function<void(int block, const MoeRouting& routing)> on_route = {};
  /// Fault injection (tests, exec/rank_executor.h FaultInjection): the first N tokens of each MoE forward go to the
  /// lowest expert not chosen in place of their k-th (moe_route's `misroute`).
  int misroute_tokens = 0;
  /// The weight of one microbatch's loss in the step's objective: 1 / the step's microbatches (the cross-entropy's
  /// scale is this over a microbatch's tokens). It scales the gradient of the MoE blocks' load-balancing loss
  /// (ModelConfig::aux_loss_coeff), which is computed only when it is set: 0 (evaluation, sampling) computes none.
  double microbatch_weight = 0;
  /// With the load-balancing loss: one double in backend memory to which each MoE block's backward adds its
  /// microbatches' loss (unweighted; a TP slice that routes every token adds it on slice 0 only). Null: not summed.
  double* aux_loss_sum = nullptr;
};

/// cos and sin of the rotary angles t·theta^(-2i/hd), t < seq, i < hd/2, row-major (host memory).
template <typename T>
void rope_tables(const ModelConfig& model, std::vector<T>& cos, std::vector<T>& sin);

/// Saved activations of one block (forward) and its output gradients (backward-input).
struct BlockStash {
  BufferPtr x_in, xn1, rstd1, q, k, v, probs, att, h, xn2, rstd2, gu, act;  // forward
  BufferPtr d_out, dgu, dxn2, dh, dqkv, dxn1;                                // backward-input, for backward-weight
  std::shared_ptr<MoeState> moe;  // an MoE block: its routing and experts' activations (exec/moe.h)
};

/// Saved activations of one layer for one batch set.
struct LayerStash {
  int sequences = 0;  ///< B of the forward that made it
  std::vector<BlockStash> blocks;
  BufferPtr x_final, xnf, rstdf;  // head: the last block's output, its norm and rstd
  BufferPtr dxnf;                  // head: grad of the normed input, for the final norm's gain
  BufferPtr dx0;                   // embedding: grad of the embedding output
  bool input_grads_done = false;   ///< backward-input ran: backward-weight may run
  /// TP: the first block's attention-norm input grad was left a partial sum (the layer's input grad is one),
  /// so its gain's grad is one too: backward-weight sums it over the TP group.
  bool partial_first_norm = false;
  /// Bytes held.
  std::size_t bytes() const;
};

/// Elements of the activation entering layer `l` of `layers` for B sequences: tokens (layer 0, int32),
/// hidden states (0 < l < layers) or logits (l == layers). The activation grad has the same shape, except
/// at layer 0, where it is empty (nothing flows into token ids).
long activation_elements(const ModelConfig& model, int l, int layers, int sequences);
long activation_grad_elements(const ModelConfig& model, int l, int layers, int sequences);

/// Elements of the output of `layout`'s layer for B sequences: hidden states (n×d), or logits (n×V; the
/// vocabulary slice n×V/t of a TP slice); for a layer whose last block is an expert-parallel MoE block
/// (moe_split_layer), the packed tokens for the dispatch (n·top_k × d; a TP slice's, its sequence shard's n/t·top_k × d).
long layer_output_elements(const LayerLayout& layout, int sequences);

/// True when `layout`'s layer ends in an MoE block whose experts are in expert slices (ExpertSplit::Dense): its
/// forward stops at the router and writes the packed tokens for the dispatch all-to-all; moe_layer_combine
/// finishes it after the experts ran (the rest of the layer: the residual sum, the final norm and LM head).
bool moe_split_layer(const LayerLayout& layout);

/// Forward of the layer for B = `sequences` sequences: `in` is tokens (int32, embedding layer) or hidden
/// states (T elements); `out` receives hidden states or logits. With a stash, keeps the saved activations.
///
/// On TP slice j of t (layout.tp_size() > 1, c.tp set): attention runs the slice's heads and the MLP its FFN
/// columns; the row-parallel outputs (Wo's, Wdown's, the vocabulary-parallel embedding's) are all-reduced over
/// c.tp inside, except the last block's Wdown output of a layer without the LM head, which `out` receives as
/// slice j's partial sum (slice 0 adds the residual, so that the sum over the slices is the output). The LM
/// head writes the logits' vocabulary slice (n × V/t).
template <typename T>
void layer_forward(ModelContext<T>& c, const LayerLayout& layout, const T* W, const void* in, int sequences, T* out,
                   LayerStash* stash);

/// Backward-input: from `dout` (grad of the layer's output) computes `din` (grad of its input `in`; ignored
/// for the embedding layer) and keeps the output grads backward-weight needs. Needs the forward's stash
/// (std::logic_error otherwise). On a TP slice `dout` is the complete grad (the logits' vocabulary slice for
/// the LM head) and `din` slice j's partial sum of the input grad; the grads of the column-parallel inputs
/// are all-reduced inside, but the first block's of a layer without the embedding, which `din` carries.
template <typename T>
void layer_backward_input(ModelContext<T>& c, const LayerLayout& layout, const T* W, const void* in, const T* dout,
                          T* din, LayerStash& stash);

/// Backward, both halves (a schedule's `backward` op): the same results as layer_backward_input then
/// layer_backward_weight, bit for bit, computed block by block from the last: each block's weight grads right
/// after its input grad, its saved activations and output grads freed before the next block's (as autograd
/// frees them), so that one block's grads are held at a time rather than every block's. Writes `din` (ignored
/// for the embedding layer) and the whole flat gradient dW; empties the stash. For a moe_split_layer after
/// moe_layer_dispatch_backward, `dout` is the grads of the packed tokens (n·k × d) that the experts gave back.
template <typename T>
void layer_backward(ModelContext<T>& c, const LayerLayout& layout, const T* W, const void* in, const T* dout, T* din,
                    T* dW, LayerStash& stash);

/// Backward-weight: writes the whole flat gradient dW (P elements, the padding untouched) from the stash of
/// backward-input, `in` (tokens, for the embedding) and `dout` (the layer's output grad). Drops the stash's
/// buffers. On a TP slice: the slice's gradient; the replicated norm gains' grads are the same on every slice
/// (the first block's attention-norm gain is all-reduced over c.tp when its input grad was a partial sum).
template <typename T>
void layer_backward_weight(ModelContext<T>& c, const LayerLayout& layout, const void* in, const T* dout, T* dW,
                           LayerStash& stash);

// ---- Mixture of Experts with expert parallelism (exec/moe.h; docs/executor.md "Mixture of Experts") ----
// A layer of moe_split_layer runs as: layer_forward (to the packed tokens) -> [dispatch, experts, combine
// all-to-alls] -> moe_layer_combine; backward: moe_layer_dispatch_backward -> [dispatch, experts' backward,
// combine] -> layer_backward with the packed tokens' grads as `dout`. The expert slices' ops run experts_forward
// and experts_backward (exec/moe.h) on the rows their all-to-alls gathered.

/// The routing the forward of such a layer chose (the last block's), for the dispatch (host counts per expert,
/// packed order). Throws std::logic_error when the stash has none.
const MoeRouting& moe_layer_routing(const LayerStash& stash);

/// Finishes the forward of a moe_split_layer: `y_pairs` (n·k × d, packed order) are the experts' outputs,
/// combined with the gates onto the residual; then the final norm and LM head when the layer has them. Writes the
/// layer's output `out` (hidden states or logits) and keeps y_pairs in the stash.
///
/// On a TP slice j of t (Megatron-Core's MoE with sequence parallelism, expert TP 1): the layer's forward routed
/// only its sequence shard's n/t tokens (exec/sequence_shard.h's rows), so y_pairs are (n/t)·k × d and `out` is the
/// layer output's sequence shard j (n/t × d); with the LM head, the final norm runs on the shard, its output is
/// all-gathered over c.tp, and `out` receives the logits' vocabulary slice j of every token (n × V/t: the same
/// elements as the schedule's sequence shard of the final activation, which the loss reads as that slice).
template <typename T>
void moe_layer_combine(ModelContext<T>& c, const LayerLayout& layout, const T* W, BufferPtr y_pairs, T* out,
                       LayerStash& stash);

/// The first part of a moe_split_layer's backward: from `dout` (the layer output's grad, kept in the stash as the
/// residual's), through the LM head when the layer has it, to the experts' output grads `dy_pairs` (n·k × d,
/// packed order) and the gates' grads (kept). On a TP slice: the shard's, as moe_layer_combine (`dout` the shard's
/// grad, or the logits' vocabulary slice's, whose head input grad is all-reduced and its shard rows kept).
template <typename T>
void moe_layer_dispatch_backward(ModelContext<T>& c, const LayerLayout& layout, const T* W, BufferPtr dout,
                                 T* dy_pairs, LayerStash& stash);

/// Softmax cross-entropy of `logits` (B·T × V) against `targets` (B·T): writes dlogits scaled by `scale`
/// (1 / tokens of the whole step, so that grads summed over microbatches are the mean's) and adds each
/// microbatch's summed loss to loss_sums[0 .. B/microbatch_size) (double, backend memory).
///
/// With c.tp set, `logits` and `dlogits` are vocabulary slice j of t (B·T × V/t, token ids from j·V/t):
/// the vocabulary-parallel cross-entropy of Megatron-LM (vocab_parallel_cross_entropy): the rows' maxima
/// (all-gathered), the sums of exponentials and the target logits (all-reduced, in fp64) are combined over
/// the TP group, so every slice adds the same loss and writes its slice of the gradient.
template <typename T>
void loss_forward_backward(ModelContext<T>& c, const ModelConfig& model, const T* logits, const int* targets,
                           int sequences, T scale, T* dlogits, double* loss_sums, int tp_index = 0);

}  // namespace trainsim::exec
