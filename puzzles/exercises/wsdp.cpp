// Puzzle 3 - Weight-Sharded Data Parallel: your solution.
//
// Targets: Timesteps <= 20, peak memory <= 2,800,000.
// Build and check it: cmake --build build --target trainsim && ./build/trainsim puzzles --exercises --only wsdp
// The timeline is written to out/exercises/wsdp.svg. The reference answer is in puzzles/reference/wsdp.cpp.
#include <tuple>
#include <vector>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::exercises {

Task wsdp(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up (given): each rank's batch, and shard `rank` of every layer's weight and optimizer state.
  activations[0] = model.get_activation({model.rank()});
  for (int l = 0; l < L; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l, model.rank(), model.ranks());

  // TODO: forward and backward need a layer's complete weight: gather it just before use
  // (weights[{l, 0}] = co_await model.allgather(weights[l], l)) and erase it right after. Sum the grads with
  // model.allreduce and update this rank's shard.
  not_implemented();
  // END TODO

  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
  co_return;
}

}  // namespace trainsim::puzzles::exercises
