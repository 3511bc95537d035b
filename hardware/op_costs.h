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
// - memory-bound (bytes, e = activation bytes), each op one fused kernel (the setting's elementwise fused: torch.compile,
//   Megatron-LM's fused kernels): two norms 4·h·e, two residual adds 6·h·e, rotary embedding of Q and K 2·(h + kv)·e
//   (not with learned positions), the MLP activation 3·f·e (SwiGLU) or 2·f·e (GeLU); the backward twice that. With
//   elementwise eager (PyTorch without torch.compile) each op of torchtitan's Llama code is a kernel of its own
//   (elementwise_bytes lists them): an RMSNorm moves 36 bytes per element forward, a rotary embedding 20, SwiGLU 5e
//   per FFN element, and repeat_kv copies K and V to every query head.
// The backward: input grad = the forward's matrix multiplies + twice its attention core + twice its
// memory-bound bytes; weight grad = the forward's matrix multiplies again (Narayanan et al. 2021, appendix:
// backward = 2 x forward; split into halves for zero-bubble schedules, Qi et al. 2024).
//
// Time (Work's *_weighted fields; docs/hardware-model.md §2). A block's matrix multiplies are its linear layers
// in the order torchtitan's Llama and GPT-2 blocks run them: gated MLP: wq (h -> h), wk, wv (h -> kv), wo (h ->
// h), w1, w3 (h -> f), w2 (f -> h); GeLU MLP: the fused QKV (h -> h + 2kv), the output projection, fc (h -> f),
// proj (f -> h); the LM head h -> V. A linear of in -> out on T tokens is a GEMM of M x N x K = T x out x in in
// the forward, T x in x out for the input grad, in x out x T for the weight grad; each takes its FLOPs divided
// by the device's shape factor for that shape (hardware/kernel_tables.h), and no less than the time to read its
// inputs and write its output at the memory bandwidth. The attention core with flash attention takes FlashAttention's
// own FLOP count for a causal mask (half the counted forward, 2.5 times that in the backward) over the device's
// flash table at the model's head dimension and the sequence length (per ring step's chunk with context
// parallelism); eager attention runs QK^T and attention x V as batched GEMMs (b·a/t of s x s x d and s x d x s;
// the backward's four likewise) plus the softmax's memory traffic over the s x s scores (read and write in the
// forward, three passes in the backward; with dropout its mask and output too). FP8 linear layers (the
// setting's fp8) run every block GEMM at the device's FP8 peak and efficiency, and cast both operands of each
// (an amax pass and a cast: 2e + 1 bytes per element) as torchao's dynamic scaling does; the LM head stays in
// BF16. Without kernel tables (the cpu preset) every shape has factor 1 and the attention core its counted
// FLOPs, as before the tables existed.
//
// Context parallelism over c ranks (the setting's context_parallel): each op works on b·s/c tokens of every
// sequence, and its queries attend to the whole sequence (ring attention with a load-balanced causal split: 1/c
// of the causal work); the KV exchange of the ring runs inside the op, overlapped with the attention core
// (HardwareCostModel::cp_comm_seconds adds only what the attention does not hide).
// Embedding: a gather (h·(weight + activation bytes) per token) and its scatter-add in the weight grad. Head:
// the final norm and the LM head (2·h·V FLOPs per token). Loss: reads the fp32 logits twice and writes their
// gradient, V·(8 + e) bytes per token. Update (AdamW, memory-bound): reads and writes the master weight (or
// the weight) and both moments, reads the grad, writes the bf16 weight copy: 28 bytes per parameter in mixed
// precision. Recomputation adds to the input-grad (or full) backward the blocks' forward (full) or their
// attention core (selective) or the even-numbered linears of each block (op: torchtitan's policy saves the output
// of every odd-numbered matrix multiply of a block and of its attention, and recomputes the rest: wk, wo, w3 of a
// gated block, the output projection and proj of a GeLU one, and every elementwise op); the head is not
// recomputed (Narayanan et al. 2021, eq. 3).
//
// Mixture of Experts (docs/hardware-model.md §4b): an MoE block's dense part (attention, the router h -> E, the
// shared experts) is the layer's ops here (BlockPart::MoeShared: the MLP terms over shared_experts x expert_ffn,
// the router's softmax and top-k over E fp32 scores); its routed experts are the expert slices' ops
// (hardware/experts.h). With head_dim set apart from h / a (Qwen3) or latent attention (DeepSeek-V3), the queries
// are q = heads x qk_head_dim wide and the attention output o = heads x value_head_dim: Q and the output
// projection take q and o for h above, and the attention core 2·s·(q + o) FLOPs per token forward.
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
// The TP collectives inside a compute op, which ones overlap which GEMMs, and the schedule's explicit ones:
// hardware/tp_comm.h. The vocabulary-parallel cross-entropy's three all-reduces of b·s fp32 values (the max, the
// target logit and the sum of exponentials: Megatron's _VocabParallelCrossEntropy) are the loss op's.
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

/// Work of one op: FLOPs by efficiency class, the FLOPs that take its time, and bytes of memory traffic.
struct Work {
  double forward_flops = 0;          ///< forward matrix multiplies (recomputed ones included)
  double backward_input_flops = 0;   ///< input-grad matrix multiplies
  double backward_weight_flops = 0;  ///< weight-grad matrix multiplies
  double attention_flops = 0;        ///< attention core, forward or backward (unmasked count: 4·s·h per token)
  double bytes = 0;                  ///< memory-bound traffic, bytes

  /// The same work as FLOPs at the device's best shape that take as long (each GEMM's FLOPs over its shape
  /// factor, raised to its memory floor; see the header comment): the time is forward_weighted / (peak x
  /// efficiency.forward) and so on. Equal to the FLOPs above on a device without kernel tables.
  double forward_weighted = 0;
  double backward_input_weighted = 0;
  double backward_weight_weighted = 0;
  double fp8_weighted = 0;                  ///< FP8 GEMMs of every pass, over fp8_peak_flops x efficiency.fp8
  double attention_forward_weighted = 0;    ///< over peak x efficiency.attention
  double attention_backward_weighted = 0;

  /// Every FLOP.
  double flops() const { return forward_flops + backward_input_flops + backward_weight_flops + attention_flops; }
  Work& operator+=(const Work& o);
};

/// One linear layer of a block on one TP rank: its input and output widths, and whether selective op
/// checkpointing keeps its output (torchtitan keeps every odd-numbered matrix multiply's).
struct Linear {
  double in = 0, out = 0;
  bool kept_by_op_checkpointing = true;
};
/// Which part of a block an op runs: a dense block whole, or an MoE block's dense part (attention, norms, the
/// router and the shared experts: everything but its routed experts, which an expert op runs).
enum class BlockPart { Dense, MoeShared };
/// The linear layers of one block (of its dense part for MoeShared: attention, the router h -> E, then the
/// shared experts' MLP of width shared_experts x expert_ffn), in the order the block runs them (see the header
/// comment), split over a TP degree of `tp` (column-parallel outputs and row-parallel inputs divided by it).
std::vector<Linear> block_linears(const ModelSpec& m, int tp = 1, BlockPart part = BlockPart::Dense);
/// What linear layers cost on `tokens` tokens, by pass (FLOPs and weighted time), and the forward of those whose
/// output selective op checkpointing does not keep (what it recomputes).
struct LinearsWork {
  Work forward, input, weight;
  Work op_recompute;
};
LinearsWork linears_work(const HardwareSetting& s, const std::vector<Linear>& linears, double tokens);
/// `w` with every field times `k`.
Work scaled(Work w, double k);

/// Memory traffic of one block's elementwise ops (norms, residual adds, the MLP activation, rotary embedding,
/// repeat_kv) over `tokens` tokens on a TP rank of `tp`, forward and backward, as the setting's elementwise mode
/// runs them (see the header comment). An MoE block's dense part: its shared experts' activation, and the
/// router's softmax and top-k over E fp32 scores per token (12·E bytes forward, twice that backward).
struct ElementwiseBytes {
  double forward = 0, backward = 0;
};
ElementwiseBytes elementwise_bytes(const HardwareSetting& s, double tokens, TpSplit tp = {},
                                   BlockPart part = BlockPart::Dense);

/// Forward work of one block (or its dense part) over `tokens` tokens of sequences of length `seq`, on one TP
/// rank of `tp`, its time on the setting's device (the setting's attention, FP8 and context parallelism).
Work block_forward(const HardwareSetting& s, double tokens, TpSplit tp = {}, BlockPart part = BlockPart::Dense);
/// Work of a compute op (forward, backward, backward-input, backward-weight, loss) of `layer` over
/// `batches` microbatches on one TP rank of `tp` (of an MoE model: the layer's dense blocks whole and its MoE
/// blocks' dense parts; expert_work is the experts'); of an update over `params` parameters (the slice's and
/// shards' share already taken; batches ignored). Other kinds: none. Its *_weighted fields are for the
/// setting's device.
Work compute_work(const HardwareSetting& s, const LayerContent& layer, OpKind kind, int batches, double params = 0,
                  TpSplit tp = {});
/// Seconds of one linear's GEMM over `tokens` tokens in pass `pass` (Forward: its forward GEMM; BackwardInput: the
/// input-grad GEMM; BackwardWeight: the weight-grad GEMM) on the setting's device, FP8 when the setting has it
/// unless `bf16` (the LM head), without the per-op overhead (hardware/tp_comm.h times the GEMMs a TP collective
/// runs under with it).
double linear_seconds(const HardwareSetting& s, const Linear& l, double tokens, OpKind pass, bool bf16 = false);
/// Seconds of the attention core of one block over `tokens` tokens on a TP rank of `tp`, forward and backward
/// (its share of block_forward and of the input-grad pass).
struct AttentionSeconds {
  double forward = 0, backward = 0;
};
AttentionSeconds attention_core_seconds(const HardwareSetting& s, double tokens, int tp);
/// Seconds of that work on the device (the efficiency table's formula, hardware/device.h, over the *_weighted
/// fields); 0 for no work.
double work_seconds(const DeviceSpec& d, const Work& w);

}  // namespace trainsim::hw
