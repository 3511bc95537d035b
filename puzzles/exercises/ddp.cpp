// Puzzle 2 - Distributed Data Parallel: your solution.
//
// Targets: Timesteps <= 5, peak memory <= 1,800,000.
// Build and check it: cmake --build build --target trainsim && ./build/trainsim puzzles --exercises --only ddp
// The timeline is written to out/exercises/ddp.svg. The reference answer is in puzzles/reference/ddp.cpp.
#include <tuple>
#include <vector>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::exercises {

Task ddp(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up (given): each rank trains on the batch with its own number.
  activations[0] = model.get_activation({model.rank()});

  // TODO: load the full weights, run forward, loss and backward on this rank's batch, then for each layer
  // sum the grads of all ranks (grad_weights[l] = co_await model.allreduce(grad_weights[l], l)) and update.
  not_implemented();
  // END TODO

  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
  co_return;
}

}  // namespace trainsim::puzzles::exercises
