// One rank's Mixture-of-Experts ops (exec/rank_executor_impl.h; docs/executor.md "Mixture of Experts"): the
// dispatch and combine all-to-alls over the EP group, forward and backward; an expert slice's forward and backward
// on the rows the dispatch gathered; expert TP's all-gather and reduce-scatter of those rows over the TP group; the
// routing digests --check compares.
#include <algorithm>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "exec/rank_executor_impl.h"

namespace trainsim::exec {

using namespace detail;

// ---- Mixture of Experts (exec/moe.h) ----
void RankExecutor::Impl::record(int block, const std::vector<int>& batches, const MoeRouting& r, int shard, int shards) {
  const long per = model.tokens_per_microbatch() / shards;
  std::lock_guard lock(routes_mu);
  for (std::size_t i = 0; i < batches.size(); ++i)
    routes.try_emplace({block, batches[i]},
                       routing_digest(r, static_cast<long>(i) * per, per, model.seq, shard, shards));
}

void RankExecutor::Impl::expert_forward(const Op& op, int index) {
  SlotPtr a = find(op, tensor_of(op.reads, TensorKind::Activation)), w = find(op, tensor_of(op.reads, TensorKind::Weight));
  SlotPtr out = make(op.writes.front());
  out->rows = a->rows;
  std::vector<EventPtr> deps;
  add_dep(deps, a->ready), add_dep(deps, w->ready);
  out->ready = submit(op, index, deps, [this, a, w, out](StreamContext& s) {
    const std::vector<long> per = a->rows->per_expert();
    out->buffer = dev.memory().allocate(static_cast<std::size_t>(a->rows->total()) * model.dim * sizeof(float));
    const LayerLayout& lay = layout(w->id);
    experts_forward(s.kernels(), dev.memory(), w->buffer->as<float>() + expert_offset(lay), model.dim, lay.ffn(), per,
                    a->buffer->as<float>(), out->buffer->as<float>());
  });
}

void RankExecutor::Impl::expert_backward(const Op& op, int index) {
  if (op.kind != OpKind::Backward)
    throw std::runtime_error(fmt::format("{}: the executor runs an expert slice's backward whole (no backward-input "
                                         "and -weight split)",
                                         op.label()));
  SlotPtr a = find(op, tensor_of(op.reads, TensorKind::Activation));
  SlotPtr g = find(op, tensor_of(op.reads, TensorKind::ActivationGrad));
  SlotPtr w = find(op, tensor_of(op.reads, TensorKind::Weight));
  SlotPtr dw, da;
  for (const Tensor& t : op.writes) (t.kind == TensorKind::WeightGrad ? dw : da) = make(t);
  da->rows = a->rows;
  std::vector<EventPtr> deps;
  add_dep(deps, a->ready), add_dep(deps, g->ready), add_dep(deps, w->ready);
  EventPtr done = submit(op, index, deps, [this, a, g, w, dw, da](StreamContext& s) {
    const std::vector<long> per = a->rows->per_expert();
    const long rows = a->rows->total();
    if (g->rows->total() != rows) throw std::runtime_error("the tokens' grads are not the tokens the experts ran");
    da->buffer = dev.memory().allocate(static_cast<std::size_t>(rows) * model.dim * sizeof(float));
    dw->buffer = alloc(dw->id);
    s.zero(dw->buffer->data(), dw->buffer->bytes());  // (the padding of a sharded grad's buffer)
    const LayerLayout& lay = layout(w->id);
    const long off = expert_offset(lay);
    experts_backward(s.kernels(), dev.memory(), w->buffer->as<float>() + off, model.dim, lay.ffn(), per,
                     a->buffer->as<float>(), g->buffer->as<float>(), da->buffer->as<float>(),
                     dw->buffer->as<float>() + off);
  });
  dw->ready = da->ready = done;
}

void RankExecutor::Impl::all_to_all(const Op& op, int index) {
  const Tensor &from = op.reads.front(), &to = op.writes.front();
  SlotPtr in = find(op, from);
  SlotPtr out = make(to);
  std::vector<EventPtr> deps;
  add_dep(deps, in->ready);
  const int group = plan.comm_group[index];
  const std::vector<int>& members = ctx.plan->groups.at(group);
  const int k = static_cast<int>(members.size());
  const int per = model.experts / k;  // experts per slice
  const long d = model.dim;
  const bool grad = from.kind == TensorKind::ActivationGrad;
  const int layer = to.layer - 1;  // the MoE layer (its output's activation is layer + 1)
  if (to.route == Route::ExpertIn) {  // a dispatch
    const IdSet mine = from.batches;
    std::shared_ptr<MoeSource> src = source_of(op, layer, mine);
    std::shared_ptr<ExpertRows> rows;
    if (!grad) {
      rows = std::make_shared<ExpertRows>();
      expert_rows[{to.layer, to.batches}] = rows;
    } else {
      auto it = expert_rows.find({to.layer, to.batches});
      if (it == expert_rows.end())
        throw std::runtime_error(fmt::format("{}: the backward dispatch of {} before its forward's", op.label(), to.str()));
      rows = it->second;
    }
    out->rows = rows;
    out->ready = submit_call(op, index, group, deps, [this, in, out, src, rows, group, k, per, d, grad](StreamContext& s) {
      const MoeRouting& routing = moe_layer_routing(*src->stash);
      const long pairs = routing.pairs();
      BufferPtr packed = in->buffer;  // forward: the packed tokens; backward: the experts' output grads
      if (grad) {
        packed = dev.memory().allocate(static_cast<std::size_t>(pairs * d) * sizeof(float));
        TpComm<float> tp = layer_tp(s, src->weight->id);
        ModelContext<float> mc = model_ctx(s, &tp);
        moe_layer_dispatch_backward(mc, layout(src->weight->id), src->weight->buffer->as<float>(), in->buffer,
                                    packed->as<float>(), *src->stash);
      }
      if (!grad) {  // the counts each member gets, per local expert, first
        std::vector<float> send(routing.counts.begin(), routing.counts.end()), recv(static_cast<std::size_t>(k) * per);
        for (long c : routing.counts)
          if (c >= (1L << 24)) throw std::runtime_error("an expert got more than 2^24 tokens");
        BufferPtr out_counts = dev.memory().allocate(recv.size() * sizeof(float));
        comm.all_to_all(s, staged(s, send)->as<float>(), std::vector<std::size_t>(k, per), out_counts->as<float>(),
                        std::vector<std::size_t>(k, per), group);
        s.kernels().to_host(recv.data(), out_counts->data(), out_counts->bytes());
        rows->counts.assign(k, std::vector<long>(per));
        for (int i = 0; i < k; ++i)
          for (int e = 0; e < per; ++e) rows->counts[i][e] = static_cast<long>(recv[static_cast<std::size_t>(i) * per + e]);
      }
      BufferPtr by_member = dev.memory().allocate(static_cast<std::size_t>(rows->total() * d) * sizeof(float));
      comm.all_to_all(s, packed->as<float>(), to_slices(routing, k, per), by_member->as<float>(), from_members(*rows),
                      group);
      out->buffer = dev.memory().allocate(by_member->bytes());
      reorder(s, *rows, by_member->as<float>(), out->buffer->as<float>(), true);
    });
    return;
  }
  // A combine (forward or backward): the slice's rows go back to their members.
  std::shared_ptr<MoeSource> src = source_of(op, layer, to.batches);
  out->ready = submit_call(op, index, group, deps, [this, in, out, src, group, k, per, d, grad](StreamContext& s) {
    const MoeRouting& routing = moe_layer_routing(*src->stash);
    const ExpertRows& rows = *in->rows;
    BufferPtr by_member = dev.memory().allocate(in->buffer->bytes());
    reorder(s, rows, in->buffer->as<float>(), by_member->as<float>(), false);
    BufferPtr packed = dev.memory().allocate(static_cast<std::size_t>(routing.pairs() * d) * sizeof(float));
    comm.all_to_all(s, by_member->as<float>(), from_members(rows), packed->as<float>(), to_slices(routing, k, per), group);
    if (grad) {  // the packed tokens' grads, for the MoE layer's backward
      out->buffer = packed;
      return;
    }
    out->buffer = alloc(out->id);
    TpComm<float> tp = layer_tp(s, src->weight->id);
    ModelContext<float> mc = model_ctx(s, &tp);
    moe_layer_combine(mc, layout(src->weight->id), src->weight->buffer->as<float>(), packed, out->buffer->as<float>(),
                      *src->stash);
  });
}

BufferPtr RankExecutor::Impl::staged(StreamContext& s, const std::vector<float>& host) {
  BufferPtr b = dev.memory().allocate(std::max<std::size_t>(host.size(), 1) * sizeof(float));
  s.kernels().to_device(b->data(), host.data(), host.size() * sizeof(float));
  return b;
}

TpComm<float> RankExecutor::Impl::layer_tp(StreamContext& s, const Tensor& weight) {
  if (weight.tp_size > 1 && layout(weight).spec().head) return tp_comm(s, weight.tp_size);
  TpComm<float> none;
  none.size = weight.tp_size;
  return none;
}

std::vector<std::size_t> RankExecutor::Impl::to_slices(const MoeRouting& routing, int k, int per) const {
  std::vector<std::size_t> out(k, 0);
  for (int e = 0; e < k * per; ++e) out[e / per] += static_cast<std::size_t>(routing.counts[e] * model.dim);
  return out;
}

std::vector<std::size_t> RankExecutor::Impl::from_members(const ExpertRows& rows) const {
  std::vector<std::size_t> out;
  for (const std::vector<long>& member : rows.counts) {
    long n = 0;
    for (long c : member) n += c;
    out.push_back(static_cast<std::size_t>(n * model.dim));
  }
  return out;
}

std::shared_ptr<MoeSource> RankExecutor::Impl::source_of(const Op& op, int layer, const IdSet& batches) {
  auto it = moe_sources.find({layer, batches});
  if (it == moe_sources.end())
    throw std::runtime_error(fmt::format("{}: no expert-parallel MoE forward of layer {} for batches {} ran on this "
                                         "rank before it",
                                         op.label(), layer, batches.str()));
  return it->second;
}

void RankExecutor::Impl::reorder(StreamContext& s, const ExpertRows& rows, const float* src, float* dst, bool to_expert) const {
  const int k = static_cast<int>(rows.counts.size());
  const int per = k ? static_cast<int>(rows.counts.front().size()) : 0;
  const long d = model.dim;
  std::vector<std::vector<long>> at_member(k, std::vector<long>(per)), at_expert(k, std::vector<long>(per));
  long pos = 0;
  for (int i = 0; i < k; ++i)
    for (int e = 0; e < per; ++e) at_member[i][e] = pos, pos += rows.counts[i][e];
  pos = 0;
  for (int e = 0; e < per; ++e)
    for (int i = 0; i < k; ++i) at_expert[i][e] = pos, pos += rows.counts[i][e];
  for (int i = 0; i < k; ++i)
    for (int e = 0; e < per; ++e) {
      const long n = rows.counts[i][e];
      if (!n) continue;
      const long a = to_expert ? at_expert[i][e] : at_member[i][e], b = to_expert ? at_member[i][e] : at_expert[i][e];
      s.copy(dst + a * d, src + b * d, static_cast<std::size_t>(n * d) * sizeof(float));
    }
}

void RankExecutor::Impl::expert_collective(const Op& op, int index, const SlotPtr& in, const SlotPtr& out, std::vector<EventPtr> deps) {
  const int group = plan.comm_group[index];
  const int t = static_cast<int>(ctx.plan->groups.at(group).size());
  const bool gather = op.kind == OpKind::AllGather;
  const int me = member_index(ctx.plan->groups, group, rank, gather ? "all-gather" : "reduce-scatter");
  const Tensor &from = in->id, &to = out->id;
  const bool fits = gather ? from.shards.size() == 1 && to.complete() && to.num_shards == t
                           : op.kind == OpKind::ReduceScatter && from.partial && to.num_shards == t &&
                                 to.shards == IdSet{me};
  if (!fits)
    throw std::runtime_error(fmt::format(
        "{}: {} into {}: the executor all-gathers an expert slice's tokens of one sequence shard into those of the "
        "TP group's {} shards, and reduce-scatters the experts' partial outputs on them into shard i, i the rank's "
        "index in the group ({} here)",
        op.label(), from.str(), to.str(), t, me));
  const std::vector<int> order = plan.gather_order[index];  // (shard q's member-major block: order[q])
  // The rows: filled when the call runs, as the dispatch's; a backward all-gather's are its forward's, whose
  // counts it does not exchange again.
  auto rows = std::make_shared<ExpertRows>();
  const bool known = gather && from.kind == TensorKind::ActivationGrad;
  if (known) {
    auto it = gathered_rows.find({to.layer, to.batches});
    if (it == gathered_rows.end())
      throw std::runtime_error(fmt::format("{}: the backward all-gather of {} before its forward's", op.label(), to.str()));
    rows = it->second;
  } else if (gather) {
    gathered_rows[{to.layer, to.batches}] = rows;
  }
  out->rows = rows;
  const int shard = gather ? from.shards.ids().front() : me;  // (the shard this rank's own tokens are)
  out->ready = submit_call(op, index, group, std::move(deps), [this, in, out, rows, group, t, me, order, gather,
                                                                known, shard](StreamContext& s) {
    const long d = model.dim;
    // Where source (q, i)'s rows of expert e start, in shard q's own order (by expert, then member) and in the
    // gathered one (by expert, then shard and member).
    auto layout_of = [](const std::vector<std::vector<long>>& c, int t, int k, int per) {
      std::vector<long> own(c.size() * per), all(c.size() * per), total(t, 0);
      std::vector<long> at(t, 0);
      long pos = 0;
      for (int e = 0; e < per; ++e)
        for (int q = 0; q < t; ++q)
          for (int i = 0; i < k; ++i) {
            const long n = c[q * k + i][e];
            own[(q * k + i) * per + e] = at[q], at[q] += n, total[q] += n;
            all[(q * k + i) * per + e] = pos, pos += n;
          }
      return std::tuple{own, all, total};
    };
    if (gather) {
      const ExpertRows& mine = *in->rows;
      const int k = static_cast<int>(mine.counts.size()), per = k ? static_cast<int>(mine.counts.front().size()) : 0;
      if (!known) {
        std::vector<float> send(static_cast<std::size_t>(k) * per), got(send.size() * t);
        for (int i = 0; i < k; ++i)
          for (int e = 0; e < per; ++e) send[static_cast<std::size_t>(i) * per + e] = static_cast<float>(mine.counts[i][e]);
        BufferPtr all_counts = dev.memory().allocate(got.size() * sizeof(float));  // (below 2^24: the dispatch's)
        comm.all_gather(s, staged(s, send)->as<float>(), all_counts->as<float>(), send.size(), group);
        s.kernels().to_host(got.data(), all_counts->data(), all_counts->bytes());
        rows->counts.assign(static_cast<std::size_t>(t) * k, std::vector<long>(per));
        for (int q = 0; q < t; ++q) {
          const int b = order.empty() ? q : order[q];
          for (int i = 0; i < k; ++i)
            for (int e = 0; e < per; ++e)
              rows->counts[q * k + i][e] = static_cast<long>(got[(static_cast<std::size_t>(b) * k + i) * per + e]);
        }
      } else if (rows->counts.size() != static_cast<std::size_t>(t) * k ||
                 !std::equal(mine.counts.begin(), mine.counts.end(), rows->counts.begin() + shard * k)) {
        throw std::runtime_error("the grads to all-gather are not the tokens the forward's all-gather gave");
      }
      const auto [own, all, total] = layout_of(rows->counts, t, k, per);
      const long longest = *std::max_element(total.begin(), total.end()) * d;
      BufferPtr padded = dev.memory().allocate(static_cast<std::size_t>(std::max(longest, 1L)) * sizeof(float));
      BufferPtr blocks = dev.memory().allocate(static_cast<std::size_t>(std::max(longest, 1L) * t) * sizeof(float));
      s.zero(padded->data(), padded->bytes());
      if (in->buffer->bytes()) s.copy(padded->data(), in->buffer->data(), in->buffer->bytes());
      comm.all_gather(s, padded->as<float>(), blocks->as<float>(), static_cast<std::size_t>(longest), group);
      out->buffer = dev.memory().allocate(static_cast<std::size_t>(rows->total() * d) * sizeof(float));
      for (int q = 0; q < t; ++q) {
        const long block = (order.empty() ? q : order[q]) * longest;
        for (int i = 0; i < k; ++i)
          for (int e = 0; e < per; ++e)
            if (const long n = rows->counts[q * k + i][e])
              s.copy(out->buffer->as<float>() + all[(q * k + i) * per + e] * d,
                     blocks->as<float>() + block + own[(q * k + i) * per + e] * d,
                     static_cast<std::size_t>(n * d) * sizeof(float));
      }
      return;
    }
    const ExpertRows& whole = *in->rows;
    const int k = static_cast<int>(whole.counts.size()) / t;
    const int per = k ? static_cast<int>(whole.counts.front().size()) : 0;
    if (k * t != static_cast<int>(whole.counts.size()))
      throw std::runtime_error("the experts' outputs are not tokens an all-gather over this TP group gave them");
    const auto [own, all, total] = layout_of(whole.counts, t, k, per);
    const long longest = *std::max_element(total.begin(), total.end()) * d;
    BufferPtr staged = dev.memory().allocate(static_cast<std::size_t>(std::max(longest, 1L) * t) * sizeof(float));
    BufferPtr mine = dev.memory().allocate(static_cast<std::size_t>(std::max(longest, 1L)) * sizeof(float));
    s.zero(staged->data(), staged->bytes());
    for (int q = 0; q < t; ++q)
      for (int i = 0; i < k; ++i)
        for (int e = 0; e < per; ++e)
          if (const long n = whole.counts[q * k + i][e])
            s.copy(staged->as<float>() + q * longest + own[(q * k + i) * per + e] * d,
                   in->buffer->as<float>() + all[(q * k + i) * per + e] * d,
                   static_cast<std::size_t>(n * d) * sizeof(float));
    comm.reduce_scatter(s, staged->as<float>(), mine->as<float>(), static_cast<std::size_t>(longest), group);
    rows->counts.assign(whole.counts.begin() + me * k, whole.counts.begin() + (me + 1) * k);
    out->buffer = dev.memory().allocate(static_cast<std::size_t>(total[me] * d) * sizeof(float));
    if (total[me]) s.copy(out->buffer->data(), mine->data(), out->buffer->bytes());
  });
}

}  // namespace trainsim::exec
