// The all-to-all of expert parallelism (docs/design.md, "Mixture of Experts"; Lepikhin et al. 2020, GShard;
// Megatron-Core's token dispatcher): what each member of an EP group gets from one all-to-all call, the one
// rule both engines (sim/world.h, schedules/stream_sim.h) apply.
#pragma once

#include <map>
#include <span>
#include <tuple>
#include <vector>

#include "sim/tensor.h"

namespace trainsim {

/// A problem with one member's input of an all-to-all; `member` is its position in the group (the engines name
/// the rank and the op).
struct AllToAllError : TensorError {
  AllToAllError(int member, const std::string& what) : TensorError(what), member(member) {}
  int member;
};

/// The all-to-alls of one EP group, in call order. Two directions, told apart by the inputs:
/// - Dispatch: no input is an expert slice. Every member gives the same tensor (kind, layer) for its own
///   batches, disjoint from the others': an activation Routed (the router's output), or an activation grad
///   complete (the grad of the layer's output, going back to the experts). With tensor and sequence parallelism
///   inside the EP group (Megatron-Core's folded layout, expert TP 1) a member gives its sequence shard j of t of
///   its batches; the members' (batch, shard) pieces must be disjoint and cover every shard of each batch named.
///   Member m of n gets the tokens of every member's batches, whole, for expert slice m of n (Route::ExpertIn).
///   With expert tensor parallelism (Megatron-Core's ETP = TP) the EP group holds one TP index k of each of its
///   TP groups: every member sends sequence shard k, and member m gets shard k of every member's batches, which
///   its expert-TP group all-gathers. In general the members must send the same shards of every batch named.
/// - Combine: every input is Route::ExpertOut, member m's being expert slice m of n, all for the same batches and
///   the sequence shards the dispatch gave (not a partial sum: with expert TP, reduce-scattered first).
///   Member m gets back the batches (and sequence shards) it gave to the dispatch of that tensor (kind, layer,
///   batches): an activation complete (the layer's output), an activation grad Routed (what the layer's dense
///   backward reads).
/// A combine without its dispatch in this group is refused: tokens go back to the ranks they came from.
class AllToAllGroup {
 public:
  /// What one member gave to a dispatch: its batches, and the sequence shards of them (shards {0} of 1: whole).
  struct Origin {
    IdSet batches, shards;
    int num_shards = 1;
  };
  /// What each member gets, inputs[m] being member m's. Throws AllToAllError naming the member whose input is
  /// wrong (the first one, in member order).
  std::vector<Tensor> call(std::span<const Tensor* const> inputs);

 private:
  // A dispatch waiting for its combine: what each member gave, and the sequence shards the experts got (the
  // combine sends back those: with expert tensor parallelism, reduce-scattered over the expert-TP group).
  struct Dispatched {
    std::vector<Origin> origins;
    IdSet shards;
    int num_shards = 1;
  };
  // (kind, layer, batches of every member) of a dispatch -> what it gave
  std::map<std::tuple<TensorKind, int, IdSet>, Dispatched> dispatched_;
};

}  // namespace trainsim
