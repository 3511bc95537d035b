// Puzzle 6 - GPipe Schedule: reference solution.
#include <tuple>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::reference {

Task gpipe(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up: rank r owns the contiguous block of layers [first, last].
  const int per_rank = L / model.ranks();
  const int first = model.rank() * per_rank, last = first + per_rank - 1;
  const bool is_first = model.rank() == 0, is_last = model.rank() == model.ranks() - 1;
  for (int l = first; l <= last; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l);

  // Forward one microbatch at a time, so the next stage can start on it at once.
  for (int mb = 0; mb < model.batches(); ++mb) {
    if (is_first) activations[{0, mb}] = model.get_activation({mb});
    else activations[{first, mb}] = co_await model.receive();
    for (int l = first; l <= last; ++l) activations[{l + 1, mb}] = model.forward(l, activations[{l, mb}], weights[l]);
    if (!is_last) {
      co_await model.pass_to(model.rank() + 1, activations[{last + 1, mb}]);
      activations.erase({last + 1, mb});
    }
  }

  // Backward one microbatch at a time, accumulating each layer's grad as it comes.
  for (int mb = 0; mb < model.batches(); ++mb) {
    if (is_last) {
      grad_activations[{L, mb}] = model.loss(activations[{L, mb}]);
      activations.erase({L, mb});
    } else {
      grad_activations[{last + 1, mb}] = co_await model.receive();
    }
    for (int l = last; l >= first; --l) {
      std::tie(grad_weights[{l, mb}], grad_activations[{l, mb}]) =
          model.backward(l, activations[{l, mb}], grad_activations[{l + 1, mb}], weights[l]);
      if (mb == 0) grad_weights[l] = grad_weights[{l, mb}];
      else grad_weights[l] = grad_weights[l] + grad_weights[{l, mb}];
      grad_weights.erase({l, mb});
      grad_activations.erase({l + 1, mb});
      activations.erase({l, mb});
    }
    if (!is_first) co_await model.pass_to(model.rank() - 1, grad_activations[{first, mb}]);
    grad_activations.erase({first, mb});
  }

  for (int l = first; l <= last; ++l) {
    std::tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
    grad_weights.erase(l);
  }

  for (int l = first; l <= last; ++l) model.set_final_weight(l, weights[l]);
}

}  // namespace trainsim::puzzles::reference
