// The tensor algebra of ops (DESIGN §1), checked the same way for coroutine programs (the puzzles' Model)
// and for schedules: forward of layer l needs the complete weight of l and activation l; backward needs
// activation l, activation grad l+1 for the same batches and the complete weight; update needs the grad
// of every batch for the shards it updates; accumulate sums disjoint batch sets; load brings only fresh
// state (step-0 weights and optimizer state, model inputs, empty grads).
#pragma once

#include <string>

#include "sim/op.h"

namespace trainsim {

/// True for state that may come from outside the computation (a `load`): weights and optimizer state at
/// step 0, model inputs (activation 0) and empty weight grads.
bool is_loadable(const Tensor& t);

/// The weight an update of `weight` with optimizer state `opt_state` writes: the shards the optimizer state
/// covers, one step later. The weight must hold those shards: the same sharding and a superset, or the
/// complete weight (ZeRO-1/2 keep the full weight and shard the optimizer state). Throws TensorError.
Tensor updated_weight(const Tensor& weight, const Tensor& opt_state);

/// What is wrong with `op`'s reads and writes, or "" when they obey the algebra. `layers` and
/// `microbatches` are the model's. Send, recv and collectives are checked for arity only (their
/// semantics are the simulator's); broadcast and reduce also for their root: a broadcast's root reads its
/// tensor and writes nothing, the other members read nothing and write one; a reduce's members read one and
/// only the root writes (the sum).
std::string algebra_problem(const Op& op, int layers, int microbatches);

}  // namespace trainsim
