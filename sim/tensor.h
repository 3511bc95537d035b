// Tensor identity and the shard/batch algebra (DESIGN §1).
//
// A tensor is identified, not just sized: (kind, layer, version, batch set, shard set of n, and with tensor
// parallelism a TP slice). The rules below are the LLM Training Puzzles' (srush/LLM-Training-Puzzles lib.py):
// weight grads add over disjoint batch sets of the same shards, all-gather unions shards, reduce-scatter sums
// batches then keeps one shard. Tensor parallelism (Shoeybi et al. 2019, Megatron-LM) adds the TP slice and the
// partial-sum state, here and nowhere else (docs/design.md, "Tensor parallelism"). Sizes in bytes are the cost
// model's business, not the tensor's.
#pragma once

#include <compare>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>

#include "sim/idset.h"

namespace trainsim {

/// The five kinds of state a rank holds (the puzzles' five stores).
enum class TensorKind : std::uint8_t { Weight, OptState, Activation, ActivationGrad, WeightGrad };

/// Short name used in text and errors: W, O, A, dA, dW.
const char* short_name(TensorKind k);
/// Long name: "weight", "optimizer state", "activation", "activation grad", "weight grad".
const char* long_name(TensorKind k);

/// What a Mixture-of-Experts layer has done to an activation or activation grad (Lepikhin et al. 2020, GShard;
/// Megatron-Core MoE): the states between a layer's router and the combine of its experts' outputs
/// (docs/design.md, "Mixture of Experts").
enum class Route : std::uint8_t {
  None,       ///< an ordinary tensor
  Routed,     ///< tokens whose experts are chosen but have not run: only a dispatch all-to-all may read it
  ExpertIn,   ///< the tokens one expert slice received from its EP group (written by the dispatch all-to-all)
  ExpertOut,  ///< what one expert slice gives back (read by the combine all-to-all)
};

/// Raised when the algebra is misused (adding grads of different layers, sharding an incomplete tensor...).
struct TensorError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Identity of one tensor.
///
/// - Weight, OptState: layer l, `step` = number of optimizer updates applied, a shard set of `num_shards`.
/// - Activation: the input of layer `layer` (layer 0 = the model input, layer L = the model output) for a
///   batch set.
/// - ActivationGrad: the gradient of the loss with respect to Activation `layer` (loss gives layer L,
///   backward of layer l turns layer l+1 into layer l). The original library numbers it one lower; this
///   numbering matches the store keys the puzzles use.
/// - WeightGrad: gradient of layer l's weight summed over a batch set, for a shard set.
/// Unsharded tensors have shards {0} of 1.
///
/// Tensor parallelism (TP degree t = `tp_size`, at most kMaxTpSize; t = 1 without TP):
/// - A TP slice j of t ("W3<1/4>"): weight, optimizer state and weight grad of a layer whose matrices are
///   split over a TP group (Wqkv, Wgate, Wup by columns, Wo, Wdown by rows, embedding and LM head by
///   vocabulary); also the last activation (the logits, split by vocabulary) and its grad. Slices are
///   different parameters: never combined, summed or compared with each other. A slice is orthogonal to the
///   FSDP shards: "W3<1/4>[0/8]" is FSDP shard 0 of 8 of TP slice 1 of 4.
/// - A partial sum ("A4{0}<+1/4>", `partial`): an activation or activation grad that row-parallel matrices
///   left as one term of a sum over the TP group; `tp_slices` holds the slices summed so far. Nothing may
///   read it as complete: an all-reduce (or, with sequence parallelism, a reduce-scatter) over the TP group
///   sums the terms, and the sum of every slice is the plain tensor (tp_size 1).
/// `tp_slices` is a bit set of slices (bit j = slice j): one bit for a slice, one or more for a partial sum.
///
/// Mixture of Experts, expert parallelism over an EP group of e = `ep_size` ranks (`ep_size` 0: not an expert
/// tensor; docs/design.md, "Mixture of Experts"):
/// - An expert slice j of e ("W3<e1/4>"): the weight, optimizer state or weight grad of the experts of layer l
///   that EP rank j holds (experts j·E/e .. (j+1)·E/e − 1 of E). The layer's other parameters (attention, norms,
///   router) are its plain weight "W3". Slices are different parameters, like TP slices; orthogonal to shards.
/// - Token states (`route`): the dense part of an MoE layer l writes A(l+1) `Routed` ("A4{0}<routed>"); the
///   dispatch all-to-all turns the routed tokens of every member's batches into the tokens of expert slice j
///   (`ExpertIn`, "A4{0-3}<e1/4>"); the experts write `ExpertOut` ("A4{0-3}<e1/4:out>"); the combine all-to-all
///   gives each member its own batches back, complete. Backward, the conjugate: dA(l+1) is dispatched, the
///   experts' backward writes dA(l+1) `ExpertOut`, and the combine gives dA(l+1) `Routed`, which the dense
///   backward reads. Nothing else reads a routed or expert token state.
///
/// Laid out in 56 bytes; ordered by kind, layer, step, batches, shards, count, then the TP and EP fields.
struct Tensor {
  /// Largest TP degree (slices are bits of a 64-bit set; published runs use t <= 8, NVL72 racks <= 64).
  static constexpr int kMaxTpSize = 64;
  /// Largest EP degree (DeepSeek-V3 trained with EP 64; one expert per rank of 256 routed experts is EP 256).
  static constexpr int kMaxEpSize = 4096;

  TensorKind kind = TensorKind::Weight;
  bool partial = false;        ///< a partial sum over the TP slices in `tp_slices` (activations and their grads)
  std::uint16_t tp_size = 1;   ///< TP degree t of the slicing; 1 without tensor parallelism
  Route route = Route::None;   ///< an MoE token state (activations and their grads)
  std::uint16_t ep_size = 0;   ///< EP degree e of an expert slice; 0 for a tensor that is not an expert's
  std::uint16_t ep_index = 0;  ///< the expert slice j of e (0 when ep_size is 0)
  int layer = 0;
  int step = 0;
  int num_shards = 1;
  std::uint64_t tp_slices = 1; ///< the TP slices held (a slice) or summed (a partial sum); bit 0 when t = 1
  IdSet batches;
  IdSet shards{0};

  /// True when every shard 0..num_shards-1 is held.
  bool complete() const { return shards.size() == num_shards; }
  /// True for a TP slice j of t > 1 (not a partial sum).
  bool tp_sliced() const { return tp_size > 1 && !partial; }
  /// True for an expert slice (weights, optimizer state, grads) or the tokens of one (ExpertIn, ExpertOut).
  bool expert() const { return ep_size > 0; }
  /// The fraction of the whole tensor's elements held: shards held / shards, 1/t for a TP slice (a partial sum
  /// is as large as the whole), and 1/e for an expert slice (its experts, or with balanced routing its tokens).
  /// Unitless; the cost models multiply their sizes by it.
  double held_fraction() const {
    return static_cast<double>(shards.size()) / num_shards / (tp_sliced() ? tp_size : 1) / (expert() ? ep_size : 1);
  }
  /// The slice index of a TP slice (the lowest slice of a partial sum); 0 without TP.
  int tp_index() const;
  /// "W3[0/4]", "A2{0-3}", "dW1{0-3}[1/4]", "W0@1", "W3<1/4>", "A4{0}<+1/4>", "W3<e1/4>", "A4{0}<routed>",
  /// "A4{0-3}<e1/4:out>" (see docs/schedule-format.md).
  std::string str() const;

  friend bool operator==(const Tensor&, const Tensor&) = default;
  friend std::strong_ordering operator<=>(const Tensor& a, const Tensor& b) {
    if (auto c = std::tie(a.kind, a.layer, a.step) <=> std::tie(b.kind, b.layer, b.step); c != 0) return c;
    if (auto c = a.batches <=> b.batches; c != 0) return c;
    if (auto c = a.shards <=> b.shards; c != 0) return c;
    return std::tie(a.num_shards, a.tp_size, a.partial, a.tp_slices, a.route, a.ep_size, a.ep_index) <=>
           std::tie(b.num_shards, b.tp_size, b.partial, b.tp_slices, b.route, b.ep_size, b.ep_index);
  }
};

static_assert(sizeof(Tensor) == 56, "a tensor packs into 56 bytes (the simulator copies tens of millions)");

/// Weight or optimizer state of `layer` holding `shards` of `num_shards`, at version `step`.
Tensor weight_tensor(int layer, IdSet shards = {0}, int num_shards = 1, int step = 0);
Tensor opt_state_tensor(int layer, IdSet shards = {0}, int num_shards = 1, int step = 0);
/// Activation entering `layer` for `batches`.
Tensor activation_tensor(int layer, IdSet batches);
/// Gradient of the loss w.r.t. activation `layer`, for `batches`.
Tensor activation_grad_tensor(int layer, IdSet batches);
/// Gradient of `layer`'s weight over `batches`, for `shards` of `num_shards`.
Tensor weight_grad_tensor(int layer, IdSet batches, IdSet shards = {0}, int num_shards = 1);

/// TP slice `index` of `count` of `t` (which must not be TP-sliced already): the same tensor with
/// tp_size = count and the one slice. Throws TensorError when count is outside 1..kMaxTpSize or index outside
/// 0..count-1.
Tensor tp_slice(Tensor t, int index, int count);
/// The partial sum of TP slice `index` of `count` of `t` (an activation or activation grad, not TP-sliced):
/// what a row-parallel matrix gives before its all-reduce. Throws TensorError as tp_slice does.
Tensor tp_partial(Tensor t, int index, int count);
/// Expert slice `index` of `count` of `t` (a weight, optimizer state or weight grad that is not an expert slice
/// yet). Throws TensorError when count is outside 1..kMaxEpSize, index outside 0..count-1, or t is an
/// activation, an activation grad or an expert slice already.
Tensor expert_slice(Tensor t, int index, int count);
/// `t` (an activation or activation grad, not an expert's) in token state `r`; for ExpertIn and ExpertOut also
/// expert slice `index` of `count`. Throws TensorError as expert_slice does.
Tensor routed_as(Tensor t, Route r, int index = 0, int count = 0);
/// " (routed)", " (expert slice 1 of 4's tokens)": words for errors about a token state; "" for Route::None.
std::string route_words(const Tensor& t);

/// The bit set of every slice 0..count-1 of a TP degree `count`.
std::uint64_t all_tp_slices(int count);

/// a + b, the sum an all-reduce or reduce-scatter makes:
/// - weight grads: same layer, same shards, same TP slice, disjoint batches; the batch sets unite;
/// - partial sums (Megatron's TP all-reduce): same tensor, disjoint TP slices; the slices unite, and the sum
///   of every slice is the plain tensor (tp_size 1, not partial).
/// Expert slices add only to the same expert slice (an expert-data-parallel all-reduce).
/// Throws TensorError naming the mismatch.
Tensor sum(const Tensor& a, const Tensor& b);
/// Union of the shards of two pieces of one tensor (same kind, layer, step, batches, shard count, TP slice).
/// Throws TensorError naming the mismatch.
Tensor combine(const Tensor& a, const Tensor& b);
/// Shard `index` of `count` of a complete tensor. Throws TensorError if incomplete or index out of range.
Tensor shard(const Tensor& t, int index, int count);

}  // namespace trainsim
