// Tensor identity and the shard/batch algebra (DESIGN §1).
//
// A tensor is identified, not just sized: (kind, layer, version, batch set, shard set of n). The rules below
// are the LLM Training Puzzles' (srush/LLM-Training-Puzzles lib.py): weight grads add over disjoint batch sets
// of the same shards, all-gather unions shards, reduce-scatter sums batches then keeps one shard. Sizes in
// bytes are the cost model's business, not the tensor's.
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
/// Laid out in 40 bytes (the ints before the sets, 4-byte aligned); ordered by kind, layer, step, batches, shards, count.
struct Tensor {
  TensorKind kind = TensorKind::Weight;
  int layer = 0;
  int step = 0;
  int num_shards = 1;
  IdSet batches;
  IdSet shards{0};

  /// True when every shard 0..num_shards-1 is held.
  bool complete() const { return shards.size() == num_shards; }
  /// "W3[0/4]", "A2{0-3}", "dW1{0-3}[1/4]", "W0@1" (see docs/schedule-format.md).
  std::string str() const;

  friend bool operator==(const Tensor&, const Tensor&) = default;
  friend std::strong_ordering operator<=>(const Tensor& a, const Tensor& b) {
    if (auto c = std::tie(a.kind, a.layer, a.step) <=> std::tie(b.kind, b.layer, b.step); c != 0) return c;
    if (auto c = a.batches <=> b.batches; c != 0) return c;
    if (auto c = a.shards <=> b.shards; c != 0) return c;
    return a.num_shards <=> b.num_shards;
  }
};

/// Weight or optimizer state of `layer` holding `shards` of `num_shards`, at version `step`.
Tensor weight_tensor(int layer, IdSet shards = {0}, int num_shards = 1, int step = 0);
Tensor opt_state_tensor(int layer, IdSet shards = {0}, int num_shards = 1, int step = 0);
/// Activation entering `layer` for `batches`.
Tensor activation_tensor(int layer, IdSet batches);
/// Gradient of the loss w.r.t. activation `layer`, for `batches`.
Tensor activation_grad_tensor(int layer, IdSet batches);
/// Gradient of `layer`'s weight over `batches`, for `shards` of `num_shards`.
Tensor weight_grad_tensor(int layer, IdSet batches, IdSet shards = {0}, int num_shards = 1);

/// a + b for weight grads: same layer, same shards, disjoint batches; the batch sets unite.
/// Throws TensorError naming the mismatch.
Tensor sum(const Tensor& a, const Tensor& b);
/// Union of the shards of two pieces of one tensor (same kind, layer, step, batches, shard count).
/// Throws TensorError naming the mismatch.
Tensor combine(const Tensor& a, const Tensor& b);
/// Shard `index` of `count` of a complete tensor. Throws TensorError if incomplete or index out of range.
Tensor shard(const Tensor& t, int index, int count);

}  // namespace trainsim
