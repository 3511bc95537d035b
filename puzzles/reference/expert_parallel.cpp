// Puzzle 9 - Expert Parallelism (an addition: not in the original puzzles): reference solution.
//
// Every layer is a Mixture-of-Experts layer (GShard; Megatron-Core MoE): attention and a router, then experts,
// of which each rank holds one slice. The key {l, 1} holds the tokens a dispatch gave this rank's experts (kept
// for their backward) and {l, 2} what the experts give back, until the combine.
#include <tuple>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::reference {

Task expert_parallel(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up: each rank trains its own batch with the whole of every layer's attention and router (weights[l]) and
  // its slice of every layer's experts (weights[{l, 1}]).
  activations[0] = model.get_activation({model.rank()});
  for (int l = 0; l < L; ++l) {
    std::tie(weights[l], opt_states[l]) = model.load_weights(l);
    std::tie(weights[{l, 1}], opt_states[{l, 1}]) = model.load_experts(l, model.ep_rank(), model.ep());
  }

  // Forward: the router's output goes to the experts' ranks (dispatch), this rank's experts run on every rank's
  // tokens for its slice, and their output comes back (combine) as the layer's output.
  for (int l = 0; l < L; ++l) {
    activations[l + 1] = model.forward(l, activations[l], weights[l]);
    activations[{l + 1, 1}] = co_await model.alltoall(activations[l + 1], l);
    activations.erase(l + 1);
    activations[{l + 1, 2}] = model.forward(l, activations[{l + 1, 1}], weights[{l, 1}]);
    activations[l + 1] = co_await model.alltoall(activations[{l + 1, 2}], l);
    activations.erase({l + 1, 2});
  }
  grad_activations[L] = model.loss(activations[L]);
  activations.erase(L);

  // Backward, the conjugate: the output's grad to the experts' ranks, the experts' backward, their input grad back
  // (routed), then the layer's own backward. Attention and router grads are all-reduced over every rank; each
  // expert slice's grad already holds every rank's batches.
  for (int l = L - 1; l >= 0; --l) {
    grad_activations[{l + 1, 1}] = co_await model.alltoall(grad_activations[l + 1], l);
    grad_activations.erase(l + 1);
    std::tie(grad_weights[{l, 1}], grad_activations[{l + 1, 2}]) =
        model.backward(l, activations[{l + 1, 1}], grad_activations[{l + 1, 1}], weights[{l, 1}]);
    activations.erase({l + 1, 1});
    grad_activations.erase({l + 1, 1});
    grad_activations[l + 1] = co_await model.alltoall(grad_activations[{l + 1, 2}], l);
    grad_activations.erase({l + 1, 2});
    std::tie(grad_weights[l], grad_activations[l]) =
        model.backward(l, activations[l], grad_activations[l + 1], weights[l]);
    grad_activations.erase(l + 1);
    activations.erase(l);
    grad_weights[l] = co_await model.allreduce(grad_weights[l], l);
  }
  grad_activations.erase(0);

  for (int l = 0; l < L; ++l) {
    std::tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
    grad_weights.erase(l);
    std::tie(weights[{l, 1}], opt_states[{l, 1}]) =
        model.update(l, grad_weights[{l, 1}], weights[{l, 1}], opt_states[{l, 1}]);
    grad_weights.erase({l, 1});
  }

  for (int l = 0; l < L; ++l) {
    model.set_final_weight(l, weights[l]);
    model.set_final_experts(l, weights[{l, 1}]);
  }
}

}  // namespace trainsim::puzzles::reference
