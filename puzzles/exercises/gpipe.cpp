// Puzzle 6 - GPipe Schedule: your solution.
//
// Targets: Timesteps <= 33, peak memory <= 4,100,000.
// Build and check it: cmake --build build --target trainsim && ./build/trainsim puzzles --exercises --only gpipe
// The timeline is written to out/exercises/gpipe.svg. The reference answer is in puzzles/reference/gpipe.cpp.
#include <tuple>
#include <vector>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::exercises {

Task gpipe(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up (given): rank r owns the contiguous block of layers [first, last].
  const int per_rank = L / model.ranks();
  const int first = model.rank() * per_rank, last = first + per_rank - 1;
  for (int l = first; l <= last; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l);

  // TODO: as in pipeline, but one microbatch at a time (activations[{l, mb}]), passing each as soon as it
  // is done so the stages overlap. Sum each layer's grads over microbatches, then update.
  not_implemented();
  // END TODO

  for (int l = first; l <= last; ++l) model.set_final_weight(l, weights[l]);
  co_return;
}

}  // namespace trainsim::puzzles::exercises
