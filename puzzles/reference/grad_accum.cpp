// Puzzle 1 - Gradient Accumulation: reference solution.
#include <tuple>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::reference {

Task grad_accum(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  for (int l = 0; l < L; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l);

  // One batch at a time: only one batch's activations are ever held.
  for (int b = 0; b < model.batches(); ++b) {
    activations[{0, b}] = model.get_activation({b});
    for (int l = 0; l < L; ++l) activations[{l + 1, b}] = model.forward(l, activations[{l, b}], weights[l]);
    grad_activations[{L, b}] = model.loss(activations[{L, b}]);
    activations.erase({L, b});
    for (int l = L - 1; l >= 0; --l) {
      std::tie(grad_weights[{l, b}], grad_activations[{l, b}]) =
          model.backward(l, activations[{l, b}], grad_activations[{l + 1, b}], weights[l]);
      // Accumulate this batch's grad into the running sum.
      if (b == 0) grad_weights[l] = grad_weights[{l, b}];
      else grad_weights[l] = grad_weights[l] + grad_weights[{l, b}];
      grad_weights.erase({l, b});
      grad_activations.erase({l + 1, b});
      activations.erase({l, b});
    }
    grad_activations.erase({0, b});
  }

  for (int l = 0; l < L; ++l) {
    std::tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
    grad_weights.erase(l);
  }

  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
  co_return;
}

}  // namespace trainsim::puzzles::reference
