// Puzzle 7 - Pipeline + FSDP: reference solution.
#include <tuple>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::reference {

Task pipeline_fsdp(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up: 16 ranks form 4 pipelines of 4 stages. Rank r is stage r % 4 of pipeline r / 4 (which trains
  // batch r / 4), owns layer(s) [first, last], and holds shard r of 16 of every layer.
  const int stages = 4;
  const int stage = model.rank() % stages;
  const int per_stage = L / stages;
  const int first = stage * per_stage, last = first + per_stage - 1;
  for (int l = 0; l < L; ++l)
    std::tie(weights[{l, 0}], opt_states[{l, 0}]) = model.load_weights(l, model.rank(), model.ranks());

  // Forward. Every rank joins every layer's all-gather (collectives span all 16 ranks); only the layer's
  // stage uses the gathered weight.
  for (int l = 0; l < L; ++l) {
    if (l == first) {
      if (stage == 0) activations[0] = model.get_activation({model.rank() / stages});
      else activations[l] = co_await model.receive();
    }
    weights[l] = co_await model.allgather(weights[{l, 0}], l);
    if (l >= first && l <= last) activations[l + 1] = model.forward(l, activations[l], weights[l]);
    weights.erase(l);
    if (l == last) {
      if (stage == stages - 1) {
        grad_activations[L] = model.loss(activations[L]);
      } else {
        co_await model.pass_to(model.rank() + 1, activations[l + 1]);
      }
      activations.erase(l + 1);
    }
  }

  // Backward. Every rank joins every reduce-scatter, with an empty grad for layers it does not own.
  for (int l = L - 1; l >= 0; --l) {
    if (l == last && stage != stages - 1) grad_activations[l + 1] = co_await model.receive();
    weights[l] = co_await model.allgather(weights[{l, 0}], l);
    if (l >= first && l <= last) {
      std::tie(grad_weights[l], grad_activations[l]) =
          model.backward(l, activations[l], grad_activations[l + 1], weights[l]);
      grad_activations.erase(l + 1);
      activations.erase(l);
    } else {
      grad_weights[l] = model.fake_grad(l, {});
    }
    weights.erase(l);
    grad_weights[l] = co_await model.scatterreduce(grad_weights[l], l);
    if (l == first) {
      if (stage != 0) co_await model.pass_to(model.rank() - 1, grad_activations[l]);
      grad_activations.erase(l);
    }
  }

  for (int l = 0; l < L; ++l) {
    std::tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[{l, 0}], opt_states[{l, 0}]);
    grad_weights.erase(l);
    weights.erase({l, 0});
    opt_states.erase({l, 0});
  }

  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
}

}  // namespace trainsim::puzzles::reference
