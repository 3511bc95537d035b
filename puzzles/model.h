// The puzzles' Model: one rank's view of training, with the original API (srush/LLM-Training-Puzzles
// lib.py) on top of the simulator. Every compute call and every message is one Op in the run's trace;
// every precondition of the original is checked and a violation is a PuzzleError naming the rank, the op,
// the layer, the source line and what was wrong.
#pragma once

#include <concepts>
#include <map>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "puzzles/store.h"
#include "puzzles/tensors.h"
#include "sim/rank.h"

namespace trainsim::puzzles {

/// A broken rule of the puzzles (missing batch, incomplete weight, wrong layer, local variable...).
struct PuzzleError : SimError {
  using SimError::SimError;
};

/// The store that holds tensors of `kind`: "weights", "opt_states", "activations", "grad_activations",
/// "grad_weights".
const char* store_name(TensorKind kind);

/// A message taken by Model::receive(); converts to the puzzle type that was sent.
class Received {
 public:
  Received(Tensor t, int rank, int src, std::string where = {})
      : t_(std::move(t)), rank_(rank), src_(src), where_(std::move(where)) {}
  /// The tensor as T. Throws PuzzleError naming the rank, the receive's line, what came and the store it
  /// belongs in when the sender sent another kind.
  template <std::derived_from<Tensor> T>
  operator T() const {  // NOLINT(google-explicit-constructor)
    if (t_.kind != T().kind) wrong_store(T().kind);
    return T(t_);
  }
  const Tensor& tensor() const { return t_; }
  int source() const { return src_; }

 private:
  [[noreturn]] void wrong_store(TensorKind stored_as) const;
  Tensor t_;
  int rank_;
  int src_;
  std::string where_;  ///< the receive's file:line
};

/// The second operand of adding weight grads (`grad_weights[l] + grad_weights[{l, b}]`): a grad, or a store
/// entry holding one, with the line of the learner's code that adds them (for the error of adding a batch twice).
class GradTerm {
 public:
  // NOLINTNEXTLINE(google-explicit-constructor): an operand, converted where it is written
  GradTerm(const WeightGrad& g, std::source_location w = std::source_location::current()) : grad_(&g), where_(w) {}
  // NOLINTNEXTLINE(google-explicit-constructor)
  GradTerm(const Store<WeightGrad>::Slot& s, std::source_location w = std::source_location::current())
      : slot_(&s), where_(w) {}
  /// The grad (reading an empty store entry throws its SimError).
  const WeightGrad& grad() const { return slot_ ? slot_->get() : *grad_; }
  /// "puzzles/exercises/ddp.cpp:40".
  std::string at() const { return fmt::format("{}:{}", where_.file_name(), where_.line()); }

 private:
  const WeightGrad* grad_ = nullptr;
  const Store<WeightGrad>::Slot* slot_ = nullptr;
  std::source_location where_;
};

/// Sum of two weight grads over disjoint batch sets of the same layer and shards (gradient accumulation).
/// Adding a batch's grad twice, or grads of other layers or shards, throws PuzzleError naming the op, the
/// line and what to do (the simulator adds the rank).
WeightGrad operator+(const WeightGrad& a, const GradTerm& b);

/// One rank of a puzzle run.
class Model {
 public:
  using loc = std::source_location;

  /// The five stores, in the puzzles' order: weights, opt_states, activations, grad_activations, grad_weights.
  struct Storage {
    Store<Weight> weights;
    Store<OptState> opt_states;
    Store<Activation> activations;
    Store<ActivationGrad> grad_activations;
    Store<WeightGrad> grad_weights;
  };

  /// Rank `rank` training a `layers`-layer model on `batches` batches. With tensor parallelism (`tp` > 1) the
  /// ranks form TP groups of `tp` consecutive ranks, the world's group 1 + rank / tp (the runner registers
  /// them); the rank holds slice rank % tp of each layer. With expert parallelism (`ep` > 1) every layer is a
  /// Mixture-of-Experts layer and the ranks form EP groups of `ep` consecutive ranks, the world's group
  /// 1 + rank / ep; the rank holds expert slice rank % ep of each layer's experts. Throws std::invalid_argument
  /// when layers or batches are below 1, tp or ep is outside its range (1..Tensor::kMaxTpSize, ..kMaxEpSize) or
  /// does not divide the world size, or both are above 1.
  Model(Rank rank, int layers, int batches, int tp = 1, int ep = 1);
  Model(const Model&) = delete;

  int rank() const { return rank_.id(); }
  /// World size (the puzzles' RANKS).
  int ranks() const { return rank_.world_size(); }
  /// Number of layers (LAYERS).
  int layers() const { return layers_; }
  /// Number of batches (BATCHES).
  int batches() const { return batches_; }
  /// Tensor parallelism: the ranks in this rank's TP group (the TP degree t); 1 without TP.
  int tp() const { return tp_; }
  /// This rank's place in its TP group, 0..tp()-1: the slice of each layer it holds.
  int tp_rank() const { return rank() % tp_; }
  /// Expert parallelism: the ranks in this rank's EP group (the EP degree e); 1 without experts.
  int ep() const { return ep_; }
  /// This rank's place in its EP group, 0..ep()-1: the expert slice of each layer it holds.
  int ep_rank() const { return rank() % ep_; }
  /// The five stores: `auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();`
  Storage& storage() { return storage_; }
  /// Memory held in the five stores, in puzzle units.
  double memory() const { return rank_.memory().total(); }
  /// Time of this rank's next op, in steps.
  double time() const { return to_seconds(rank_.clock()); }

  /// Fresh (step 0) weight and optimizer state of `layer`, shard `shard` of `total`.
  std::pair<Weight, OptState> load_weights(int layer, int shard = 0, int total = 1, loc w = loc::current());
  /// Fresh (step 0) TP slice `slice` of `total` of `layer`'s weight and optimizer state ("W2<1/4>", "O2<1/4>":
  /// Megatron-LM's split of a layer's matrices over a TP group, 1/total of the memory). A forward with it
  /// gives a partial sum, a backward a slice's weight grad and a partial input grad. Throws PuzzleError when
  /// the puzzle has no tensor parallelism, `total` is not its TP degree or `slice` is out of range.
  std::pair<Weight, OptState> load_slice(int layer, int slice, int total, loc w = loc::current());
  /// Fresh (step 0) expert slice `slice` of `total` of `layer` and its optimizer state ("W2<e1/4>", "O2<e1/4>":
  /// the experts EP rank `slice` holds, 1/total of a layer's memory). A forward with it runs those experts on the
  /// tokens a dispatch gave this rank. Throws PuzzleError when the puzzle has no experts, `total` is not its EP
  /// degree or `slice` is out of range.
  std::pair<Weight, OptState> load_experts(int layer, int slice, int total, loc w = loc::current());
  /// The model input (Activation 0) for `batches`.
  Activation get_activation(const std::vector<int>& batches, loc w = loc::current());
  /// Forward of `layer`: needs Activation `layer` and the complete weight of `layer`; gives Activation layer+1.
  /// Takes one step per batch. With a TP slice of the weight it gives this slice's partial sum of Activation
  /// layer+1 ("A2{0-3}<+1/4>", to all-reduce over the TP group before anything reads it), and at the last
  /// layer this slice of the logits ("A4{0-3}<1/4>", which the loss reads as it is); it takes 1/t of the
  /// time. Reading a partial sum is a PuzzleError naming the line.
  /// Mixture of Experts (Model::ep > 1): with the layer's weight it runs attention and the router and gives the
  /// routed tokens ("A2{0}<routed>"), which only model.alltoall reads (the dispatch); with an expert slice
  /// (load_experts) it runs those experts on the tokens the dispatch gave ("A2{0-3}<e1/4>") and gives their
  /// output ("A2{0-3}<e1/4:out>", for the combine), in 1/e of a step per batch. Reading routed tokens or an
  /// expert slice's tokens anywhere else is a PuzzleError naming the line and the all-to-all to add.
  Activation forward(int layer, const Activation& inp, const Weight& weight, loc w = loc::current());
  /// Backward of `layer`: needs Activation `layer`, ActivationGrad layer+1 for the same batches and the
  /// complete weight; gives the WeightGrad of `layer` and ActivationGrad `layer`. One step per batch. With a
  /// TP slice of the weight it gives the slice's weight grad and this slice's partial sum of ActivationGrad
  /// `layer`, in 1/t of the time. Mixture of Experts: with an expert slice, the tokens and their dispatched
  /// grad give the slice's weight grad and the grad of its tokens (for the combine); with the layer's weight,
  /// the combined grad of the routed tokens ("dA2{0}<routed>") gives the layer's weight grad and input grad.
  std::pair<WeightGrad, ActivationGrad> backward(int layer, const Activation& inp, const ActivationGrad& grad,
                                                 const Weight& weight, loc w = loc::current());
  /// Loss at the last layer: Activation L gives ActivationGrad L. Takes no time. A vocabulary slice of the
  /// logits gives the same slice of the grad (Megatron-LM's vocabulary-parallel cross-entropy).
  ActivationGrad loss(const Activation& inp, loc w = loc::current());
  /// Optimizer step: needs the grad of every batch for the shards updated, and weight and optimizer state
  /// at the same step; gives both one step later. Takes 0.5.
  std::pair<Weight, OptState> update(int layer, const WeightGrad& weight_grad, const Weight& weight,
                                     const OptState& opt_state, loc w = loc::current());
  /// A made-up weight grad of `layer` for `batches` (the puzzles' fake_grad; with no batches, a zero grad).
  WeightGrad fake_grad(int layer, const std::vector<int>& batches, loc w = loc::current());

  /// Sum of every rank's weight grad (batch sets unite). 0.3 after the last rank arrives.
  asio::awaitable<WeightGrad> allreduce(const WeightGrad& v, int layer, loc w = loc::current());
  /// Tensor parallelism: the sum of the partial sums of this rank's TP group, the complete activation (of
  /// layer `layer`'s forward) or activation grad (of its backward). 0.3 after the last member arrives. Throws
  /// PuzzleError when `v` is not a partial sum or `layer` is not the layer that made it.
  asio::awaitable<Activation> allreduce(const Activation& v, int layer, loc w = loc::current());
  asio::awaitable<ActivationGrad> allreduce(const ActivationGrad& v, int layer, loc w = loc::current());
  /// Expert parallelism: the all-to-all of layer `layer` over this rank's EP group. Given the routed tokens
  /// (or the layer output's grad), it sends each token to the rank of its experts and gives this rank the
  /// tokens of every member's batches for its expert slice (dispatch); given an expert slice's output (or its
  /// tokens' grad), it sends it back and gives this rank its own batches (combine: the layer's output, or the
  /// routed grad the layer's backward reads). 0.3 after the last member arrives. Throws PuzzleError when the
  /// puzzle has no experts or `v` is not one of those.
  asio::awaitable<Activation> alltoall(const Activation& v, int layer, loc w = loc::current());
  asio::awaitable<ActivationGrad> alltoall(const ActivationGrad& v, int layer, loc w = loc::current());
  /// Union of every rank's shards (Weight, OptState or WeightGrad). 0.3 after the last rank arrives.
  asio::awaitable<Weight> allgather(const Weight& v, int layer, loc w = loc::current()) { return gather_as<Weight>(v, layer, w); }
  asio::awaitable<OptState> allgather(const OptState& v, int layer, loc w = loc::current()) { return gather_as<OptState>(v, layer, w); }
  asio::awaitable<WeightGrad> allgather(const WeightGrad& v, int layer, loc w = loc::current()) { return gather_as<WeightGrad>(v, layer, w); }
  /// Sum over ranks, then this rank keeps shard `rank` of `ranks`. 0.3 after the last rank arrives.
  asio::awaitable<WeightGrad> scatterreduce(const WeightGrad& v, int layer, loc w = loc::current());
  /// Sends `v` to rank `dst` (0.2 on this rank); waits while `dst`'s one-slot queue is full.
  asio::awaitable<void> pass_to(int dst, const Tensor& v, loc w = loc::current());
  /// Takes the next message sent to this rank, from any rank (0.2 from max(own time, sender's time)).
  asio::awaitable<Received> receive(loc w = loc::current());
  /// Records `weight` as this rank's final weight of `layer` (checked by check()).
  void set_final_weight(int layer, const Weight& weight, loc w = loc::current());
  /// Calls `f(before, after)` after every change of the five stores (recording a schedule uses it).
  void set_store_observer(StoreHook f) { store_observer_ = std::move(f); }
  /// Records `experts` (an expert slice, load_experts) as this rank's final experts of `layer`.
  void set_final_experts(int layer, const Weight& experts, loc w = loc::current());
  /// Final weights set so far, by layer.
  const std::map<int, Weight>& final_weights() const { return final_weights_; }

  /// Cross-rank check of a finished run: every layer's final weights, combined over the ranks, are complete
  /// (with tensor parallelism: every TP slice, each complete; with experts: every expert slice too) and were
  /// each updated exactly once. Throws PuzzleError naming the layer and rank.
  static void check(const std::vector<Model*>& models);

 private:
  std::string where(const loc& w) const;
  [[noreturn]] void fail(const char* op, int layer, const loc& w, const std::string& what) const;
  void check_layer(const char* op, int layer, const loc& w) const;
  void check_held(const Tensor& t, const char* op, int layer, const loc& w) const;
  // A partial sum read as complete: a PuzzleError saying to all-reduce it first.
  void check_not_partial(const Tensor& t, const char* op, int layer, const loc& w) const;
  // Routed tokens or an expert slice's tokens read where they cannot be: a PuzzleError naming the all-to-all.
  void check_not_routed(const Tensor& t, const char* op, int layer, const loc& w) const;
  asio::awaitable<Tensor> ep_alltoall(const Tensor& v, int layer, loc w);
  // The TP all-reduce of a partial sum `v` made by `layer`.
  asio::awaitable<Tensor> tp_allreduce(const Tensor& v, int layer, loc w);
  void on_store(const Tensor* before, const Tensor* after);
  Op make_op(OpKind kind, int layer, const loc& w) const;
  // Checks the algebra and that every input is held, then executes; returns the op.
  Op run_compute(OpKind kind, int layer, TensorList reads, TensorList writes, const loc& w);
  template <typename T>
  asio::awaitable<T> gather_as(T v, int layer, loc w) {
    check_held(v, "allgather", layer, w);
    std::string at = where(w);
    Tensor out = co_await rank_.all_gather(std::move(v), layer, 0, std::move(at));
    co_return T(out);
  }

  Rank rank_;
  int layers_;
  int batches_;
  int tp_;
  int ep_;
  Storage storage_;
  std::map<int, Weight> final_weights_;
  std::map<int, Weight> final_experts_;
  StoreHook store_observer_;
};

/// Thrown by an exercise that is not written yet.
struct NotImplemented : PuzzleError {
  using PuzzleError::PuzzleError;
};

/// Throws NotImplemented pointing at the exercise file to edit.
[[noreturn]] void not_implemented(std::source_location w = std::source_location::current());

}  // namespace trainsim::puzzles
