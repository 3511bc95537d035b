// Puzzle 2 - Distributed Data Parallel: reference solution.
#include <tuple>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::reference {

Task ddp(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up: each rank trains on the batch with its own number.
  activations[0] = model.get_activation({model.rank()});

  for (int l = 0; l < L; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l);
  for (int l = 0; l < L; ++l) activations[l + 1] = model.forward(l, activations[l], weights[l]);
  grad_activations[L] = model.loss(activations[L]);
  activations.erase(L);
  for (int l = L - 1; l >= 0; --l) {
    std::tie(grad_weights[l], grad_activations[l]) =
        model.backward(l, activations[l], grad_activations[l + 1], weights[l]);
    grad_activations.erase(l + 1);
    activations.erase(l);
  }
  grad_activations.erase(0);

  // Sum every rank's grad, then every rank applies the same update.
  for (int l = 0; l < L; ++l) {
    grad_weights[l] = co_await model.allreduce(grad_weights[l], l);
    std::tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
    grad_weights.erase(l);
  }

  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
}

}  // namespace trainsim::puzzles::reference
