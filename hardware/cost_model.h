// The `hardware` cost model (DESIGN §2): seconds and bytes for a schedule on a model, device and network.
//
// Compute ops take the time of their FLOPs and bytes (hardware/op_costs.h) under the device's efficiency
// table. A send takes the p2p time of its tensor (alpha + S/B over NVLink inside a node, one NIC between
// nodes); its recv takes no time of its own (the stream engine starts it when the send has ended, so the
// message costs once). Collectives take NCCL's fastest algorithm for where the group's members sit
// (hardware/comm.h, nccl_collective: ring, tree or NVLS; every NIC of the members' GPUs when the group spans
// nodes), the group's shape computed once per group. All-gather: S = the gathered tensor; reduce-scatter and
// all-reduce: S = the input grad; barrier: an all-reduce of no bytes. Load, free, accumulate: no time.
// Every timed op (compute, send, recv, collective) then takes the device's efficiency.dispatch_s more: the
// time from its inputs being ready to its start that no op's own time holds (hardware/device.h).
// Memory is in bytes (hardware/memory.h), rank-aware: the input of a layer's forward holds that forward's
// saved activations on the ranks that run it.
// Tensor parallelism (hardware/op_costs.h, hardware/tp_comm.h): a compute op on TP slice j of t does 1/t of the
// work, and its time also holds the TP collectives inside it (tp_comm_seconds), timed as NCCL runs them over the
// rank's TP group (NVLink when the group sits in one node; NVLS where the network has it). Explicit TP collectives
// (the all-reduce of a partial sum, the reduce-scatter and all-gather of sequence shards) are collectives like any
// other, over the bytes of the whole activation (TensorSizes::wire_bytes); under the setting's TP overlap both
// leave exposed only what the GEMM they run under does not hide.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hardware/memory.h"
#include "hardware/tp_comm.h"
#include "sim/cost_model.h"

namespace trainsim::hw {

/// Where tensor parallelism runs, per rank: what the schedule shows (schedules/cost_models.h builds it).
struct TpLayout {
  /// The id of each rank's TP group (the header group named tp... that holds it: tp_groups_by_rank in
  /// schedules/schedule.h), 0 for none. Empty: no rank has one.
  std::vector<int> group;
  /// Whether each rank runs sequence parallelism (Korthikanti et al. 2022): the schedule reduce-scatters or
  /// all-gathers an activation or activation grad over the rank's TP group (its partial sums become sequence
  /// shards). Empty: none does.
  std::vector<char> sequence_parallel;
};

/// How a schedule splits the model over its layers and ranks: the header's `layout` and `stage_map`.
struct ModelPlacement {
  std::optional<StageLayout> layout;  ///< the blocks of each layer (hardware/stage_layout.h); none: the even split
  std::vector<int> stage_map;         ///< the rank of each layer's stage; empty: every rank runs every layer
};

class HardwareCostModel final : public CostModel {
 public:
  /// `groups`: collective groups by id, group 0 = every rank; `group_names`: the names of groups 1, 2, ... (for
  /// messages; may be shorter). `tp_group`: each rank's TP group id (TpLayout::group; empty: no rank has one).
  /// What each rank runs is learnt from its ops (prepare_rank) before its ops are priced. `placement`: the
  /// layer -> blocks split and the stage map; with tied embeddings (ModelSpec::tied_embeddings) and the first
  /// and last layers on different ranks of the stage map, the last layer holds a copy of the embedding matrix
  /// (TensorSizes) and their grads are all-reduced (tied_embedding_seconds). Throws SpecError when the model
  /// has fewer blocks than `layers`, or the layout does not fit the schedule or the model (partition_layers);
  /// std::invalid_argument when the setting has context parallelism of degree c and a rank sits in no header
  /// group named cp... of c ranks.
  HardwareCostModel(HardwareSetting setting, int layers, int world_size, std::vector<std::vector<int>> groups,
                    std::vector<std::string> group_names = {}, std::vector<int> tp_group = {},
                    const ModelPlacement& placement = {});

  /// Learns from rank `rank`'s ops the TP degree of each forward it runs (its layers' saved activations) and
  /// whether it runs sequence parallelism (it reduce-scatters or all-gathers an activation or activation grad over
  /// its TP group). Throws std::invalid_argument for a compute op on a TP slice of t when no TP group of t ranks
  /// holds the rank (naming the rank, the op and its file:line).
  void prepare_rank(int rank, const std::vector<Op>& ops) override;

  std::string name() const override { return "hardware"; }
  Time duration(const Op& op, int group_size) const override;
  double memory(const Tensor& t) const override { return sizes_.wire_bytes(t, load_of(&t)); }
  double memory(const Tensor& t, int rank) const override;
  std::string memory_unit() const override { return "bytes"; }
  /// The TP communication inside a compute op (tp_comm_seconds), in Time units.
  Time inner_comm(const Op& op) const override { return seconds(tp_comm_seconds(op)); }
  /// Bytes the op allocates inside itself at its TP split (TensorSizes::workspace_bytes: the loss's fp32
  /// log-softmax and its grad, a fully recomputed block's activations in its backward).
  double workspace(const Op& op) const override {
    return sizes_.workspace_bytes(op, tp_split(op), load_of(expert_weight(op)));
  }

  /// The TP degree and sequence parallelism of an op on its rank: the largest tp_size of the tensors it reads
  /// or writes (1 without TP), the rank's sequence parallelism.
  TpSplit tp_split(const Op& op) const;
  /// FLOPs and bytes of a compute op (forward, backward and its halves, loss, update) on its slice and shards
  /// (hardware/op_costs.h); no work for other kinds.
  Work op_work(const Op& op) const;
  /// Seconds of the TP collectives a compute op of TP degree t > 1 runs inside itself and leaves exposed
  /// (hardware/tp_comm.h: its pass's collectives but those the schedule runs as explicit ops, each as NCCL runs it
  /// over its rank's TP group, t ranks on one node when the rank has no TP group, less what the setting's TP
  /// overlap hides under the pass's GEMMs; and the loss's three small all-reduces); 0 without TP. Part of
  /// seconds_of.
  double tp_comm_seconds(const Op& op) const;
  /// Seconds of the all-reduce of the tied embedding matrix's grad that the update of the first or of the last
  /// layer runs before it (Megatron-LM's _allreduce_word_embedding_grads in finalize_model_grads: between the
  /// first and the last pipeline stage, after the backward, before the optimizer step): a ring all-reduce of
  /// two ranks over V·h/t grads (grad_bytes each; t the update's TP degree) on the link between the rank and its
  /// partner (the same place in the other stage: rank + or - stage_map.back() - stage_map.front()). 0 for
  /// other ops, untied models, and layouts whose first and last layers share a rank. Part of seconds_of.
  double tied_embedding_seconds(const Op& op) const;
  /// True for a collective over its rank's TP group (an explicit TP all-reduce, reduce-scatter or
  /// all-gather).
  bool is_tp_collective(const Op& op) const;
  /// True when some rank has a TP group (TpLayout::group).
  bool tensor_parallel() const;

  /// Seconds of the ring attention's KV exchange a forward or input-grad pass does not hide under its attention
  /// core (hardware/op_costs.h, context parallelism): per block, (c-1) sends of this rank's K and V chunk (K, V
  /// and their grads in the backward) over its CP group's link, less the attention core's time; 0 without
  /// context parallelism. Part of seconds_of.
  double cp_comm_seconds(const Op& op) const;

  /// Seconds of an all-to-all of an MoE layer (docs/design.md, "Mixture of Experts"): per MoE block of the layer,
  /// nccl_all_to_all_seconds over the op's group of each member's tokens routed top_k times (b·s·top_k·h·e bytes
  /// for its microbatches), times the busiest expert slice's load (expert_load_factor: that slice receives the
  /// most and the collective ends with it). The dispatch and the combine, forward and backward, cost alike.
  double all_to_all_seconds(const Op& op, int group_size) const;

  /// Seconds of an op (before rounding to nanoseconds): its busy time plus, for a timed op, dispatch_s.
  double seconds_of(const Op& op, int group_size) const;
  const HardwareSetting& setting() const { return setting_; }
  const TensorSizes& sizes() const { return sizes_; }

 private:
  double busy_seconds(const Op& op, int group_size) const;  // without dispatch_s
  // A layer whose MoE blocks run their experts inside it (EP 1): how much longer the host takes to issue its
  // experts' kernels than their GPU work (hardware/experts.h expert_launch_seconds), 0 when it does not.
  double inside_expert_wait(const Op& op) const;
  // An expert slice's load (expert_load_factor), 1 for null or any other tensor.
  double load_of(const Tensor* t) const;
  // Throws std::invalid_argument for an op that does not fit the model's experts (prepare_rank): experts in a
  // schedule of a dense model, an EP degree that does not divide the experts, experts on a dense layer, an MoE
  // layer's forward without them on a rank whose other MoE layers are expert-parallel (`expert_parallel`; without
  // any expert slice the layers run their experts themselves: EP 1), TP with experts.
  void check_experts(const Op& op, bool expert_parallel) const;
  // Where the members of the op's group sit, `group_size` of them (a group the model does not know: one node).
  GroupShape group_shape(const Op& op, int group_size) const;
  // The TP group of a rank as the formulas see it (its header group's shape, or `degree` ranks on one node).
  GroupShape tp_shape(int rank, int degree) const;
  // Whether the rank splits the backward of `layer` into its halves (zero bubble's B and W).
  bool split_backward(int rank, int layer) const;
  // Whether the rank all-gathers the input of `layer` again for its backward (sequence parallelism).
  bool regathered(int rank, int layer) const;
  // What a TP collective of `seconds` of role `role` in `pass` of `layer` over `batches` microbatches leaves
  // exposed (hardware/tp_comm.h), its partner GEMM's time cached.
  double tp_role_seconds(int rank, int layer, OpKind pass, TpRole role, double batches, TpSplit tp,
                         double seconds) const;
  // An explicit TP collective's seconds, `seconds` as NCCL runs it, less what its pass's GEMM hides (its role by
  // its tensor: a forward output's or input grad's reduction, an input's or output grad's gather).
  double explicit_tp_seconds(const Op& op, double seconds) const;
  double compute_seconds(const Op& op) const;  // work_seconds(op_work(op)) for a pass or the loss, cached

  HardwareSetting setting_;
  int tied_offset_ = 0;  // tied embeddings: rank of the last layer - rank of layer 0 (0: none to all-reduce)
  TensorSizes sizes_;
  int world_size_;
  std::vector<std::vector<int>> groups_;
  std::vector<GroupShape> shapes_;  // [group]: where its members sit, computed once
  std::vector<std::string> group_names_;
  std::vector<std::vector<char>> forward_layers_;  // [rank][layer]: the TP degree of its forward, 0 for none
  std::vector<std::vector<char>> expert_tp_;  // [rank][layer]: its experts' expert-TP degree (only with expert TP)
  TpLayout tp_;
  std::vector<int> cp_group_;  // [rank]: its CP group's id (context parallelism only)
  std::vector<std::vector<char>> split_backward_;  // [rank][layer]: its backward split into B and W (only if any)
  std::vector<std::vector<char>> regathered_;  // [rank][layer]: its input all-gathered again for the backward
  mutable std::map<std::array<int, 10>, double> tp_cache_;  // tp_comm_seconds by op shape
  mutable std::unordered_map<std::uint64_t, double> compute_cache_;  // compute_seconds by its key
  mutable std::map<std::array<int, 6>, double> expert_cache_;  // an expert op's compute_seconds by its shape
};

}  // namespace trainsim::hw
