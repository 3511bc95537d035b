#include "schedules/generators/builder.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "schedules/defaults.h"
#include "schedules/generators.h"
#include "sim/cost_model.h"

namespace trainsim::gen {

void require_at_least(const std::string& kind, const char* option, int value, int min) {
  if (value < min)
    throw std::invalid_argument(fmt::format("{}: --{} must be at least {} (got {})", kind, option, min, value));
}

void require_tp_degree(const std::string& kind, int tp) {
  require_at_least(kind, "tp", tp, 1);
  if (tp > Tensor::kMaxTpSize)
    throw std::invalid_argument(fmt::format("{}: --tp must be at most {}, the largest TP degree a tensor holds (got {})",
                                            kind, Tensor::kMaxTpSize, tp));
}

IdSet one(int i) { return IdSet::range(i, i + 1); }

Tensor weight_shard(int layer, int index, int count, int step) {
  return weight_tensor(layer, one(index), count, step);
}

Tensor weight_full(int layer, int count, int step) {
  return weight_tensor(layer, IdSet::range(0, count), count, step);
}

Tensor opt_shard(int layer, int index, int count, int step) {
  return opt_state_tensor(layer, one(index), count, step);
}

int microbatches_per_round(const std::string& kind, int p, int m) {
  const int rounds = std::max(1, m / p);
  if (!interleaved_rounds_fit("interleaved-zb", p, m))
    throw std::invalid_argument(fmt::format(
        "{}: {} microbatches do not split into {} rounds of equal size (PyTorch's rule: rounds = max(1, "
        "microbatches / stages)); choose a multiple of {} or of the stages",
        kind, m, rounds, rounds));
  return m / rounds;
}

PipelinePlan looped_plan(int p, int v, int m) {
  PipelinePlan plan;
  plan.world_size = p;
  plan.layers = p * v;
  plan.microbatches = m;
  plan.steps.resize(p);
  for (int l = 0; l < p * v; ++l) plan.stage_map.push_back(rank_of_chunk("1f1b", p, l));
  return plan;
}

PipelinePlan v_shaped_plan(int p, int m) {
  PipelinePlan plan;
  plan.world_size = p;
  plan.layers = 2 * p;
  plan.microbatches = m;
  plan.steps.resize(p);
  for (int l = 0; l < 2 * p; ++l) plan.stage_map.push_back(rank_of_chunk("zbv", p, l));
  return plan;
}

PipelinePlan refine_layers(const PipelinePlan& order, const std::vector<int>& layers_per_chunk) {
  if (static_cast<int>(layers_per_chunk.size()) != order.layers)
    throw std::logic_error(fmt::format("generator: refine_layers needs {} counts, one per layer, not {}", order.layers,
                                       layers_per_chunk.size()));
  std::vector<int> first(order.layers + 1, 0);  // the first refined layer of each chunk
  for (int c = 0; c < order.layers; ++c) {
    if (layers_per_chunk[c] < 1) throw std::logic_error("generator: refine_layers needs at least one layer per chunk");
    first[c + 1] = first[c] + layers_per_chunk[c];
  }
  PipelinePlan plan = order;
  plan.layers = first[order.layers];
  plan.stage_map.clear();
  for (int c = 0; c < order.layers; ++c)
    for (int i = 0; i < layers_per_chunk[c]; ++i) plan.stage_map.push_back(order.stage_map.at(c));
  for (std::size_t r = 0; r < order.steps.size(); ++r) {
    auto& out = plan.steps[r];
    out.clear();
    std::size_t n = 0;
    for (const Step& st : order.steps[r]) n += layers_per_chunk.at(st.layer);
    out.reserve(n);
    for (const Step& st : order.steps[r]) {
      const int k = layers_per_chunk[st.layer];
      for (int i = 0; i < k; ++i)  // forwards run the chunk's layers up, backwards and their halves down
        out.push_back({st.pass, first[st.layer] + (st.pass == Pass::F ? i : k - 1 - i), st.mb});
    }
  }
  return plan;
}

ScheduleHeader make_header(int world_size, int layers, int microbatches) {
  ScheduleHeader h;
  h.world_size = world_size;
  h.layers = layers;
  h.microbatches = microbatches;
  h.cost_model = "unit";
  h.p2p = P2PMode::PerPairChannel;
  return h;
}

// ---- RankProgram ----------------------------------------------------------------------------------------

void RankProgram::load(TensorList ts) {
  Op& op = ops_.emplace_back();
  op.kind = OpKind::Load;
  op.rank = rank_;
  op.writes = std::move(ts);
}

void RankProgram::free(TensorList ts) {
  if (ts.empty()) return;
  Op& op = ops_.emplace_back();
  op.kind = OpKind::Free;
  op.rank = rank_;
  op.reads = std::move(ts);
}

void RankProgram::send(int to, Tensor t) {
  Op& op = ops_.emplace_back();
  op.kind = OpKind::Send;
  op.rank = rank_;
  op.peer = to;
  op.reads.push_back(std::move(t));
}

void RankProgram::recv(int from, Tensor t, int stream) {
  Op& op = ops_.emplace_back();
  op.kind = OpKind::Recv;
  op.rank = rank_;
  op.peer = from;
  op.stream = stream;
  op.writes.push_back(std::move(t));
}

void RankProgram::compute(OpKind kind, int layer, IdSet batches, TensorList reads, TensorList writes) {
  Op& op = ops_.emplace_back();
  op.kind = kind;
  op.rank = rank_;
  op.layer = kind == OpKind::Loss ? layers_ : layer;
  op.batches = std::move(batches);
  op.reads = std::move(reads);
  op.writes = std::move(writes);
  fill_defaults(op, layers_, microbatches_);
}

void RankProgram::collective(OpKind kind, int layer, int group, Tensor in, Tensor out, int stream) {
  Op& op = ops_.emplace_back();
  op.kind = kind;
  op.rank = rank_;
  op.layer = layer;
  op.group = group;
  op.stream = stream;
  op.reads.push_back(std::move(in));
  op.writes.push_back(std::move(out));
}

void RankProgram::add_grad(const Tensor& g, int stream) {
  for (auto& [layer, s] : sums_) {
    if (layer != g.layer || s.ep_size != g.ep_size || s.ep_index != g.ep_index) continue;
    Tensor total = sum(s, g);  // throws TensorError on a generator bug
    Op& op = ops_.emplace_back();  // built in place: no op is moved
    op.kind = OpKind::Accumulate;
    op.rank = rank_;
    op.stream = stream;
    op.reads.reserve(2);  // (lists sized once and filled in place: this runs for every backward)
    op.reads.push_back(s);
    op.reads.push_back(g);
    op.writes.push_back(total);
    TensorList drop;
    drop.reserve(2);
    drop.push_back(std::move(s));
    drop.push_back(g);
    free(std::move(drop));
    ops_.back().stream = stream;
    s = std::move(total);
    return;
  }
  sums_.emplace_back(g.layer, g);
}

Tensor RankProgram::take_grad(int layer, bool expert) {
  for (auto it = sums_.begin(); it != sums_.end(); ++it)
    if (it->first == layer && it->second.expert() == expert) {
      Tensor t = it->second;
      sums_.erase(it);
      return t;
    }
  throw std::logic_error(fmt::format("generator: rank {} has no weight grad of layer {}{}", rank_, layer,
                                     expert ? "'s experts" : ""));
}

// ---- Mixture of Experts --------------------------------------------------------------------------------

Tensor moe_dense_forward(RankProgram& prog, int l, const IdSet& b, const ExpertPlace& x, const Tensor& in,
                         const Tensor& w) {
  Tensor routed = x.tokens(routed_as(activation_tensor(l + 1, b), Route::Routed));
  prog.compute(OpKind::Forward, l, b, {in, w}, {routed});
  return routed;
}

namespace {

// The tokens of expert slice x.slice of `t` (an activation or its grad of the EP group's microbatches) as the
// dispatch gives them: whole, or with expert TP this rank's sequence shard (its EP group's TP index).
Tensor dispatched(const ExpertPlace& x, const Tensor& t) {
  const Tensor in = routed_as(t, Route::ExpertIn, x.slice, x.ep);
  return x.etp > 1 ? x.tokens(in) : in;
}

// With expert TP: the dispatched shard `part` all-gathered over the expert-TP group (freed); else `part` itself.
Tensor gather_tokens(RankProgram& prog, int l, const ExpertPlace& x, const Tensor& part) {
  if (x.etp <= 1) return part;
  Tensor whole = part;
  whole.shards = IdSet::range(0, part.num_shards);
  prog.collective(OpKind::AllGather, l, x.etp_group, part, whole, x.stream);
  prog.free({part});
  return whole;
}

// The experts' output (or input grad) `t`, as the experts write it: whole, or with expert TP the partial sum of
// this rank's TP slice.
Tensor expert_output(const ExpertPlace& x, const Tensor& t) {
  const Tensor out = routed_as(t, Route::ExpertOut, x.slice, x.ep);
  return x.etp > 1 ? tp_partial(out, x.etp_index, x.etp) : out;
}

// With expert TP: the experts' partial output `p` reduce-scattered over the expert-TP group into this rank's
// sequence shard (`p` freed); else `p` itself.
Tensor reduce_tokens(RankProgram& prog, int l, const ExpertPlace& x, const Tensor& p) {
  if (x.etp <= 1) return p;
  Tensor whole = p;
  whole.partial = false, whole.tp_size = 1, whole.tp_slices = 1;
  const Tensor mine = x.tokens(whole);
  prog.collective(OpKind::ReduceScatter, l, x.etp_group, p, mine, x.stream);
  prog.free({p});
  return mine;
}

}  // namespace

Tensor moe_dispatch(RankProgram& prog, int l, const IdSet& group_batches, const ExpertPlace& x, const Tensor& routed) {
  const Tensor in_e = dispatched(x, activation_tensor(l + 1, group_batches));
  prog.collective(OpKind::AllToAll, l, x.group, routed, in_e, x.stream);
  prog.free({routed});
  return gather_tokens(prog, l, x, in_e);
}

Tensor moe_experts_forward(RankProgram& prog, int l, const IdSet& group_batches, const ExpertPlace& x,
                           const Tensor& tokens) {
  Tensor out_e = expert_output(x, activation_tensor(l + 1, group_batches));
  const Tensor w = x.state(weight_full(l, x.weight_shards));
  prog.compute(OpKind::Forward, l, group_batches, {tokens, w}, {out_e});
  return out_e;
}

void moe_combine(RankProgram& prog, int l, const ExpertPlace& x, const Tensor& expert_out, const Tensor& out) {
  const Tensor sent = reduce_tokens(prog, l, x, expert_out);
  prog.collective(OpKind::AllToAll, l, x.group, sent, out, x.stream);
  prog.free({sent});
}

void moe_forward(RankProgram& prog, int l, const IdSet& b, const IdSet& group_batches, const ExpertPlace& x,
                 const Tensor& in, const Tensor& w, const Tensor& out) {
  const Tensor routed = moe_dense_forward(prog, l, b, x, in, w);
  const Tensor in_e = moe_dispatch(prog, l, group_batches, x, routed);
  moe_combine(prog, l, x, moe_experts_forward(prog, l, group_batches, x, in_e), out);
}

Tensor moe_grad_dispatch(RankProgram& prog, int l, const IdSet& group_batches, const ExpertPlace& x,
                         const Tensor& grad) {
  const Tensor grad_in = dispatched(x, activation_grad_tensor(l + 1, group_batches));
  prog.collective(OpKind::AllToAll, l, x.group, grad, grad_in, x.stream);
  prog.free({grad});
  return gather_tokens(prog, l, x, grad_in);
}

Tensor moe_experts_backward(RankProgram& prog, int l, const IdSet& group_batches, const ExpertPlace& x,
                            const Tensor& grads) {
  Tensor in_e = dispatched(x, activation_tensor(l + 1, group_batches));
  if (x.etp > 1) in_e.shards = IdSet::range(0, in_e.num_shards);  // (the forward's gathered tokens)
  Tensor grad_out = expert_output(x, activation_grad_tensor(l + 1, group_batches));
  const Tensor expert_grad = x.state(weight_grad_tensor(l, group_batches));
  const Tensor w = x.state(weight_full(l, x.weight_shards));
  prog.compute(OpKind::Backward, l, group_batches, {in_e, grads, w}, {expert_grad, grad_out});
  prog.free({in_e, grads});
  prog.add_grad(expert_grad);
  return grad_out;
}

Tensor moe_grad_combine(RankProgram& prog, int l, const IdSet& b, const ExpertPlace& x, const Tensor& grads) {
  Tensor routed = x.tokens(routed_as(activation_grad_tensor(l + 1, b), Route::Routed));
  const Tensor sent = reduce_tokens(prog, l, x, grads);
  prog.collective(OpKind::AllToAll, l, x.group, sent, routed, x.stream);
  prog.free({sent});
  return routed;
}

Tensor moe_backward_experts(RankProgram& prog, int l, const IdSet& b, const IdSet& group_batches,
                            const ExpertPlace& x, const Tensor& grad) {
  const Tensor grad_in = moe_grad_dispatch(prog, l, group_batches, x, grad);
  return moe_grad_combine(prog, l, b, x, moe_experts_backward(prog, l, group_batches, x, grad_in));
}

// ---- pipelines ------------------------------------------------------------------------------------------

std::vector<Step> one_f_one_b(int layer, int first, int m, int warmup) {
  std::vector<Step> out;
  int w = std::clamp(warmup, 0, m), f = 0, b = 0;
  while (f < w) out.push_back({Pass::F, layer, first + f++});
  while (f < m) {
    out.push_back({Pass::F, layer, first + f++});
    out.push_back({Pass::B, layer, first + b++});
  }
  while (b < m) out.push_back({Pass::B, layer, first + b++});
  return out;
}

}  // namespace trainsim::gen
