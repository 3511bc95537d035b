// Shared helpers for simulator tests: run small hand-written rank programs.
#pragma once

#include <functional>
#include <vector>

#include "sim/rank.h"

namespace trainsim::testing {

/// A test rank program. Captureless lambdas only: the coroutine frame must not refer to the lambda object.
using TestProgram = Task (*)(Rank);

/// Runs `program` on `n` ranks with the puzzle cost model; returns the trace. Errors propagate.
inline Trace run_world(int n, TestProgram program, WorldOptions opts = {}) {
  static const PuzzleCostModel cost;
  opts.world_size = n;
  World world(opts, cost);
  for (int r = 0; r < n; ++r) world.spawn(r, program(Rank(world, r)));
  world.run();
  return world.trace();
}

/// Op of kind `kind` on a rank, with a batch set, for Rank::execute.
inline Op compute_op(OpKind kind, int layer, IdSet batches = {}) {
  Op op;
  op.kind = kind;
  op.layer = layer;
  op.batches = std::move(batches);
  return op;
}

// Tensor makers without braced lists: g++ 12 rejects a braced list (or a string literal) inside a
// full-expression that contains co_await ("array used as initializer").
inline Tensor act(int layer, int batch) { return activation_tensor(layer, IdSet::range(batch, batch + 1)); }
inline Tensor wgrad(int layer, int batch) { return weight_grad_tensor(layer, IdSet::range(batch, batch + 1)); }
inline Tensor wshard(int layer, int shard, int of) { return weight_tensor(layer, IdSet::range(shard, shard + 1), of); }

}  // namespace trainsim::testing
