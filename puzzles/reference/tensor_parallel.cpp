// Puzzle 8 - Tensor Parallelism (an addition: not in the original puzzles): reference solution.
#include <numeric>
#include <tuple>
#include <vector>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::reference {

Task tensor_parallel(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up: the ranks of a TP group compute every layer together, so each trains on every batch; it holds
  // slice tp_rank of tp of every layer's weight and optimizer state.
  std::vector<int> every(model.batches());
  std::iota(every.begin(), every.end(), 0);
  activations[0] = model.get_activation(every);
  for (int l = 0; l < L; ++l) std::tie(weights[l], opt_states[l]) = model.load_slice(l, model.tp_rank(), model.tp());

  // Forward on all batches at once: one all-reduce per layer, whatever the batch count. A layer's output on
  // a slice is a partial sum, summed over the TP group before the next layer reads it. The last layer gives
  // this rank's vocabulary slice of the logits, which the loss reads as it is.
  for (int l = 0; l < L; ++l) {
    activations[l + 1] = model.forward(l, activations[l], weights[l]);
    if (l + 1 < L) activations[l + 1] = co_await model.allreduce(activations[l + 1], l);
  }
  grad_activations[L] = model.loss(activations[L]);
  activations.erase(L);

  // Backward: the input grad is a partial sum too, summed before the layer below reads it. Nothing reads
  // the model input's grad: it is dropped, not reduced. Each slice's weight grad already holds every batch.
  for (int l = L - 1; l >= 0; --l) {
    std::tie(grad_weights[l], grad_activations[l]) =
        model.backward(l, activations[l], grad_activations[l + 1], weights[l]);
    grad_activations.erase(l + 1);
    activations.erase(l);
    if (l > 0) grad_activations[l] = co_await model.allreduce(grad_activations[l], l);
  }
  grad_activations.erase(0);

  // Each rank updates its own slices: no weight grad crosses ranks.
  for (int l = 0; l < L; ++l) {
    std::tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
    grad_weights.erase(l);
  }

  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
}

}  // namespace trainsim::puzzles::reference
