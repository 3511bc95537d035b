// Puzzle 4 - Fully-Sharded Data Parallel: your solution.
//
// Targets: Timesteps <= 20, peak memory <= 2,300,000.
// Build and check it: cmake --build build --target trainsim && ./build/trainsim puzzles --exercises --only fsdp
// The timeline is written to out/exercises/fsdp.svg. The reference answer is in puzzles/reference/fsdp.cpp.
#include <tuple>
#include <vector>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::exercises {

Task fsdp(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up (given): each rank's batch, and shard `rank` of every layer's weight and optimizer state.
  activations[0] = model.get_activation({model.rank()});
  for (int l = 0; l < L; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l, model.rank(), model.ranks());

  // TODO: as in wsdp, gather each layer's weight for forward and backward. After each backward, keep only
  // this rank's shard of the summed grad: grad_weights[l] = co_await model.scatterreduce(grad_weights[l], l).
  not_implemented();
  // END TODO

  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
  co_return;
}

}  // namespace trainsim::puzzles::exercises
