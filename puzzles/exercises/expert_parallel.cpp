// Puzzle 9 - Expert Parallelism: your solution. (An addition: the original puzzles stop at Puzzle 7.)
//
// Every layer is a Mixture-of-Experts layer (GShard, Lepikhin et al. 2020; Megatron-Core MoE): attention and a
// router, then experts. The 4 ranks are one EP group: rank r trains its own batch r with the whole of every
// layer's attention and router (weights[l]), and holds slice r of 4 of every layer's experts (weights[{l, 1}]).
// A token's experts may sit on any rank, so each layer's tokens travel:
// - forward of layer l with weights[l] gives the routed tokens, "A{l+1}{r}<routed>": the router chose their
//   experts, which have not run. An all-to-all over the EP group sends each token to its experts' rank
//   (the dispatch), and this rank gets the tokens of every rank's batch for its slice, "A{l+1}{0-3}<er/4>":
//       activations[{l + 1, 1}] = co_await model.alltoall(activations[l + 1], l);
//   forward of layer l with weights[{l, 1}] runs this rank's experts on them ("A{l+1}{0-3}<er/4:out>"), and a
//   second all-to-all (the combine) brings each rank its own tokens back, the layer's output "A{l+1}{r}":
//       activations[l + 1] = co_await model.alltoall(activations[{l + 1, 2}], l);
// - backward is the conjugate: the grad of the layer's output is dispatched, the experts' backward (with
//   weights[{l, 1}], on the tokens they ran on) gives their weight grad and their tokens' grad, which is
//   combined into "dA{l+1}{r}<routed>", which the layer's own backward (with weights[l]) reads.
// - the attention and router grads hold this rank's batch only: all-reduce them; an expert slice's grad holds
//   every rank's batch already. Update both, and record both (set_final_weight, set_final_experts).
// Reading routed tokens anywhere but an all-to-all is an error naming your line and the all-to-all to add.
// Each all-to-all takes 0.3; the experts take 1/4 of a step per batch (each rank computes a quarter of the
// tokens).
//
// Targets (from the reference solution: its Timesteps rounded down, its peak rounded up to the next
// 100,000): Timesteps <= 25, peak memory <= 4,100,000.
// Build and check it: cmake --build build --target trainsim && ./build/trainsim puzzles --exercises --only expert_parallel
// The timeline is written to out/exercises/expert_parallel.svg. The reference answer is in
// puzzles/reference/expert_parallel.cpp.
#include <tuple>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::exercises {

Task expert_parallel(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up (given): this rank's batch, every layer's attention and router, and this rank's slice of its experts.
  activations[0] = model.get_activation({model.rank()});
  for (int l = 0; l < L; ++l) {
    std::tie(weights[l], opt_states[l]) = model.load_weights(l);
    std::tie(weights[{l, 1}], opt_states[{l, 1}]) = model.load_experts(l, model.ep_rank(), model.ep());
  }

  // TODO: forward through every layer (dispatch, experts, combine), the loss, backward through every layer
  // (dispatch the grad, the experts' backward, combine, the layer's backward, all-reduce its weight grad), then
  // update weights[l] and weights[{l, 1}] of every layer. Free what is no longer needed (erase) to meet the
  // memory target.
  not_implemented();
  // END TODO

  for (int l = 0; l < L; ++l) {
    model.set_final_weight(l, weights[l]);
    model.set_final_experts(l, weights[{l, 1}]);
  }
  co_return;
}

}  // namespace trainsim::puzzles::exercises
