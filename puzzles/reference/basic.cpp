// Puzzle 0 - Standard Training: reference solution.
#include <tuple>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::reference {

Task basic(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up: the full weights, and the input for every batch.
  for (int l = 0; l < L; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l);
  std::vector<int> all;
  for (int b = 0; b < model.batches(); ++b) all.push_back(b);
  activations[0] = model.get_activation(all);

  // The optimizer state is not needed until the update: drop the freshly loaded state now and create it
  // again just before the update (as torch.optim creates Adam's state lazily at the first step). Holding it
  // through the loss would peak at 2,621,440, over the 2,600,000 target.
  for (int l = 0; l < L; ++l) opt_states.erase(l);

  // Forward over every batch at once.
  for (int l = 0; l < L; ++l) activations[l + 1] = model.forward(l, activations[l], weights[l]);
  grad_activations[L] = model.loss(activations[L]);
  activations.erase(L);

  // Backward, dropping each activation and activation grad as soon as it has been used.
  for (int l = L - 1; l >= 0; --l) {
    std::tie(grad_weights[l], grad_activations[l]) =
        model.backward(l, activations[l], grad_activations[l + 1], weights[l]);
    grad_activations.erase(l + 1);
    activations.erase(l);
  }
  grad_activations.erase(0);

  for (int l = 0; l < L; ++l) {
    opt_states[l] = model.load_weights(l).second;
    std::tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
    grad_weights.erase(l);
  }

  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
  co_return;
}

}  // namespace trainsim::puzzles::reference
