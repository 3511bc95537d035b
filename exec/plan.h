// What the executor works out from a validated schedule before any rank starts (all ranks compute the same
// plan): the peer of every receive, which loss op reports each microbatch's loss, which part of the
// gradient each rank counts toward the global norm and whether clipping can run at all, how the pieces of
// every all-gather are ordered, which weights and optimizer state each rank carries from one step to the
// next, and the bytes the schedule's tensors need per rank.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/shapes.h"
#include "schedules/schedule.h"

namespace trainsim::exec {

/// A schedule the executor cannot replay (as opposed to one the simulator rejects), with the reason, the
/// rank and the op (file:line).
struct PlanError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One rank's part of the plan. Vectors indexed by op are the size of the rank's op list.
struct RankPlan {
  std::vector<int> peer;                 ///< send/recv: the peer (a `recv from any` resolved to its sender)
  std::vector<IdSet> reported_batches;   ///< loss ops: the microbatches whose loss this op reports
  /// all-gather ops: for each shard of the result in increasing shard order, the index of its block in the
  /// member-major buffer NCCL's all-gather returns (empty when that is already increasing shard order).
  std::vector<std::vector<int>> gather_order;
  int first_update = -1;  ///< op index of the first update (where the gradient norm is taken), -1 if none
  /// Flat element ranges [begin, end) of an update op's layer whose gradient this rank counts toward the
  /// global norm (each element counted by exactly one rank: the lowest that updates it).
  struct NormPart {
    int op = 0;
    long begin = 0, end = 0;
  };
  std::vector<NormPart> norm_parts;
  /// Weights and optimizer state this rank loads at step 0 (step-0 identities, in first-load order): the
  /// state it must keep from one training step to the next.
  std::vector<Tensor> state;
  std::size_t peak_bytes = 0;  ///< the most bytes its schedule tensors hold at once (program order)
  /// Tensor parallelism: the TP degree of the rank's compute ops (1 without TP), its TP group (the schedule's
  /// group named tp..., 0 without TP), and by stream the communicator group of the reductions inside its
  /// compute ops on that stream (a copy of the TP group per stream, so that they never interleave with the
  /// schedule's own collectives or another stream's; -1 where it runs none).
  int tp_size = 1;
  int tp_group = 0;
  std::vector<int> tp_comm_groups;
  /// Collectives (all-gather, reduce-scatter, all-reduce, barrier, broadcast, reduce), by op index: the
  /// communicator group the op runs over (-1 for other ops). The schedule's group itself, or, for a group whose
  /// members run its collectives on more than one stream (FSDP's all-gathers and reduce-scatters), a copy of
  /// the group for each stream: a communicator numbers a group's calls as they run, and calls on two streams of
  /// a rank run in any order, so each stream gets calls of its own, which the members make in the same order.
  std::vector<int> comm_group;
};

/// The whole plan.
struct ReplayPlan {
  std::vector<RankPlan> ranks;
  /// Communicator groups: 0 = every rank, then the schedule's groups 1.. in order, then one copy per stream of
  /// each group whose collectives run on several streams (RankPlan::comm_group), then one copy of each TP
  /// group per stream its members compute on (RankPlan::tp_comm_groups), then the ranks that update (for the
  /// gradient norm, norm_group) when they are not every rank.
  std::vector<std::vector<int>> groups;
  int norm_group = 0;
  bool clip = false;        ///< clipping by the global norm runs
  /// When it does not run, the words after "gradient clipping": "off (--grad-clip 0)", or "off: " and why ("off:
  /// rank 0 runs update layer 0 before it has dW1{0-3}, which update layer 1 reads, and clipping by the global
  /// norm needs every gradient before the first update").
  std::string clip_note;
  bool repeatable = true;   ///< every rank keeps the state its next step loads
  std::string repeat_note;  ///< why not
};

/// The TP degrees (> 1) of the schedule's TP-sliced tensors, in increasing order (for ModelShapes).
std::vector<int> tp_degrees(const Schedule& schedule);

/// The TP degree of a compute op of a schedule of `layers` layers: that of the weight a forward or backward
/// reads, the weight grad a backward-weight writes, the logits a loss reads (their vocabulary slice, or the
/// final activation's sequence shard that an MoE last layer's TP slice writes); of an all-to-all that writes or
/// reads that sequence shard (the MoE last layer's combine and backward dispatch, whose LM head's TP calls run
/// inside: docs/executor.md "Mixture of Experts"); 1 for every other op.
int compute_tp_size(const Op& op, int layers);

/// Works out the plan. `clip` is the requested max norm (0: off); with `clip_required` a schedule that cannot
/// clip is a PlanError, otherwise clipping is turned off with a note. Throws PlanError for what the
/// executor cannot replay: a tensor the model has no shape for, an all-gather of unequal pieces, an
/// ambiguous any-source receive; with tensor parallelism, a TP-sliced compute op on a rank in no TP group or
/// in one of another size, members of a TP group that run their compute ops in different orders on a stream;
/// members of a group that run the same collective of the group (its k-th, in program order) on different streams;
/// with sequence parallelism, a sequence shard of a sequence whose length is not a multiple of the shard count
/// (exec/sequence_shard.h). `schedule` must have passed the simulator.
ReplayPlan make_plan(const Schedule& schedule, const ModelShapes& shapes, float clip, bool clip_required);

}  // namespace trainsim::exec
