// Puzzle 5 - Pipeline Parallelism: reference solution.
#include <tuple>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::reference {

Task pipeline(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up: rank r owns the contiguous block of layers [first, last].
  const int per_rank = L / model.ranks();
  const int first = model.rank() * per_rank, last = first + per_rank - 1;
  const bool is_first = model.rank() == 0, is_last = model.rank() == model.ranks() - 1;
  for (int l = first; l <= last; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l);

  // Forward for every batch at once, then hand the output to the next stage.
  if (is_first) {
    std::vector<int> all;
    for (int b = 0; b < model.batches(); ++b) all.push_back(b);
    activations[0] = model.get_activation(all);
  } else {
    activations[first] = co_await model.receive();
  }
  for (int l = first; l <= last; ++l) activations[l + 1] = model.forward(l, activations[l], weights[l]);
  if (is_last) {
    grad_activations[L] = model.loss(activations[L]);
  } else {
    co_await model.pass_to(model.rank() + 1, activations[last + 1]);
    grad_activations[last + 1] = co_await model.receive();
  }
  activations.erase(last + 1);

  // Backward, then hand the input grad to the previous stage.
  for (int l = last; l >= first; --l) {
    std::tie(grad_weights[l], grad_activations[l]) =
        model.backward(l, activations[l], grad_activations[l + 1], weights[l]);
    grad_activations.erase(l + 1);
    activations.erase(l);
  }
  if (!is_first) co_await model.pass_to(model.rank() - 1, grad_activations[first]);
  grad_activations.erase(first);

  for (int l = first; l <= last; ++l) {
    std::tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
    grad_weights.erase(l);
  }

  for (int l = first; l <= last; ++l) model.set_final_weight(l, weights[l]);
}

}  // namespace trainsim::puzzles::reference
