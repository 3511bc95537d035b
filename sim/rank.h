// What a rank program sees of the simulated cluster: its id, its clock, its memory, and the primitives.
// Modelled on SimGrid's s4u actors: the simulated program reads like the real one.
//
//   Task program(Rank& me) {
//     co_await me.send(me.id() + 1, activation_tensor(1, {0}));
//     Message m = co_await me.receive();           // any source
//     Tensor g = co_await me.all_reduce(grad, 3);  // every rank, layer tag 3
//   }
#pragma once

#include <string>
#include <utility>

#include "sim/world.h"

namespace trainsim {

/// Handle of one rank in a World. Cheap to copy.
class Rank {
 public:
  Rank(World& world, int id) : world_(&world), id_(id) {}

  int id() const { return id_; }
  int world_size() const { return world_->world_size(); }
  /// Time this rank's next op would start.
  Time clock() const { return world_->clock(id_); }
  World& world() const { return *world_; }
  /// This rank's resident tensors.
  MemoryLedger& memory() const { return world_->ledger(id_); }

  /// Executes a timed local op (forward, backward, loss, update...) on this rank.
  void execute(Op op) const {
    op.rank = id_;
    world_->execute(std::move(op));
  }
  /// Sends `t` to rank `dst` (puzzle pass_to). See World::send.
  Task send(int dst, Tensor t, std::string where = {}) const {
    return world_->send(make(OpKind::Send, -1, dst, 0, std::move(where)), std::move(t));
  }
  /// Receives from `src`, or from any rank when src is -1. See World::recv.
  asio::awaitable<Message> receive(int src = -1, std::string where = {}) const {
    return world_->recv(make(OpKind::Recv, -1, src, 0, std::move(where)));
  }
  /// Sum of every member's weight grad (batch sets unite). `layer` tags the op.
  asio::awaitable<Tensor> all_reduce(Tensor t, int layer = -1, int group = 0, std::string where = {}) const {
    return world_->collective(make(OpKind::AllReduce, layer, -1, group, std::move(where)), std::move(t));
  }
  /// Union of every member's shards.
  asio::awaitable<Tensor> all_gather(Tensor t, int layer = -1, int group = 0, std::string where = {}) const {
    return world_->collective(make(OpKind::AllGather, layer, -1, group, std::move(where)), std::move(t));
  }
  /// Sum over members, then shard i of n to the i-th member (puzzle scatterreduce).
  asio::awaitable<Tensor> reduce_scatter(Tensor t, int layer = -1, int group = 0, std::string where = {}) const {
    return world_->collective(make(OpKind::ReduceScatter, layer, -1, group, std::move(where)), std::move(t));
  }
  /// The root's `t` to every member (ncclBroadcast): `root` is a global rank in the group; the others' `t` is
  /// ignored (pass Tensor{}). Every member gets the root's tensor.
  asio::awaitable<Tensor> broadcast(Tensor t, int root, int layer = -1, int group = 0, std::string where = {}) const {
    return world_->collective(make(OpKind::Broadcast, layer, root, group, std::move(where)), std::move(t));
  }
  /// Sum of every member's weight grad to `root` only (ncclReduce): the root gets the sum, the others their
  /// own `t` back.
  asio::awaitable<Tensor> reduce(Tensor t, int root, int layer = -1, int group = 0, std::string where = {}) const {
    return world_->collective(make(OpKind::Reduce, layer, root, group, std::move(where)), std::move(t));
  }
  /// Expert parallelism's all-to-all over an EP group (sim/all_to_all.h): routed tokens (or an output's grad) go
  /// to the ranks of their experts, member j getting expert slice j's tokens of every member's batches
  /// (dispatch); an expert slice's output goes back, each member getting its own batches (combine).
  asio::awaitable<Tensor> all_to_all(Tensor t, int layer, int group, std::string where = {}) const {
    return world_->collective(make(OpKind::AllToAll, layer, -1, group, std::move(where)), std::move(t));
  }
  /// Waits until every member arrives.
  Task barrier(int group = 0, std::string where = {}) const {
    Op op = make(OpKind::Barrier, -1, -1, group, std::move(where));
    Tensor none;  // (declared outside co_await: g++ 12 mis-compiles aggregate temporaries inside it)
    co_await world_->collective(std::move(op), std::move(none));
  }

 private:
  Op make(OpKind kind, int layer, int peer, int group, std::string where) const {
    Op op;
    op.kind = kind;
    op.rank = id_;
    op.layer = layer;
    op.peer = peer;
    op.group = group;
    op.stream = 0;  // one stream per rank, as in the puzzles
    op.where = std::move(where);
    return op;
  }

  World* world_;
  int id_;
};

}  // namespace trainsim
