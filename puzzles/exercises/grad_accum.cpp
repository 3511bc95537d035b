// Puzzle 1 - Gradient Accumulation: your solution.
//
// Targets: Timesteps <= 17, peak memory <= 2,000,000.
// Build and check it: cmake --build build --target trainsim && ./build/trainsim puzzles --exercises --only grad_accum
// The timeline is written to out/exercises/grad_accum.svg. The reference answer is in puzzles/reference/grad_accum.cpp.
#include <tuple>
#include <vector>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::exercises {

Task grad_accum(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up (given): the full weights.
  for (int l = 0; l < L; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l);

  // TODO: for each batch b on its own (activations[{0, b}] = model.get_activation({b})), run forward, loss
  // and backward, summing the weight grads over batches (grad_weights[l] = grad_weights[l] + grad_weights[{l, b}]).
  // Then update every layer. Only one batch's activations should be held at a time.
  not_implemented();
  // END TODO

  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
  co_return;
}

}  // namespace trainsim::puzzles::exercises
