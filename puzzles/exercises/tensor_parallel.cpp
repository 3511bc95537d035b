// Puzzle 8 - Tensor Parallelism: your solution. (An addition: the original puzzles stop at Puzzle 7.)
//
// Megatron-LM (Shoeybi et al. 2019) splits each layer's matrices over a TP group: here the 4 ranks are one
// TP group, and rank r holds slice r of 4 of every layer's weight and optimizer state (a quarter of the
// memory). The ranks compute each layer together, so every rank runs every batch. What a slice computes:
// - forward of layer l gives a partial sum, activations "A{l+1}<+r/4>": this rank's term of the layer's
//   output. It must be summed over the TP group before anything reads it:
//       activations[l + 1] = co_await model.allreduce(activations[l + 1], l);
//   except at the last layer, whose forward gives this rank's vocabulary slice of the logits ("A4<r/4>"):
//   the loss reads that slice as it is, and gives the same slice of its grad.
// - backward of layer l gives this slice's weight grad and the input grad as a partial sum ("dA{l}<+r/4>"),
//   to all-reduce before the layer below reads it:
//       grad_activations[l] = co_await model.allreduce(grad_activations[l], l);
// - update of layer l updates this rank's slice.
// A forward, backward or loss that reads a partial sum is an error naming your line. Each all-reduce takes
// 0.3 however large it is; a forward or backward on a slice takes 1/4 of a step per batch.
//
// Targets (from the reference solution: its Timesteps rounded down, its peak rounded up to the next
// 100,000): Timesteps <= 11, peak memory <= 2,800,000.
// Build and check it: cmake --build build --target trainsim && ./build/trainsim puzzles --exercises --only tensor_parallel
// The timeline is written to out/exercises/tensor_parallel.svg. The reference answer is in
// puzzles/reference/tensor_parallel.cpp.
#include <numeric>
#include <tuple>
#include <vector>

#include "puzzles/catalog.h"

namespace trainsim::puzzles::exercises {

Task tensor_parallel(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();

  // Set-up (given): every batch on every rank, and slice tp_rank of tp of every layer's weight and
  // optimizer state.
  std::vector<int> every(model.batches());
  std::iota(every.begin(), every.end(), 0);
  activations[0] = model.get_activation(every);
  for (int l = 0; l < L; ++l) std::tie(weights[l], opt_states[l]) = model.load_slice(l, model.tp_rank(), model.tp());

  // TODO: forward, loss, backward and update with this rank's slices, all-reducing each partial sum before
  // it is read, and only those that are read. Free what is no longer needed.
  not_implemented();
  // END TODO

  for (int l = 0; l < L; ++l) model.set_final_weight(l, weights[l]);
  co_return;
}

}  // namespace trainsim::puzzles::exercises
