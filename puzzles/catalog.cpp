#include "puzzles/catalog.h"

namespace trainsim::puzzles {

const std::vector<Puzzle>& catalog() {
  static const std::vector<Puzzle> all = {
      {"basic", "Puzzle 0 - Standard Training",
       "Train on every batch at once on one rank: forward, loss, backward, update, freeing what is no longer needed.",
       1, 2, 4, 17, 2'600'000, reference::basic, exercises::basic, "puzzles/exercises/basic.cpp"},
      {"grad_accum", "Puzzle 1 - Gradient Accumulation",
       "Run one batch at a time and sum the weight grads before the update, to cut peak memory.", 1, 2, 4, 17,
       2'000'000, reference::grad_accum, exercises::grad_accum, "puzzles/exercises/grad_accum.cpp"},
      {"ddp", "Puzzle 2 - Distributed Data Parallel",
       "Each rank trains on its own batch with the full weights; all-reduce the weight grads, then update.", 4, 2, 4,
       5, 1'800'000, reference::ddp, exercises::ddp, "puzzles/exercises/ddp.cpp"},
      {"wsdp", "Puzzle 3 - Weight-Sharded Data Parallel",
       "Each rank holds a shard of every weight: all-gather a layer's weight to use it, all-reduce the grads.", 4, 6,
       4, 20, 2'800'000, reference::wsdp, exercises::wsdp, "puzzles/exercises/wsdp.cpp"},
      {"fsdp", "Puzzle 4 - Fully-Sharded Data Parallel",
       "As weight-sharded data parallel, but reduce-scatter the grads so each rank keeps only its shard.", 4, 6, 4,
       20, 2'300'000, reference::fsdp, exercises::fsdp, "puzzles/exercises/fsdp.cpp"},
      {"pipeline", "Puzzle 5 - Pipeline Parallelism",
       "Each rank owns a contiguous block of layers; pass all batches' activations forward and grads back.", 4, 8,
       4, 66, 3'300'000, reference::pipeline, exercises::pipeline, "puzzles/exercises/pipeline.cpp"},
      {"gpipe", "Puzzle 6 - GPipe Schedule",
       "Pipeline one batch at a time so stages overlap and the bubble shrinks.", 4, 8, 4, 33, 4'100'000,
       reference::gpipe, exercises::gpipe, "puzzles/exercises/gpipe.cpp"},
      {"pipeline_fsdp", "Puzzle 7 - Pipeline + FSDP",
       "16 ranks: stage rank % 4 of a 4-stage pipeline, with every layer's weight sharded over all 16 ranks.", 16, 4,
       4, 15, 1'000'000, reference::pipeline_fsdp, exercises::pipeline_fsdp, "puzzles/exercises/pipeline_fsdp.cpp"},
      // Not in the original: its targets are the reference solution's, the Timesteps rounded down and the peak
      // rounded up to the next 100,000.
      {"tensor_parallel", "Puzzle 8 - Tensor Parallelism",
       "Each rank holds one TP slice of every layer and runs every batch; all-reduce each layer's partial sums "
       "(output forward, input grad backward) before the next layer reads them.",
       4, 4, 4, 11, 2'800'000, reference::tensor_parallel, exercises::tensor_parallel,
       "puzzles/exercises/tensor_parallel.cpp", 4},
      {"expert_parallel", "Puzzle 9 - Expert Parallelism",
       "Every layer is a Mixture of Experts; each rank trains its own batch and holds one slice of every layer's "
       "experts. Dispatch the routed tokens to the experts' ranks with an all-to-all, run this rank's experts, and "
       "combine their output with a second (in the backward, the conjugate two) before the next layer reads it.",
       4, 4, 4, 25, 4'100'000, reference::expert_parallel, exercises::expert_parallel, "puzzles/exercises/expert_parallel.cpp",
       1, 4},
  };
  return all;
}

const Puzzle* find_puzzle(std::string_view name) {
  for (const auto& p : catalog())
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace trainsim::puzzles
