// Puzzle 0 - Standard Training: your solution.
//
// Targets: Timesteps <= 17, peak memory <= 2,600,000.
// Build and check it: cmake --build build --target trainsim && ./build/trainsim puzzles --exercises --only basic
// The timeline is written to out/exercises/basic.svg. The reference answer is in puzzles/reference/basic.cpp.
#include <tuple>
#include <vector>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::exercises {

Task basic(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up (given): the full weights, and the input for every batch.
  for (int l = 0; l < L; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l);
  std::vector<int> all;
  for (int b = 0; b < model.batches(); ++b) all.push_back(b);
  activations[0] = model.get_activation(all);

  // TODO: run forward over every layer, the loss, backward over every layer, and update every layer.
  //   activations[l + 1] = model.forward(l, activations[l], weights[l]);
  //   grad_activations[L] = model.loss(activations[L]);
  //   std::tie(grad_weights[l], grad_activations[l]) = model.backward(l, activations[l], grad_activations[l + 1], weights[l]);
  //   std::tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
  // Everything held in a store counts as memory: erase what you no longer need (activations.erase(l)).
  not_implemented();
  // END TODO

  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
  co_return;
}

}  // namespace trainsim::puzzles::exercises
