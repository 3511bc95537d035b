// The Op record: the one contract between the parts (DESIGN §1).
//
// Every primitive a rank performs is one Op. The simulator executes Ops; timelines, traces and schedule
// files are made from the Ops it executed; the executor replays them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

// Boost.Container's small_vector: an op's few tensors held inline, without a heap allocation per list.
#include <boost/container/small_vector.hpp>

#include "sim/idset.h"
#include "sim/tensor.h"

namespace trainsim {

/// What an Op does.
enum class OpKind : std::uint8_t {
  Load,            ///< bring tensors into memory from outside (initial weights, optimizer state, input data)
  Forward,         ///< forward of one layer for a batch set
  Backward,        ///< full backward of one layer (input grad and weight grad)
  BackwardInput,   ///< backward, input-grad half only ("I" / "B" in zero-bubble schedules)
  BackwardWeight,  ///< backward, weight-grad half only ("W")
  Loss,            ///< loss at the last layer: activation L -> activation grad L
  Update,          ///< optimizer step of one layer (the shards held)
  Accumulate,      ///< local sum of weight grads
  Free,            ///< drop tensors from memory
  Send,            ///< point-to-point send to `peer`
  Recv,            ///< point-to-point receive from `peer` (-1: any source)
  AllGather,       ///< collective over `group`: union of shards
  ReduceScatter,   ///< collective over `group`: sum over batches, keep one shard
  AllReduce,       ///< collective over `group`: sum over batches
  Barrier,         ///< collective over `group`: synchronise only
  Broadcast,       ///< collective over `group` rooted at `peer`: the root's tensor to every member (ncclBroadcast)
  Reduce,          ///< collective over `group` rooted at `peer`: sum over batches, to the root only (ncclReduce)
  AllToAll,        ///< collective over an EP `group`: each member's tokens to the ranks of their experts (dispatch),
                   ///< or the experts' outputs back to the tokens' ranks (combine); sim/all_to_all.h
};

/// Lower-case name used in text, traces and errors ("forward", "all-gather", ...).
const char* op_name(OpKind k);
/// The name the LLM Training Puzzles give the event ("forward", "pass", "allgather", "scatterreduce", ...).
const char* puzzle_event_name(OpKind k);
/// True for ops that take time and are sampled for memory (not Load, Accumulate, Free).
constexpr bool is_timed(OpKind k) { return k != OpKind::Load && k != OpKind::Accumulate && k != OpKind::Free; }
/// True for Send and Recv.
constexpr bool is_p2p(OpKind k) { return k == OpKind::Send || k == OpKind::Recv; }
/// True for AllGather, ReduceScatter, AllReduce, Barrier, Broadcast, Reduce, AllToAll.
constexpr bool is_collective(OpKind k) {
  return k == OpKind::AllGather || k == OpKind::ReduceScatter || k == OpKind::AllReduce || k == OpKind::Barrier ||
         k == OpKind::Broadcast || k == OpKind::Reduce || k == OpKind::AllToAll;
}
/// True for the rooted collectives, Broadcast and Reduce: their `peer` is the root, a global rank that is a
/// member of the group (docs/schedule-format.md, "Broadcast and reduce").
constexpr bool is_rooted(OpKind k) { return k == OpKind::Broadcast || k == OpKind::Reduce; }
/// True for Forward, Backward, BackwardInput, BackwardWeight, Loss, Update.
constexpr bool is_compute(OpKind k) {
  return k == OpKind::Forward || k == OpKind::Backward || k == OpKind::BackwardInput ||
         k == OpKind::BackwardWeight || k == OpKind::Loss || k == OpKind::Update;
}

/// The tensors an op reads or writes (same interface as std::vector): one is held inline, more go to the
/// heap. Sends, receives, loads, collectives and most frees carry one tensor per list; an inline second
/// slot made every op larger (336 bytes instead of 240, with 48-byte tensors then) for fewer heap lists in
/// forwards, backwards and accumulates: 5.5 GB instead of 5.0 GB peak for the 16,384-rank pp-fsdp
/// `gen --sim` (bench/README.md). With 40-byte tensors a list was 64 bytes and an op 216; the TP fields
/// (issue 19) make a tensor 48 bytes, a list 72 and an op 232; the EP fields (issue 35) a tensor 56, a list
/// 80 and an op 248.
using TensorList = boost::container::small_vector<Tensor, 1>;

/// One primitive performed by one rank.
struct Op {
  OpKind kind = OpKind::Forward;
  int rank = 0;
  int layer = -1;               ///< layer the op works on (-1 when none)
  IdSet batches;                ///< batch (microbatch) set, for compute ops
  IdSet shards;                 ///< shard set, for update and collectives
  int num_shards = 1;
  int peer = -1;                ///< Send: destination; Recv: source, -1 for any source; Broadcast, Reduce: root
  int group = 0;                ///< collectives: group id (0 = all ranks)
  int stream = 0;               ///< 0 = compute stream; 1.. = communication streams
  TensorList reads;             ///< tensors that must be resident when the op starts
  TensorList writes;            ///< tensors the op produces
  std::string where;            ///< source of the op: "file.cpp:42" for programs, "file.sched:7" for schedules

  /// One-line description for errors and labels: "forward layer 2 batches {0-3}".
  std::string describe() const;
  /// " (file.sched:7)": where the op came from, as errors append it; "" when `where` is empty.
  std::string where_suffix() const;
  /// "rank 2: forward layer 1 batches {0} (file.sched:7)": the op as every error about it names it.
  std::string label() const;
};

/// Mixture of Experts: the expert slice whose weights or optimizer state `op` reads (`W3<e1/4>`, `O3<e1/4>`: the
/// op is an expert slice's forward, backward or update), or null.
const Tensor* expert_weight(const Op& op);

}  // namespace trainsim
