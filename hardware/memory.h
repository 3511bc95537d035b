// Memory in bytes: model states under mixed precision and ZeRO sharding (Rajbhandari et al. 2020), saved
// activations per block with no, selective or full recomputation (Korthikanti et al. 2022), and the bytes of
// each schedule tensor.
#pragma once

#include <vector>

#include "hardware/op_costs.h"
#include "sim/tensor.h"

namespace trainsim::hw {

/// Activations one block keeps for its backward, in bytes, for b sequences of s tokens, generalising
/// Korthikanti et al. 2022 §4 (their Table 2) to grouped-query attention, gated MLPs and no dropout:
/// - attention: the QKV input e·sbh, Q and K e·sb(h + kv), the softmax output e·as²b (plus, with dropout,
///   its mask as²b and output e·as²b), V e·sb·kv, the output projection's input e·sbh, the dropout mask sbh;
/// - MLP: its input e·sbh, the activation's inputs and output (SwiGLU: gate, up, product 3e·sbf; GeLU:
///   input and output 2e·sbf), the dropout mask sbh;
/// - two norms' inputs 2e·sbh.
/// With e = 2 (bf16), kv = h, f = 4h and dropout this is sbh(34 + 5as/h). Tensor parallelism over t ranks
/// divides the Q, K, V, softmax, projection-input and MLP-inner terms by t; sequence parallelism divides the
/// rest too. Selective recomputation drops the as²b terms; full recomputation keeps only the block's input,
/// e·sbh (2sbh in bf16) whatever t, or its sequence shard e·sbh/t with sequence parallelism (Megatron-LM
/// checkpoints the sequence-parallel input of each block). That is eager attention (the paper's). Flash attention keeps no s x s
/// terms but the softmax statistics, one fp32 log-sum-exp per head and token (4·asb; Dao 2023), dropped too by
/// selective recomputation. Selective op checkpointing (Recompute::Op, torchtitan) keeps the block's input, the
/// outputs of its odd-numbered matrix multiplies (gated: wq h, wv kv, w1 f, w2 h; GeLU: QKV h + 2kv, fc f) and
/// the attention's output h with its statistics: e·sb(2h + h + kv + f) + 4·asb for a gated block, e·sb(h + h +
/// 2kv + h + f) + 4·asb for a GeLU one (split terms over t, the block's input and w2's output over t with
/// sequence parallelism only). `s` is the tokens of each sequence this rank holds (s/c with context
/// parallelism: flash attention keeps statistics for its own queries only). With head_dim set apart from h/a the
/// query terms (Q, the projection's input, the kept attention output) are q = a x head_dim wide rather than h.
/// An MoE block's dense part (`part` MoeShared) keeps its shared experts' MLP terms (f = shared_experts x
/// expert_ffn) and the router's fp32 scores (4·E·sb); its routed experts' activations are expert_activation_bytes.
double activation_bytes_per_block(const ModelSpec& m, double s, double b, Recompute r, int tp = 1,
                                  bool sequence_parallel = false, Attention attention = Attention::Eager,
                                  BlockPart part = BlockPart::Dense);
/// Model states per GPU (bytes) for `params` parameters over `dp` data-parallel ranks under ZeRO `stage`
/// (0: replicated; 1: optimizer state sharded; 2: and gradients; 3: and weights), with the model's bytes per
/// parameter: weights weight_bytes, grads grad_bytes, optimizer (master + moments) master_bytes +
/// optimizer_bytes (K = 12 in the ZeRO paper). With tensor parallelism over `tp` ranks each holds a 1/tp slice
/// of every state, then ZeRO-sharded over `dp` (Narayanan et al. 2021 §3.3; FSDP2 + TP in torchtitan).
struct ModelStates {
  double weights = 0, grads = 0, optimizer = 0;
  double total() const { return weights + grads + optimizer; }
};
ModelStates model_state_bytes(const ModelSpec& m, double params, int stage, int dp, int tp = 1);

/// Sizes of schedule tensors on one hardware setting (tensor kinds: docs/schedule-format.md; the layer
/// mapping: hardware/op_costs.h).
class TensorSizes {
 public:
  /// `layers` schedule layers split as `layout` says (partition_layers: the even split without one). With
  /// `tied_copy` (tied embeddings, the embedding's and the LM head's layers on different ranks) the last layer
  /// holds its own copy of the token embedding matrix, as Megatron-LM's last pipeline stage does (its
  /// output_layer.weight, kept equal to the first stage's word embeddings by an all-reduce of their grads).
  /// Throws SpecError as partition_layers does.
  TensorSizes(const HardwareSetting& s, int layers, const StageLayout* layout = nullptr, bool tied_copy = false);
  /// Parameters of schedule layer l (its blocks, plus embedding or head; plus the tied copy, V·h, on the last
  /// layer with `tied_copy`); of an MoE model its MoE blocks' dense parts only (ModelSpec::dense_part_parameters).
  double layer_parameters(int l) const;
  /// Parameters of the routed experts of layer l's MoE blocks (what its expert slices split); 0 without.
  double layer_expert_parameters(int l) const;
  /// Mixture of Experts without expert parallelism (EP 1): layer l's ops run its MoE blocks' experts themselves,
  /// which the schedule puts in no expert slice (HardwareCostModel::prepare_rank sets it from the ops). Its
  /// weights, grads and optimizer state then hold every expert (layer_parameters), and its input's saved
  /// activations the routed pairs' inputs, outputs and experts' terms (resident_bytes).
  void set_experts_inside(int l);
  bool experts_inside(int l) const { return l >= 0 && l < static_cast<int>(inside_.size()) && inside_[l] != 0; }
  /// MoE blocks of layer l.
  int layer_moe_blocks(int l) const;
  /// True when the last layer holds a copy of the tied embedding matrix (the constructor's `tied_copy`).
  bool tied_copy() const { return tied_copy_; }
  /// The weights of layer l's blocks' linear layers (what FP8 training casts; not the norms, embedding or head).
  double layer_linear_parameters(int l) const;
  /// Bytes of a tensor as it travels (a message, a collective's buffer): weights weight_bytes, optimizer
  /// state master + moments, weight grads grad_bytes per parameter held; A0 the token ids (4 bytes per token),
  /// A_l the hidden states (e·h per token), A_L the fp32 logits (4·V per token; Korthikanti et al. 2022 §4.3),
  /// dA_l as A_l in the activation precision, dA0 nothing; each times the fraction held (Tensor::
  /// held_fraction): the shards held, 1/t for a TP slice (a weight's slice, the logits' vocabulary slice), a
  /// sequence shard's share with sequence parallelism, and the whole for a partial sum (as large as the sum).
  /// A TP slice's parameters are 1/t of the layer's (the norms' gains, replicated in Megatron-LM, counted 1/t
  /// too: 2h of a block's 12h² parameters). Mixture of Experts: an expert slice's weights, grads and optimizer
  /// state are 1/ep of the layer's routed experts (layer_expert_parameters); a slice's tokens (A_l and dA_l
  /// routed to or from the experts, ExpertIn and ExpertOut) are its routed pairs of one MoE block, e·h each:
  /// 1/ep of the EP group's tokens times top_k, times `load` (the slice's CostModel::expert_load_factor).
  double wire_bytes(const Tensor& t, double load = 1) const;
  /// Bytes of a resident tensor: wire_bytes, except that the input A_l of a layer whose forward runs on the
  /// rank holding it also holds what that forward saved for the backward (the executor keeps the saved
  /// activations with the input: docs/executor.md): its blocks' activation_bytes_per_block at the forward's
  /// TP degree and sequence parallelism `tp` (and the setting's attention and CP degree), plus for the last layer the final norm's and the LM head's
  /// inputs (2·e·h per token; with SP on s/t tokens), plus the token ids for A0. Only the tensor the rank keeps
  /// of its input from the forward to the backward holds them (holds_saved); any other piece of it (a partial
  /// sum; with sequence parallelism the whole input gathered for one pass) is its wire size.
  /// A routed activation (a dense part's output waiting for the dispatch) holds no saved activations; an expert
  /// slice's input tokens (ExpertIn A_l, complete) on the rank that runs the experts hold each MoE block's
  /// expert_activation_bytes per pair (at expert-TP degree tp.degree) and, for a layer of k > 1 MoE blocks, the
  /// inputs of the other k - 1; a dispatched sequence shard (expert TP, before its all-gather) is its wire size.
  double resident_bytes(const Tensor& t, bool forward_runs_here, TpSplit tp = {}, double load = 1) const;
  /// Whether `t`, the input A_l of a forward run at `tp`, is what the rank keeps until the backward and so holds
  /// the forward's saved activations: with sequence parallelism (l > 0) its sequence shard (shard j of t, what
  /// the reduce-scatter left; the executor keeps the stash with it too: exec/rank_executor.cpp), else the
  /// complete tensor (the token ids A0 are loaded whole by every TP rank).
  static bool holds_saved(const Tensor& t, TpSplit tp);
  /// Bytes an op allocates inside itself while it runs, beyond the tensors it reads and writes (the hardware
  /// model's CostModel::workspace), at its TP split `tp`:
  /// - the loss: the log-softmax of the fp32 logits it reads, which cross-entropy keeps for its backward, and
  ///   that log-softmax's grad, both fp32 and alive together as the grad is computed (PyTorch's
  ///   log_softmax_backward; torchtitan's loss is cross_entropy(pred.float(), labels)): twice the logits read,
  ///   8·V bytes per token (1/t of V with a vocabulary-parallel head);
  /// - a backward (or its input-grad half) of a layer of blocks under full recomputation: one block's forward
  ///   activations, recomputed for its backward and alive while that block's backward runs (Korthikanti et al.
  ///   2022 §5, the extra layer of activations full recomputation needs): activation_bytes_per_block without
  ///   recomputation less the block input it kept; an expert slice's backward, one MoE block's expert activations
  ///   at `load`;
  /// - 0 for every other op (ops' smaller temporaries, the allocator's cache and NCCL's buffers are not counted:
  ///   docs/hardware-model.md §6).
  double workspace_bytes(const Op& op, TpSplit tp = {}, double load = 1) const;
  const std::vector<LayerContent>& layers() const { return layers_; }

 private:
  HardwareSetting s_;
  std::vector<LayerContent> layers_;
  bool tied_copy_ = false;
  std::vector<char> inside_;  // by layer: experts inside (set_experts_inside)
};

}  // namespace trainsim::hw
