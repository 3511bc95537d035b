// Puzzle 7 - Pipeline + FSDP: your solution.
//
// Targets: Timesteps <= 15, peak memory <= 1,000,000.
// Build and check it: cmake --build build --target trainsim && ./build/trainsim puzzles --exercises --only pipeline_fsdp
// The timeline is written to out/exercises/pipeline_fsdp.svg. The reference answer is in puzzles/reference/pipeline_fsdp.cpp.
#include <tuple>
#include <vector>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::exercises {

Task pipeline_fsdp(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up (given): 16 ranks form 4 pipelines of 4 stages. Rank r is stage r % 4 of pipeline r / 4 (which
  // trains batch r / 4), owns layer(s) [first, last], and holds shard r of 16 of every layer.
  const int stages = 4;
  const int stage = model.rank() % stages;
  const int per_stage = L / stages;
  const int first = stage * per_stage, last = first + per_stage - 1;
  for (int l = 0; l < L; ++l)
    std::tie(weights[{l, 0}], opt_states[{l, 0}]) = model.load_weights(l, model.rank(), model.ranks());

  // TODO: combine pipeline and FSDP. Collectives span all 16 ranks, so every rank must join every layer's
  // all-gather and reduce-scatter, in the same order (an empty grad, model.fake_grad(l, {}), stands in for
  // a layer a rank does not own). Pass activations and grads between stages with pass_to / receive.
  // Store each updated weight in weights[l].
  not_implemented();
  // END TODO

  (void)first, (void)last, (void)stage;
  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
  co_return;
}

}  // namespace trainsim::puzzles::exercises
