// Puzzle 3 - Weight-Sharded Data Parallel: reference solution.
#include <tuple>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::reference {

Task wsdp(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up: each rank's batch, and shard `rank` of every layer's weight and optimizer state.
  activations[0] = model.get_activation({model.rank()});
  for (int l = 0; l < L; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l, model.rank(), model.ranks());

  // Forward: gather a layer's full weight only while it is used.
  for (int l = 0; l < L; ++l) {
    weights[{l, 0}] = co_await model.allgather(weights[l], l);
    activations[l + 1] = model.forward(l, activations[l], weights[{l, 0}]);
    weights.erase({l, 0});
  }
  grad_activations[L] = model.loss(activations[L]);
  activations.erase(L);

  // Backward: gather again.
  for (int l = L - 1; l >= 0; --l) {
    weights[{l, 0}] = co_await model.allgather(weights[l], l);
    std::tie(grad_weights[l], grad_activations[l]) =
        model.backward(l, activations[l], grad_activations[l + 1], weights[{l, 0}]);
    weights.erase({l, 0});
    grad_activations.erase(l + 1);
    activations.erase(l);
  }
  grad_activations.erase(0);

  // Full grads by all-reduce; each rank updates its own shard.
  for (int l = 0; l < L; ++l) {
    grad_weights[l] = co_await model.allreduce(grad_weights[l], l);
    std::tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
    grad_weights.erase(l);
  }

  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
}

}  // namespace trainsim::puzzles::reference
