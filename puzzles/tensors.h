// The puzzles' five tensor types, with the original algebra (srush/LLM-Training-Puzzles lib.py):
// Weight and OptState shard and combine; WeightGrad shards, combines and adds over batches; Activation
// and ActivationGrad carry batch sets. Each is a typed view of the simulator's Tensor identity.
#pragma once

#include "sim/tensor.h"

namespace trainsim::puzzles {

/// Weights of one layer (possibly a shard of them). Needed complete for forward and backward.
struct Weight : Tensor {
  Weight() { kind = TensorKind::Weight; }
  explicit Weight(const Tensor& t) : Tensor(t) {}
  /// Union of the shards of two pieces of this layer's weight. Throws TensorError on a mismatch.
  Weight combine(const Weight& other) const { return Weight(trainsim::combine(*this, other)); }
  /// Shard `index` of `total`; needs the complete weight. Throws TensorError.
  Weight shard(int index, int total) const { return Weight(trainsim::shard(*this, index, total)); }
  bool is_complete() const { return complete(); }
};

/// Optimizer state (Adam's moments) of one layer, possibly sharded. Needed to update the weight.
struct OptState : Tensor {
  OptState() { kind = TensorKind::OptState; }
  explicit OptState(const Tensor& t) : Tensor(t) {}
  OptState combine(const OptState& other) const { return OptState(trainsim::combine(*this, other)); }
  OptState shard(int index, int total) const { return OptState(trainsim::shard(*this, index, total)); }
  bool is_complete() const { return complete(); }
};

/// Activation entering layer `layer` for a set of batches (layer 0 is the input, layer L the output).
struct Activation : Tensor {
  Activation() { kind = TensorKind::Activation; }
  explicit Activation(const Tensor& t) : Tensor(t) {}
};

/// Gradient of the loss with respect to Activation `layer`, for a set of batches.
struct ActivationGrad : Tensor {
  ActivationGrad() { kind = TensorKind::ActivationGrad; }
  explicit ActivationGrad(const Tensor& t) : Tensor(t) {}
};

/// Gradient of one layer's weight for a set of batches and a set of shards.
struct WeightGrad : Tensor {
  WeightGrad() { kind = TensorKind::WeightGrad; }
  explicit WeightGrad(const Tensor& t) : Tensor(t) {}
  WeightGrad combine(const WeightGrad& other) const { return WeightGrad(trainsim::combine(*this, other)); }
  WeightGrad shard(int index, int total) const { return WeightGrad(trainsim::shard(*this, index, total)); }
  bool is_complete() const { return complete(); }
};

// Adding weight grads (operator+) is declared in puzzles/model.h, with the line of the learner's code.

}  // namespace trainsim::puzzles
