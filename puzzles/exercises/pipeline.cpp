// Puzzle 5 - Pipeline Parallelism: your solution.
//
// Targets: Timesteps <= 66, peak memory <= 3,300,000.
// Build and check it: cmake --build build --target trainsim && ./build/trainsim puzzles --exercises --only pipeline
// The timeline is written to out/exercises/pipeline.svg. The reference answer is in puzzles/reference/pipeline.cpp.
#include <tuple>
#include <vector>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::exercises {

Task pipeline(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up (given): rank r owns the contiguous block of layers [first, last].
  const int per_rank = L / model.ranks();
  const int first = model.rank() * per_rank, last = first + per_rank - 1;
  for (int l = first; l <= last; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l);

  // TODO: rank 0 starts from model.get_activation(all batches); every other rank receives its input with
  // co_await model.receive(). Run forward over your layers and co_await model.pass_to(rank + 1, ...) the
  // output; the last rank calls the loss. Then receive the grad, run backward, pass the input grad to
  // rank - 1, and update your layers.
  not_implemented();
  // END TODO

  for (int l = first; l <= last; ++l) model.set_final_weight(l, weights[l]);
  co_return;
}

}  // namespace trainsim::puzzles::exercises
