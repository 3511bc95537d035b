// FLOPs and bytes of each compute op of a schedule on a hardware setting, and the seconds they take.
//
// Schedule layer i of L holds the contiguous blocks [i·B/L, (i+1)·B/L) of the model's B blocks; layer 0 also
// holds the embedding, layer L-1 the final norm and the LM head; the loss op is the cross-entropy on the
// logits. This is the executor's mapping (docs/executor.md), which needs B to be a multiple of L; here any
// B >= L is accepted (the floor division spreads the remainder).
//
// Per block and token, forward (h hidden, f MLP width, kv the K/V width, s the sequence length):
// - matrix multiplies: 2 FLOPs per weight: 2·(h·(h + 2kv) + h² + 3hf) (2hf for a GeLU MLP);
// - attention core: QK^T and attention·V, 2·s·h each, 4·s·h (causal masking not halved, as Megatron-LM,
//   llm.c and torchtitan count);
// - memory-bound (bytes, e = activation bytes): two norms 4·h·e, two residual adds 6·h·e, rotary embedding of
//   Q and K 2·(h + kv)·e (not with learned positions), the MLP activation 3·f·e (SwiGLU) or 2·f·e (GeLU).
// The backward: input grad = the forward's matrix multiplies + twice its attention core + twice its
// memory-bound bytes; weight grad = the forward's matrix multiplies again (Narayanan et al. 2021, appendix:
// backward = 2 x forward; split into halves for zero-bubble schedules, Qi et al. 2024).
// Embedding: a gather (h·(weight + activation bytes) per token) and its scatter-add in the weight grad. Head:
// the final norm and the LM head (2·h·V FLOPs per token). Loss: reads the fp32 logits twice and writes their
// gradient, V·(8 + e) bytes per token. Update (AdamW, memory-bound): reads and writes the master weight (or
// the weight) and both moments, reads the grad, writes the bf16 weight copy: 28 bytes per parameter in mixed
// precision. Recomputation adds to the input-grad (or full) backward the blocks' forward (full) or their
// attention core (selective); the head is not recomputed (Narayanan et al. 2021, eq. 3).
#pragma once

#include <vector>

#include "hardware/setting.h"
#include "sim/op.h"

namespace trainsim::hw {

/// What one schedule layer holds.
struct LayerContent {
  int first_block = 0;
  int num_blocks = 0;
  bool embedding = false;  ///< layer 0
  bool head = false;       ///< the last layer
};

/// The layer -> blocks map for `layers` schedule layers. Throws SpecError when the model has fewer blocks
/// than the schedule has layers.
std::vector<LayerContent> partition_layers(const ModelSpec& model, int layers);

/// Work of one op: FLOPs by efficiency class and bytes of memory traffic.
struct Work {
  double forward_flops = 0;          ///< forward matrix multiplies
  double backward_input_flops = 0;   ///< input-grad matrix multiplies
  double backward_weight_flops = 0;  ///< weight-grad matrix multiplies
  double attention_flops = 0;        ///< attention core, forward or backward
  double bytes = 0;                  ///< memory-bound traffic, bytes

  /// Every FLOP.
  double flops() const { return forward_flops + backward_input_flops + backward_weight_flops + attention_flops; }
  Work& operator+=(const Work& o);
};

/// Forward work of one block over `tokens` tokens of sequences of length `seq`.
Work block_forward(const ModelSpec& m, double tokens, int seq);
/// Work of a compute op (forward, backward, backward-input, backward-weight, loss) of `layer` over
/// `batches` microbatches; of an update over `params` parameters (batches ignored). Other kinds: none.
Work compute_work(const HardwareSetting& s, const LayerContent& layer, OpKind kind, int batches, double params = 0);
/// Seconds of that work on the device (the efficiency table's formula, hardware/device.h); 0 for no work.
double work_seconds(const DeviceSpec& d, const Work& w);

}  // namespace trainsim::hw
