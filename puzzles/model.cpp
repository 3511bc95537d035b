#include "puzzles/model.h"

#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "sim/algebra.h"

namespace trainsim::puzzles {

namespace {
IdSet batch_set(const std::vector<int>& batches, int total, const std::string& ctx) {
  IdSet s;
  for (int b : batches) {
    if (b < 0 || b >= total) throw PuzzleError(fmt::format("{}: batch {} is out of range 0..{}", ctx, b, total - 1));
    if (s.contains(b)) throw PuzzleError(fmt::format("{}: batch {} is listed twice", ctx, b));
    s.insert(b);
  }
  return s;
}
}  // namespace

const char* store_name(TensorKind kind) {
  switch (kind) {
    case TensorKind::Weight: return "weights";
    case TensorKind::OptState: return "opt_states";
    case TensorKind::Activation: return "activations";
    case TensorKind::ActivationGrad: return "grad_activations";
    case TensorKind::WeightGrad: return "grad_weights";
  }
  return "?";
}

void Received::wrong_store(TensorKind stored_as) const {
  const char* kind = long_name(t_.kind);
  const char* article = std::string_view("aeiou").find(kind[0]) == std::string_view::npos ? "a" : "an";
  throw PuzzleError(fmt::format("rank {}: receive{}: the message from rank {} is {} {} ({}), but it was stored in {}; "
                                "store it in {} ({}[...] = co_await model.receive())",
                                rank_, where_.empty() ? "" : " at " + where_, src_, article, kind, t_.str(),
                                store_name(stored_as), store_name(t_.kind), store_name(t_.kind)));
}

WeightGrad operator+(const WeightGrad& a, const GradTerm& b) {
  const WeightGrad& g = b.grad();
  try {
    return WeightGrad(trainsim::sum(a, g));
  } catch (const TensorError& e) {
    std::string hint = a.batches.intersects(g.batches)
                           ? "each batch's grad is added once: add a new batch's grad to the running sum, not the "
                             "sum to itself or a batch already in it"
                           : "add grads of one layer and the same shards";
    // Not a SimError: the simulator names the rank ("rank 2: ...").
    throw std::invalid_argument(fmt::format("add weight grads (+) layer {} at {}: {}; {}", a.layer, b.at(), e.what(), hint));
  }
}

Model::Model(Rank rank, int layers, int batches, int tp, int ep)
    : rank_(rank),
      layers_(layers),
      batches_(batches),
      tp_(tp),
      ep_(ep),
      storage_{Store<Weight>("weights", rank.id(), [this](auto* b, auto* a) { on_store(b, a); }),
               Store<OptState>("opt_states", rank.id(), [this](auto* b, auto* a) { on_store(b, a); }),
               Store<Activation>("activations", rank.id(), [this](auto* b, auto* a) { on_store(b, a); }),
               Store<ActivationGrad>("grad_activations", rank.id(), [this](auto* b, auto* a) { on_store(b, a); }),
               Store<WeightGrad>("grad_weights", rank.id(), [this](auto* b, auto* a) { on_store(b, a); })} {
  if (layers < 1 || batches < 1)
    throw std::invalid_argument(fmt::format("a model needs at least one layer and one batch (got {} and {})", layers, batches));
  if (tp < 1 || tp > Tensor::kMaxTpSize || rank.world_size() % tp != 0)
    throw std::invalid_argument(fmt::format("a TP degree of {} does not split {} ranks into TP groups (1 to {}, dividing "
                                            "the world size)",
                                            tp, rank.world_size(), Tensor::kMaxTpSize));
  if (ep < 1 || ep > Tensor::kMaxEpSize || rank.world_size() % ep != 0)
    throw std::invalid_argument(fmt::format("an EP degree of {} does not split {} ranks into EP groups (1 to {}, dividing "
                                            "the world size)",
                                            ep, rank.world_size(), Tensor::kMaxEpSize));
  if (tp > 1 && ep > 1) throw std::invalid_argument("a puzzle has tensor or expert parallelism, not both");
}

void Model::on_store(const Tensor* before, const Tensor* after) {
  if (before) rank_.memory().remove(*before);
  if (after) rank_.memory().add(*after);
  if (store_observer_) store_observer_(before, after);
}

std::string Model::where(const loc& w) const { return fmt::format("{}:{}", w.file_name(), w.line()); }

void Model::fail(const char* op, int layer, const loc& w, const std::string& what) const {
  std::string layer_part = layer >= 0 ? fmt::format(" layer {}", layer) : std::string();
  throw PuzzleError(fmt::format("rank {}: {}{} at {}: {}", rank(), op, layer_part, where(w), what));
}

void Model::check_layer(const char* op, int layer, const loc& w) const {
  if (layer < 0 || layer >= layers_) fail(op, layer, w, fmt::format("no such layer (layers 0..{})", layers_ - 1));
}

void Model::check_held(const Tensor& t, const char* op, int layer, const loc& w) const {
  if (rank_.memory().count(t) == 0)
    fail(op, layer, w,
         fmt::format("its input {} ({}) is not held in any store; the puzzles keep every tensor in the five "
                     "stores, so it counts towards memory (no local variables)",
                     t.str(), long_name(t.kind)));
}

void Model::check_not_partial(const Tensor& t, const char* op, int layer, const loc& w) const {
  if (!t.partial) return;
  // The layer that made it and the all-reduce that completes it, as the learner would write them.
  const bool act = t.kind == TensorKind::Activation;
  const int maker = act ? t.layer - 1 : t.layer;
  const char* store = store_name(t.kind);
  fail(op, layer, w,
       fmt::format("its input {} is a partial sum: this rank's term of the {} of layer {} on its TP slice, not the "
                   "{}; all-reduce it over the TP group before anything reads it ({}[{}] = co_await "
                   "model.allreduce({}[{}], {}))",
                   t.str(), act ? "output" : "input grad", maker, long_name(t.kind), store, t.layer, store, t.layer,
                   maker));
}

void Model::check_not_routed(const Tensor& t, const char* op, int layer, const loc& w) const {
  if (t.route == Route::None && !t.expert()) return;
  const bool act = t.kind == TensorKind::Activation;
  const int moe = t.layer - 1, out = t.layer;  // the MoE layer that made the tokens, and its output's index
  const char* store = store_name(t.kind);
  if (t.route == Route::Routed && act)
    fail(op, layer, w,
         fmt::format("its input {} holds this rank's tokens routed to layer {}'s experts, which have not run: "
                     "dispatch them to the experts' ranks ({}[{{{}, 1}}] = co_await model.alltoall({}[{}], {})), run "
                     "this rank's experts on what arrives ({}[{{{}, 2}}] = model.forward({}, {}[{{{}, 1}}], "
                     "weights[{{{}, 1}}])) and combine their output ({}[{}] = co_await model.alltoall({}[{{{}, 2}}], "
                     "{})) before anything reads it",
                     t.str(), moe, store, out, store, out, moe, store, out, moe, store, out, moe, store, out, store,
                     out, moe));
  fail(op, layer, w,
       fmt::format("its input {} is {} tokens of expert slice {} of {} (layer {}'s experts), not this rank's {}: "
                   "{} them with model.alltoall({}[...], {}) first",
                   t.str(), t.route == Route::ExpertOut ? "the output for the" : "the", t.ep_index, t.ep_size, moe,
                   long_name(t.kind), t.route == Route::ExpertOut ? "combine" : "run the experts on them, then combine",
                   store, moe));
}

Op Model::make_op(OpKind kind, int layer, const loc& w) const {
  Op op;
  op.kind = kind;
  op.rank = rank();
  op.layer = layer;
  op.where = where(w);
  return op;
}

std::pair<Weight, OptState> Model::load_weights(int layer, int shard, int total, loc w) {
  check_layer("load_weights", layer, w);
  if (total < 1 || shard < 0 || shard >= total)
    fail("load_weights", layer, w, fmt::format("shard {} of {} is out of range", shard, total));
  return {Weight(weight_tensor(layer, {shard}, total)), OptState(opt_state_tensor(layer, {shard}, total))};
}

std::pair<Weight, OptState> Model::load_slice(int layer, int slice, int total, loc w) {
  check_layer("load_slice", layer, w);
  if (tp_ == 1)
    fail("load_slice", layer, w, "this puzzle has no tensor parallelism (its TP degree is 1): load whole weights or shards "
                                 "with load_weights");
  if (total != tp_)
    fail("load_slice", layer, w, fmt::format("slice {} of {}: this puzzle's TP groups have {} ranks; load slice "
                                             "model.tp_rank() of model.tp()",
                                             slice, total, tp_));
  if (slice < 0 || slice >= total)
    fail("load_slice", layer, w, fmt::format("slice {} of {} is out of range", slice, total));
  return {Weight(tp_slice(weight_tensor(layer), slice, total)), OptState(tp_slice(opt_state_tensor(layer), slice, total))};
}

std::pair<Weight, OptState> Model::load_experts(int layer, int slice, int total, loc w) {
  check_layer("load_experts", layer, w);
  if (ep_ == 1)
    fail("load_experts", layer, w, "this puzzle has no experts (its EP degree is 1): load weights with load_weights");
  if (total != ep_)
    fail("load_experts", layer, w, fmt::format("slice {} of {}: this puzzle's EP groups have {} ranks; load slice "
                                               "model.ep_rank() of model.ep()",
                                               slice, total, ep_));
  if (slice < 0 || slice >= total)
    fail("load_experts", layer, w, fmt::format("slice {} of {} is out of range", slice, total));
  return {Weight(expert_slice(weight_tensor(layer), slice, total)),
          OptState(expert_slice(opt_state_tensor(layer), slice, total))};
}

Activation Model::get_activation(const std::vector<int>& batches, loc w) {
  return Activation(activation_tensor(0, batch_set(batches, batches_, fmt::format("rank {}: get_activation at {}", rank(), where(w)))));
}

Op Model::run_compute(OpKind kind, int layer, TensorList reads, TensorList writes, const loc& w) {
  Op op = make_op(kind, layer, w);
  for (const Tensor& t : reads)
    if (t.kind == TensorKind::Activation) op.batches = t.batches;
  op.reads = std::move(reads);
  op.writes = std::move(writes);
  const char* name = puzzle_event_name(kind);
  int shown_layer = kind == OpKind::Loss ? -1 : layer;
  if (std::string problem = algebra_problem(op, layers_, batches_); !problem.empty()) fail(name, shown_layer, w, problem);
  for (const Tensor& t : op.reads) check_held(t, name, shown_layer, w);
  if (kind == OpKind::Update) {
    op.shards = op.writes.front().shards;
    op.num_shards = op.writes.front().num_shards;
  }
  Op copy = op;
  rank_.execute(std::move(op));
  return copy;
}

Activation Model::forward(int layer, const Activation& inp, const Weight& weight, loc w) {
  check_layer("forward", layer, w);
  check_not_partial(inp, "forward", layer, w);
  if (weight.expert()) {
    // Mixture of Experts: this rank's experts on the tokens the dispatch gave it (the algebra checks the rest).
    if (inp.route != Route::ExpertIn)
      fail("forward", layer, w,
           fmt::format("the experts {} run on the tokens a dispatch gives this rank ({}[{{{}, 1}}] = co_await "
                       "model.alltoall({}[{}], {}), from the routed tokens of model.forward({}, ..., weights[{}])), "
                       "not on {}",
                       weight.str(), store_name(inp.kind), layer + 1, store_name(inp.kind), layer + 1, layer, layer,
                       layer, inp.str()));
    Op op = run_compute(OpKind::Forward, layer, {inp, weight},
                        {routed_as(activation_tensor(layer + 1, inp.batches), Route::ExpertOut, weight.ep_index, weight.ep_size)}, w);
    return Activation(op.writes[0]);
  }
  check_not_routed(inp, "forward", layer, w);
  if (ep_ > 1) {
    // Every layer of an expert-parallel puzzle is an MoE layer: attention and the router give the routed tokens.
    Op op = run_compute(OpKind::Forward, layer, {inp, weight}, {routed_as(activation_tensor(layer + 1, inp.batches), Route::Routed)}, w);
    return Activation(op.writes[0]);
  }
  // A TP slice's output is its partial sum (a row-parallel matrix); the last layer's, its vocabulary slice of
  // the logits (the LM head is column-parallel). The algebra checks the rest (sim/algebra.cpp).
  Tensor out = activation_tensor(layer + 1, inp.batches);
  if (weight.tp_sliced())
    out = layer + 1 == layers_ ? tp_slice(out, weight.tp_index(), weight.tp_size)
                               : tp_partial(out, weight.tp_index(), weight.tp_size);
  Op op = run_compute(OpKind::Forward, layer, {inp, weight}, {out}, w);
  return Activation(op.writes[0]);
}

std::pair<WeightGrad, ActivationGrad> Model::backward(int layer, const Activation& inp, const ActivationGrad& grad,
                                                      const Weight& weight, loc w) {
  check_layer("backward", layer, w);
  check_not_partial(inp, "backward", layer, w);
  check_not_partial(grad, "backward", layer, w);
  if (weight.expert()) {
    // The experts' backward: their weight grad, and the grad of their tokens, to combine.
    Op op = run_compute(OpKind::Backward, layer, {inp, grad, weight},
                        {expert_slice(weight_grad_tensor(layer, inp.batches), weight.ep_index, weight.ep_size),
                         routed_as(activation_grad_tensor(layer + 1, inp.batches), Route::ExpertOut, weight.ep_index,
                                   weight.ep_size)},
                        w);
    return {WeightGrad(op.writes[0]), ActivationGrad(op.writes[1])};
  }
  check_not_routed(inp, "backward", layer, w);
  if (ep_ > 1 && grad.route != Route::Routed) {
    if (grad.expert()) check_not_routed(grad, "backward", layer, w);
    fail("backward", layer, w,
         fmt::format("the grad {} has not been through layer {}'s experts: dispatch it (grad_activations[{{{}, 1}}] = "
                     "co_await model.alltoall(grad_activations[{}], {})), run the experts' backward on what arrives, "
                     "and combine its input grad (grad_activations[{}] = co_await "
                     "model.alltoall(grad_activations[{{{}, 2}}], {})) before the layer's backward reads it",
                     grad.str(), layer, layer + 1, layer + 1, layer, layer + 1, layer + 1, layer));
  }
  Tensor dw = weight_grad_tensor(layer, inp.batches), da = activation_grad_tensor(layer, inp.batches);
  if (weight.tp_sliced()) {
    // The conjugate of the forward: this slice's weight grad, and the input grad as its partial sum.
    dw = tp_slice(dw, weight.tp_index(), weight.tp_size);
    da = tp_partial(da, weight.tp_index(), weight.tp_size);
  }
  Op op = run_compute(OpKind::Backward, layer, {inp, grad, weight}, {dw, da}, w);
  return {WeightGrad(op.writes[0]), ActivationGrad(op.writes[1])};
}

ActivationGrad Model::loss(const Activation& inp, loc w) {
  check_not_partial(inp, "loss", -1, w);
  check_not_routed(inp, "loss", -1, w);
  Tensor grad = activation_grad_tensor(layers_, inp.batches);
  if (inp.tp_sliced()) grad = tp_slice(grad, inp.tp_index(), inp.tp_size);  // vocabulary-parallel cross-entropy
  Op op = run_compute(OpKind::Loss, layers_, {inp}, {grad}, w);
  return ActivationGrad(op.writes[0]);
}

std::pair<Weight, OptState> Model::update(int layer, const WeightGrad& weight_grad, const Weight& weight,
                                          const OptState& opt_state, loc w) {
  check_layer("update", layer, w);
  Weight nw = weight;
  nw.step += 1;
  try {
    nw = Weight(updated_weight(weight, opt_state));
  } catch (const TensorError&) {
    // run_compute reports it with the rank, op and line
  }
  OptState no = opt_state;
  no.step += 1;
  run_compute(OpKind::Update, layer, {weight_grad, weight, opt_state}, {nw, no}, w);
  return {nw, no};
}

WeightGrad Model::fake_grad(int layer, const std::vector<int>& batches, loc w) {
  check_layer("fake_grad", layer, w);
  return WeightGrad(weight_grad_tensor(layer, batch_set(batches, batches_, fmt::format("rank {}: fake_grad at {}", rank(), where(w)))));
}

asio::awaitable<WeightGrad> Model::allreduce(const WeightGrad& v, int layer, loc w) {
  check_held(v, "allreduce", layer, w);
  co_return WeightGrad(co_await rank_.all_reduce(v, layer, 0, where(w)));
}

asio::awaitable<Tensor> Model::tp_allreduce(const Tensor& v, int layer, loc w) {
  check_held(v, "allreduce", layer, w);
  const bool act = v.kind == TensorKind::Activation;
  if (tp_ == 1)
    fail("allreduce", layer, w, fmt::format("{} is not a partial sum, and this puzzle has no tensor parallelism: "
                                            "only TP partial sums of activations are all-reduced",
                                            v.str()));
  if (!v.partial)
    fail("allreduce", layer, w,
         v.tp_sliced() ? fmt::format("{} is this rank's vocabulary slice of the logits{}, not a partial sum: {} reads "
                                     "it as it is",
                                     v.str(), act ? "" : "' grad", act ? "the loss" : "the last layer's backward")
                       : fmt::format("{} is complete already, not a partial sum: only a TP slice's partial sum is "
                                     "all-reduced",
                                     v.str()));
  const int maker = act ? v.layer - 1 : v.layer;
  if (layer != maker)
    fail("allreduce", layer, w, fmt::format("{} is the {} of layer {}, not of layer {}: pass layer {}", v.str(),
                                            act ? "output" : "input grad", maker, layer, maker));
  co_return co_await rank_.all_reduce(v, layer, 1 + rank() / tp_, where(w));
}

asio::awaitable<Activation> Model::allreduce(const Activation& v, int layer, loc w) {
  co_return Activation(co_await tp_allreduce(v, layer, w));
}

asio::awaitable<ActivationGrad> Model::allreduce(const ActivationGrad& v, int layer, loc w) {
  co_return ActivationGrad(co_await tp_allreduce(v, layer, w));
}

asio::awaitable<Tensor> Model::ep_alltoall(const Tensor& v, int layer, loc w) {
  check_held(v, "alltoall", layer, w);
  if (ep_ == 1)
    fail("alltoall", layer, w, "this puzzle has no experts: only expert parallelism's tokens go through an all-to-all");
  if (v.layer != layer + 1)
    fail("alltoall", layer, w, fmt::format("{} is the {} of layer {}'s output, not of layer {}'s: pass layer {}", v.str(),
                                           v.kind == TensorKind::Activation ? "tokens" : "grad", v.layer - 1, layer,
                                           v.layer - 1));
  co_return co_await rank_.all_to_all(v, layer, 1 + rank() / ep_, where(w));
}

asio::awaitable<Activation> Model::alltoall(const Activation& v, int layer, loc w) {
  co_return Activation(co_await ep_alltoall(v, layer, w));
}

asio::awaitable<ActivationGrad> Model::alltoall(const ActivationGrad& v, int layer, loc w) {
  co_return ActivationGrad(co_await ep_alltoall(v, layer, w));
}

asio::awaitable<WeightGrad> Model::scatterreduce(const WeightGrad& v, int layer, loc w) {
  check_held(v, "scatterreduce", layer, w);
  co_return WeightGrad(co_await rank_.reduce_scatter(v, layer, 0, where(w)));
}

asio::awaitable<void> Model::pass_to(int dst, const Tensor& v, loc w) {
  check_held(v, "pass_to", -1, w);
  std::string at = where(w);
  co_await rank_.send(dst, v, std::move(at));
}

asio::awaitable<Received> Model::receive(loc w) {
  Message m = co_await rank_.receive(-1, where(w));
  co_return Received(m.payload, rank(), m.src, where(w));
}

void Model::set_final_weight(int layer, const Weight& weight, loc w) {
  check_layer("set_final_weight", layer, w);
  if (weight.layer != layer)
    fail("set_final_weight", layer, w, fmt::format("the weight is {}, not layer {}'s", weight.str(), layer));
  final_weights_.insert_or_assign(layer, weight);
}

void Model::set_final_experts(int layer, const Weight& experts, loc w) {
  check_layer("set_final_experts", layer, w);
  if (experts.layer != layer || !experts.expert())
    fail("set_final_experts", layer, w, fmt::format("{} is not an expert slice of layer {} (load_experts)", experts.str(), layer));
  final_experts_.insert_or_assign(layer, experts);
}

void Model::check(const std::vector<Model*>& models) {
  if (models.empty()) throw PuzzleError("check: no ranks");
  int layers = models.front()->layers();
  for (int l = 0; l < layers; ++l) {
    // The final weights combined per TP slice (one entry, slice 0 of 1, without tensor parallelism): slices
    // are different parameters, each combined over its shards on its own.
    std::map<std::uint64_t, Weight> slices;
    int tp = 0;
    for (const Model* m : models) {
      auto it = m->final_weights_.find(l);
      if (it == m->final_weights_.end()) continue;
      const Weight& fw = it->second;
      if (fw.step != 1)
        throw PuzzleError(fmt::format("check: layer {} on rank {} was updated {} times; every weight is updated exactly once",
                                      l, m->rank(), fw.step));
      if (tp == 0) tp = fw.tp_size;
      if (fw.tp_size != tp)
        throw PuzzleError(fmt::format("check: layer {} on rank {}: its final weight {} is split over {} TP slice{}, "
                                      "another rank's over {}",
                                      l, m->rank(), fw.str(), fw.tp_size, fw.tp_size == 1 ? "" : "s", tp));
      auto [slot, fresh] = slices.try_emplace(fw.tp_slices, fw);
      if (fresh) continue;
      try {
        slot->second = slot->second.combine(fw);
      } catch (const TensorError& e) {
        throw PuzzleError(fmt::format("check: layer {} on rank {}: {}", l, m->rank(), e.what()));
      }
    }
    if (slices.empty()) throw PuzzleError(fmt::format("check: no rank set a final weight for layer {}", l));
    for (int j = 0; j < tp; ++j)
      if (tp > 1 && !slices.count(std::uint64_t{1} << j))
        throw PuzzleError(fmt::format("check: no rank set a final weight for TP slice {} of {} of layer {}; every slice "
                                      "must be updated",
                                      j, tp, l));
    for (const auto& [bits, combined] : slices)
      if (!combined.complete())
        throw PuzzleError(fmt::format("check: the final weights of layer {}{} hold shards {} of {} only; every shard "
                                      "must be updated",
                                      l, tp > 1 ? fmt::format(" (TP slice {} of {})", combined.tp_index(), tp) : "",
                                      combined.shards.str(), combined.num_shards));
    // Mixture of Experts: every expert slice of the layer, each updated once (the ranks holding one slice agree).
    const int ep = models.front()->ep();
    if (ep == 1) continue;
    std::vector<bool> seen(static_cast<std::size_t>(ep), false);
    for (const Model* m : models) {
      auto it = m->final_experts_.find(l);
      if (it == m->final_experts_.end()) continue;
      const Weight& fe = it->second;
      if (fe.step != 1)
        throw PuzzleError(fmt::format("check: the experts of layer {} on rank {} ({}) were updated {} times; every "
                                      "expert slice is updated exactly once",
                                      l, m->rank(), fe.str(), fe.step));
      if (fe.ep_size == ep && fe.ep_index < ep) seen[fe.ep_index] = true;
    }
    for (int j = 0; j < ep; ++j)
      if (!seen[j])
        throw PuzzleError(fmt::format("check: no rank set the final experts of expert slice {} of {} of layer {} "
                                      "(model.set_final_experts); every expert slice must be updated",
                                      j, ep, l));
  }
}

void not_implemented(std::source_location w) {
  throw NotImplemented(fmt::format("not implemented: write your solution between TODO and END TODO in {} (line {})",
                                   w.file_name(), w.line()));
}

}  // namespace trainsim::puzzles
