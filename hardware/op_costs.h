// FLOPs and bytes of each compute op of a schedule on a hardware setting, and the seconds they take.
//
// Schedule layer i of L holds the blocks its stage layout gives it (hardware/stage_layout.h: the header's
// `layout` line), or without one the contiguous blocks [i·B/L, (i+1)·B/L) of the model's B blocks; layer 0 also
// holds the embedding, layer L-1 the final norm and the LM head; the loss op is the cross-entropy on the
// logits. This is the executor's mapping (docs/executor.md), which needs B to be a multiple of L without a
// layout; here any B >= L is accepted (the floor division spreads the remainder).
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
//
// Tensor parallelism over t ranks (Shoeybi et al. 2019, Megatron-LM; docs/design.md "Tensor parallelism"):
// an op whose weight (a weight-grad pass: its weight grad or activation grad; the loss: its logits) is TP
// slice j of t does 1/t of every matrix multiply (Wqkv, Wgate, Wup by columns, Wo, Wdown by rows, the LM head
// by vocabulary) and of the attention core (heads split), and 1/t of the memory-bound bytes of the split parts
// (rotary embedding of its heads, the MLP activation of its columns). The replicated parts (two norms and two
// residual adds per block, the final norm) run whole on every TP rank, or on s/t tokens with sequence
// parallelism (Korthikanti et al. 2022, §4.2.2). The vocabulary-parallel embedding reads 1/t of the rows and
// writes the whole output (masked, then all-reduced: Megatron's VocabParallelEmbedding); its grad reads the
// whole output grad and scatter-adds into 1/t of the rows. The loss on a vocabulary slice: 1/t of its bytes.
//
// The TP reductions inside a compute op (the design's rule: the reduction of the partial sum a layer ends
// with is an explicit op of the schedule, the others run inside the layer's compute op). Per layer of k
// blocks and microbatch, Megatron's f/g operators are one all-reduce of b·s·h activations after attention and
// one after the MLP in the forward, the conjugate two in the backward (Shoeybi et al. 2019, fig. 3), one after
// the vocabulary-parallel embedding, and one for the LM head's input grad (its column-parallel input's g):
// - forward: 2k (+1 in layer 0, the embedding's) minus the explicit one at the layer's end (none for the
//   last layer: its head's output is a vocabulary slice);
// - input grad (backward-input or a whole backward): 2k (+1 in the last layer, the head's input grad) minus
//   the explicit one of the layer's input grad (none for layer 0: its input is the token ids); with full
//   recomputation plus the 2k of the recomputed blocks' forward (Megatron recomputes them with their
//   communication); the weight-grad pass none;
// - loss: the vocabulary-parallel cross-entropy's three all-reduces of b·s fp32 values (the max, the target
//   logit and the sum of exponentials: Megatron's _VocabParallelCrossEntropy).
// Each all-reduce is a ring all-reduce of b·s·h·e bytes over the rank's TP group (hardware/comm.h); with
// sequence parallelism the forward's reductions become an all-gather before and a reduce-scatter after each
// sublayer (the embedding a reduce-scatter, the head an all-gather; the backward the conjugates) of the same
// volume (Korthikanti et al. 2022, §4.2.2). They run synchronously, as in Megatron-LM without its TP-comm
// overlap: the op's time is its compute plus this communication (HardwareCostModel::tp_comm_seconds).
#pragma once

#include <vector>

#include "hardware/setting.h"
#include "hardware/stage_layout.h"
#include "sim/op.h"

namespace trainsim::hw {

/// The layer -> blocks map for `layers` schedule layers: `layout`'s (hardware/stage_layout.h) when given, else
/// the even split (StageLayout::even). Throws SpecError when the model has fewer blocks than the schedule has
/// layers (even split), or when the layout's stages are not the schedule's layers or its blocks not the model's.
std::vector<LayerContent> partition_layers(const ModelSpec& model, int layers, const StageLayout* layout = nullptr);

/// How an op's layer is split by tensor parallelism.
struct TpSplit {
  int degree = 1;                  ///< t: the TP degree of the op's slice; 1 without tensor parallelism
  bool sequence_parallel = false;  ///< norms and residual adds run on s/t tokens (Korthikanti et al. 2022)
};

/// The TP collectives a compute op runs inside itself, per microbatch (see the header comment): all-reduces
/// of b·s·h activations without sequence parallelism, all-gathers and reduce-scatters of that volume with it.
struct TpCollectives {
  int all_reduces = 0;
  int all_gathers = 0;
  int reduce_scatters = 0;
  /// Equal when every count is.
  friend bool operator==(const TpCollectives&, const TpCollectives&) = default;
};

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

/// Forward work of one block over `tokens` tokens of sequences of length `seq`, on one TP rank of `tp`.
Work block_forward(const ModelSpec& m, double tokens, int seq, TpSplit tp = {});
/// Work of a compute op (forward, backward, backward-input, backward-weight, loss) of `layer` over
/// `batches` microbatches on one TP rank of `tp`; of an update over `params` parameters (the slice's and
/// shards' share already taken; batches ignored). Other kinds: none.
Work compute_work(const HardwareSetting& s, const LayerContent& layer, OpKind kind, int batches, double params = 0,
                  TpSplit tp = {});
/// The TP collectives inside a forward, backward, backward-input or backward-weight of `layer` (per microbatch,
/// at a TP degree above 1; see the header comment), with recomputation `r`. The loss's small all-reduces and
/// other kinds: none.
TpCollectives tp_collectives_inside(const LayerContent& layer, OpKind kind, Recompute r, bool sequence_parallel);
/// Seconds of that work on the device (the efficiency table's formula, hardware/device.h); 0 for no work.
double work_seconds(const DeviceSpec& d, const Work& w);

}  // namespace trainsim::hw
