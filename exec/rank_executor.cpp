#include "exec/rank_executor.h"
#include "exec/rank_executor_impl.h"

#include <csignal>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "exec/sequence_shard.h"

namespace trainsim::exec {

using namespace detail;

RankExecutor::Impl::Impl(const ReplayContext& c, int r, Device& d, Communicator& cm)
    : ctx(c), rank(r), dev(d), comm(cm), model(c.shapes->model), plan(c.plan->ranks.at(r)) {
  std::vector<float> cos, sin;
  rope_tables(model, cos, sin);
  rope_cos = dev.memory().allocate(cos.size() * sizeof(float));
  rope_sin = dev.memory().allocate(sin.size() * sizeof(float));
  auto hc = std::make_shared<std::vector<float>>(std::move(cos)), hs = std::make_shared<std::vector<float>>(std::move(sin));
  dev.submit(0, {}, [this, hc, hs](StreamContext& s) {
    s.upload(rope_cos->data(), hc->data(), hc->size() * sizeof(float));
    s.upload(rope_sin->data(), hs->data(), hs->size() * sizeof(float));
  }, -1);
  try {
    dev.synchronize();
  } catch (...) {
    // Another rank failed and aborted the device while the upload may still run: it writes into this object's
    // buffers, which a constructor that throws frees at once (no destructor drains them). Wait for it first.
    dev.drain();
    throw;
  }
}

ModelContext<float> RankExecutor::Impl::model_ctx(StreamContext& s, const TpComm<float>* tp) {
  return ModelContext<float>{.k = &s.kernels(), .alloc = &dev.memory(), .rope_cos = rope_cos->as<float>(),
                             .rope_sin = rope_sin->as<float>(), .tp = tp && tp->size > 1 ? tp : nullptr,
                             .recompute = ctx.recompute,
                             .microbatch_weight = 1.0 / ctx.schedule->header.microbatches};
}

TpComm<float> RankExecutor::Impl::tp_comm(StreamContext& s, int tp_size) {
  TpComm<float> tp;
  tp.size = tp_size;
  if (tp_size <= 1) return tp;
  const int stream = s.stream();
  const int group = stream < static_cast<int>(plan.tp_comm_groups.size()) ? plan.tp_comm_groups[stream] : -1;
  if (group < 0) throw std::logic_error("a TP compute op on a stream the plan gave no TP group");
  tp.all_reduce = [this, &s, group](float* x, long n) { comm.all_reduce(s, x, x, static_cast<std::size_t>(n), group); };
  tp.all_reduce_f64 = [this, &s, group](double* x, long n) {
    comm.all_reduce(s, x, x, static_cast<std::size_t>(n), group);
  };
  tp.all_gather = [this, &s, group](const float* in, float* out, long n) {
    comm.all_gather(s, in, out, static_cast<std::size_t>(n), group);
  };
  return tp;
}

SlotPtr RankExecutor::Impl::find(const Op& op, const Tensor& t) {
  auto it = held.find(t);
  if (it == held.end() || it->second.empty())
    throw std::runtime_error(fmt::format("{}: it reads {}, which this rank does not hold", op.label(), t.str()));
  return it->second.front();
}

SlotPtr RankExecutor::Impl::make(const Tensor& t) {
  auto s = std::make_shared<Slot>();
  s->id = t;
  held[t].push_back(s);
  return s;
}

void RankExecutor::Impl::drop(const Op& op, const Tensor& t) {
  auto it = held.find(t);
  if (it == held.end() || it->second.empty())
    throw std::runtime_error(fmt::format("{}: it frees {}, which this rank does not hold", op.label(), t.str()));
  it->second.pop_front();
  if (it->second.empty()) held.erase(it);
}

EventPtr RankExecutor::Impl::submit(const Op& op, int index, std::vector<EventPtr> after, std::function<void(StreamContext&)> work) {
  std::string label = op.label();
  const bool inject = ctx.fault.throw_rank == rank && ctx.fault.throw_op == index;
  const bool kill = ctx.fault.kill_rank == rank && ctx.fault.kill_op == index;
  auto run = [work = std::move(work), label, inject, kill](StreamContext& s) {
    try {
      if (kill) std::raise(SIGKILL);
      if (inject) throw std::runtime_error("injected fault");
      work(s);
    } catch (const CommError&) {
      throw;
    } catch (const OutOfMemory& e) {
      throw std::runtime_error(fmt::format("{}: {}", label, e.what()));
    } catch (const std::bad_alloc& e) {
      throw std::runtime_error(fmt::format("{}: cannot allocate host memory for the op ({})", label, e.what()));
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("{}: {}", label, e.what()));
    }
  };
  try {
    return dev.submit(op.stream, after, std::move(run), index);
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {  // the device could not take the work (no thread for its stream, no memory)
    throw std::runtime_error(fmt::format("{}: {}", label, e.what()));
  }
}

void RankExecutor::Impl::add_dep(std::vector<EventPtr>& deps, const EventPtr& e) {
  if (e) deps.push_back(e);
}

EventPtr RankExecutor::Impl::submit_call(const Op& op, int index, int group, std::vector<EventPtr> after,
                     std::function<void(StreamContext&)> work) {
  EventPtr& last = last_call[group];
  add_dep(after, last);
  last = submit(op, index, std::move(after), std::move(work));
  return last;
}

// ---- load ----
void RankExecutor::Impl::load(const Op& op, int index) {
  for (const Tensor& t : op.writes) {
    SlotPtr out = make(t);
    if (t.kind == TensorKind::Weight || t.kind == TensorKind::OptState) {
      if (carried_initialized) {
        auto it = carried.find(t);
        if (it == carried.end())
          throw std::runtime_error(fmt::format("{}: the state carried from the last step has no {}", op.label(), t.str()));
        out->buffer = it->second;  // shared: the state is immutable
        continue;
      }
      std::shared_ptr<std::vector<float>> host;
      try {
        host = std::make_shared<std::vector<float>>(ctx.shapes->elements(t), 0.0f);
      } catch (const std::bad_alloc&) {
        throw OutOfMemory(fmt::format("cannot allocate {:.2f} MiB of host memory for the initial values of {}",
                                      static_cast<double>(ctx.shapes->bytes(t)) / (1024.0 * 1024), t.str()));
      }
      if (t.kind == TensorKind::Weight) init_weight(t, host->data());
      out->ready = submit(op, index, {}, [this, out, host](StreamContext& s) {
        out->buffer = alloc(out->id);
        s.upload(out->buffer->data(), host->data(), host->size() * sizeof(float));
      });
    } else if (t.kind == TensorKind::WeightGrad) {
      out->ready = submit(op, index, {}, [this, out](StreamContext& s) {
        out->buffer = alloc(out->id);
        s.zero(out->buffer->data(), out->buffer->bytes());
      });
    } else if (t.kind == TensorKind::Activation && t.layer == 0) {
      auto tokens = std::make_shared<std::vector<int>>();
      batch_tokens(t.batches, tokens.get(), nullptr);
      out->ready = submit(op, index, {}, [this, out, tokens](StreamContext& s) {
        out->buffer = alloc(out->id);
        s.upload(out->buffer->data(), tokens->data(), tokens->size() * sizeof(int));
      });
    } else {
      throw std::runtime_error(fmt::format("{}: cannot load {}", op.label(), t.str()));
    }
  }
}

void RankExecutor::Impl::init_weight(const Tensor& t, float* out) const {
  const LayerLayout& lay = layout(t);
  const long P = lay.size();
  if (t.num_shards == 1 || t.complete()) {
    init_parameters(lay, ctx.seed, 0, ctx.shapes->elements(t), out);
    return;
  }
  const long c = shard_chunk(P, t.num_shards);
  long pos = 0;
  for (int j : t.shards.ids()) init_parameters(lay, ctx.seed, j * c, (j + 1) * c, out + (pos++) * c);
}

void RankExecutor::Impl::batch_tokens(const IdSet& batches, std::vector<int>* tokens, std::vector<int>* targets) const {
  const long per = model.tokens_per_microbatch();
  std::vector<int> tk(per), tg(per);
  for (int b : batches.ids()) {
    ctx.data->microbatch(model, step, ctx.schedule->header.microbatches, b, tk.data(), tg.data());
    if (tokens) tokens->insert(tokens->end(), tk.begin(), tk.end());
    if (targets) targets->insert(targets->end(), tg.begin(), tg.end());
  }
}

// ---- compute ----
void RankExecutor::Impl::forward(const Op& op, int index) {
  const Tensor& A = tensor_of(op.reads, TensorKind::Activation);
  SlotPtr a = find(op, A), w = find(op, tensor_of(op.reads, TensorKind::Weight));
  SlotPtr out = make(op.writes.front());
  std::vector<EventPtr> deps;
  add_dep(deps, a->ready), add_dep(deps, w->ready);
  const int l = op.layer, sequences = A.batches.size() * model.microbatch_size;
  std::shared_ptr<MoeSource> source;
  if (moe_split_layer(layout(w->id))) {  // (its dispatch and combine find the routing here)
    source = std::make_shared<MoeSource>();
    source->weight = w;
    moe_sources[{l, A.batches}] = source;
  }
  std::vector<int> batches = A.batches.ids();
  // (an MoE layer's TP slice routes its sequence shard of the tokens: exec/model.h)
  const int shards = source ? w->id.tp_size : 1, shard = source ? w->id.tp_index() : 0;
  out->ready = submit(op, index, deps, [this, a, w, out, sequences, source, batches, shard, shards](StreamContext& s) {
    out->buffer = alloc(out->id);
    auto stash = std::make_shared<LayerStash>();
    TpComm<float> tp = tp_comm(s, w->id.tp_size);
    ModelContext<float> mc = model_ctx(s, &tp);
    if (ctx.record_routing)
      mc.on_route = [this, &batches, shard, shards](int block, const MoeRouting& r) {
        record(block, batches, r, shard, shards);
      };
    if (ctx.fault.misroute_rank == rank && ctx.fault.misroute_step == step) mc.misroute_tokens = ctx.fault.misroute_tokens;
    layer_forward(mc, layout(w->id), w->buffer->as<float>(), a->buffer->data(), sequences, out->buffer->as<float>(),
                  stash.get());
    stash_holder(a).stash = stash;
    if (source) source->stash = stash;
  });
  last_forward[{l, A.batches}] = out->ready;
}

void RankExecutor::Impl::backward(const Op& op, int index) {
  const Tensor& A = tensor_of(op.reads, TensorKind::Activation);
  SlotPtr a = find(op, A), g = find(op, tensor_of(op.reads, TensorKind::ActivationGrad));
  SlotPtr w = op.kind == OpKind::BackwardWeight ? nullptr : find(op, tensor_of(op.reads, TensorKind::Weight));
  SlotPtr dw, da;
  for (const Tensor& t : op.writes) (t.kind == TensorKind::WeightGrad ? dw : da) = make(t);
  const std::pair<int, IdSet> key{op.layer, A.batches};
  std::vector<EventPtr> deps;
  add_dep(deps, a->ready), add_dep(deps, g->ready);
  if (w) add_dep(deps, w->ready);
  if (auto it = last_forward.find(key); it != last_forward.end()) add_dep(deps, it->second);
  if (op.kind == OpKind::BackwardWeight)
    if (auto it = last_backward_input.find(key); it != last_backward_input.end()) add_dep(deps, it->second);
  const int sequences = A.batches.size() * model.microbatch_size;
  const OpKind kind = op.kind;
  const Tensor slice = w ? w->id : dw->id;  // (which TP slice of the layer: its layout)
  // (the MoE load-balancing loss its routers add: summed into a double of its own, read at the step's end)
  std::shared_ptr<BufferPtr> aux;
  if (model.aux_loss_coeff > 0 && kind != OpKind::BackwardWeight && layout(slice).has_moe())
    aux_sums.push_back(aux = std::make_shared<BufferPtr>());
  EventPtr done = submit(op, index, deps, [this, a, g, w, dw, da, slice, sequences, kind, aux](StreamContext& s) {
    TpComm<float> tp = tp_comm(s, slice.tp_size);
    ModelContext<float> mc = model_ctx(s, &tp);
    const LayerLayout& lay = layout(slice);
    if (aux) {
      *aux = dev.memory().allocate(sizeof(double));
      s.zero((*aux)->data(), sizeof(double));
      mc.aux_loss_sum = (*aux)->as<double>();
    }
    Slot& holder = stash_holder(a);
    std::shared_ptr<LayerStash> stash = holder.stash;
    if (kind == OpKind::BackwardWeight) {
      if (!stash || !stash->input_grads_done)
        throw std::runtime_error("backward-weight needs the activations its backward-input saved on this rank, and "
                                 "there are none (run backward-input of the same layer and batches first)");
    } else if ((!stash || stash->input_grads_done) && moe_split_layer(lay)) {
      throw std::runtime_error("an expert-parallel MoE layer's backward needs the activations its forward and "
                               "combine saved on this rank, and there are none");
    } else if (!stash || stash->input_grads_done) {
      // No saved activations here (the forward ran elsewhere, or they were used): recompute them.
      stash = std::make_shared<LayerStash>();
      BufferPtr scratch =
          dev.memory().allocate(static_cast<std::size_t>(layer_output_elements(lay, sequences)) * sizeof(float));
      ModelContext<float> keep_all = mc;  // (recomputed here for this backward: nothing to recompute again)
      keep_all.recompute = hw::Recompute::None;
      layer_forward(keep_all, lay, w->buffer->as<float>(), a->buffer->data(), sequences, scratch->as<float>(),
                    stash.get());
    }
    if (kind == OpKind::Backward) {  // both halves, block by block (exec/model.h)
      da->buffer = alloc(da->id);
      dw->buffer = alloc(dw->id);
      layer_backward(mc, lay, w->buffer->as<float>(), a->buffer->data(), g->buffer->as<float>(), da->buffer->as<float>(),
                     dw->buffer->as<float>(), *stash);
      holder.stash.reset();
      return;
    }
    if (kind != OpKind::BackwardWeight) {
      da->buffer = alloc(da->id);
      layer_backward_input(mc, lay, w->buffer->as<float>(), a->buffer->data(), g->buffer->as<float>(),
                           da->buffer->as<float>(), *stash);
    }
    if (kind != OpKind::BackwardInput) {
      dw->buffer = alloc(dw->id);
      layer_backward_weight(mc, lay, a->buffer->data(), g->buffer->as<float>(), dw->buffer->as<float>(), *stash);
      holder.stash.reset();
    } else {
      holder.stash = stash;
    }
  });
  if (dw) dw->ready = done;
  if (da) da->ready = done;
  if (kind == OpKind::BackwardInput) last_backward_input[key] = done;
  if (kind != OpKind::BackwardWeight) moe_sources.erase(key);
}

std::pair<int, int> RankExecutor::Impl::logits_slice(const Tensor& a) {
  if (a.tp_sliced()) return {a.tp_size, a.tp_index()};
  if (a.num_shards > 1 && a.shards.size() == 1) return {a.num_shards, a.shards.ids().front()};
  return {1, 0};
}

void RankExecutor::Impl::loss(const Op& op, int index) {
  const Tensor& A = op.reads.front();
  SlotPtr a = find(op, A);
  SlotPtr out = make(op.writes.front());
  auto rec = std::make_shared<LossRecord>();
  rec->batches = A.batches.ids();
  rec->reported = plan.reported_batches[index];
  losses.push_back(rec);
  auto targets = std::make_shared<std::vector<int>>();
  batch_tokens(A.batches, nullptr, targets.get());
  const int sequences = A.batches.size() * model.microbatch_size;
  const double tokens = static_cast<double>(ctx.schedule->header.microbatches) * model.tokens_per_microbatch();
  std::vector<EventPtr> deps;
  add_dep(deps, a->ready);
  out->ready = submit(op, index, deps, [this, a, out, rec, targets, sequences, tokens](StreamContext& s) {
    out->buffer = alloc(out->id);
    BufferPtr t = dev.memory().allocate(targets->size() * sizeof(int));
    s.upload(t->data(), targets->data(), targets->size() * sizeof(int));
    rec->sums = dev.memory().allocate(rec->batches.size() * sizeof(double));
    s.zero(rec->sums->data(), rec->sums->bytes());
    // (the logits' vocabulary slice: the vocabulary-parallel cross-entropy over the TP group)
    const auto [slices, slice] = logits_slice(a->id);
    TpComm<float> tp = tp_comm(s, slices);
    ModelContext<float> mc = model_ctx(s, &tp);
    loss_forward_backward(mc, model, a->buffer->as<float>(), t->as<int>(), sequences, static_cast<float>(1.0 / tokens),
                          out->buffer->as<float>(), rec->sums->as<double>(), slice);
  });
}

std::vector<std::pair<long, long>> RankExecutor::Impl::grad_runs(const Op& u, const Tensor& dwt, long b, long e) const {
  const long P = ctx.shapes->parameters(dwt);
  const long c = dwt.num_shards == 1 || dwt.complete() ? P : shard_chunk(P, dwt.num_shards);
  std::vector<std::pair<long, long>> runs;  // (offset, count)
  while (b < e) {
    const long end = std::min(e, (b / c + 1) * c);
    const long off = shard_offset(dwt, P, b);
    if (off < 0) throw std::runtime_error(fmt::format("{}: {} lacks the shard it updates", u.label(), dwt.str()));
    runs.push_back({off, end - b});
    b = end;
  }
  return runs;
}

void RankExecutor::Impl::gradient_norm(const Op& first, int index) {
  norm = std::make_shared<Slot>();
  std::vector<EventPtr> deps;
  struct Part {
    SlotPtr grad;
    long offset, count;
  };
  auto parts = std::make_shared<std::vector<Part>>();
  const auto& ops = ctx.schedule->ranks[rank];
  for (const RankPlan::NormPart& p : plan.norm_parts) {
    const Op& u = ops[p.op];
    const Tensor& dwt = tensor_of(u.reads, TensorKind::WeightGrad);
    SlotPtr g = find(u, dwt);
    add_dep(deps, g->ready);
    for (auto [off, count] : grad_runs(u, dwt, p.begin, p.end)) parts->push_back(Part{g, off, count});
  }
  const int group = ctx.plan->norm_group;
  SlotPtr local = std::make_shared<Slot>();  // this rank's part, before the all-reduce (the step's log)
  norm_parts_out.push_back(local);
  norm->ready = local->ready = submit_call(first, -1, group, deps, [this, parts, group, local](StreamContext& s) {
    norm->buffer = dev.memory().allocate(sizeof(double));
    local->buffer = dev.memory().allocate(sizeof(double));
    s.zero(norm->buffer->data(), sizeof(double));
    for (const Part& p : *parts) s.kernels().sum_squares(p.grad->buffer->as<float>() + p.offset, p.count, norm->buffer->as<double>());
    s.copy(local->buffer->data(), norm->buffer->data(), sizeof(double));
    comm.all_reduce(s, norm->buffer->as<double>(), norm->buffer->as<double>(), 1, group);
  });
  (void)index;
}

void RankExecutor::Impl::zero_unwritten(StreamContext& s, Buffer& buffer, std::vector<std::pair<long, long>>& written) {
  std::sort(written.begin(), written.end());
  const long size = static_cast<long>(buffer.bytes() / sizeof(float));
  long at = 0;
  for (auto [begin, end] : written) {
    if (begin > at) s.zero(buffer.as<float>() + at, static_cast<std::size_t>(begin - at) * sizeof(float));
    at = std::max(at, end);
  }
  if (at < size) s.zero(buffer.as<float>() + at, static_cast<std::size_t>(size - at) * sizeof(float));
}

void RankExecutor::Impl::update(const Op& op, int index) {
  const Tensor &dwt = tensor_of(op.reads, TensorKind::WeightGrad), &wt = tensor_of(op.reads, TensorKind::Weight),
               &ot = tensor_of(op.reads, TensorKind::OptState);
  SlotPtr g = find(op, dwt), w = find(op, wt), o = find(op, ot);
  SlotPtr nw = make(tensor_of(op.writes, TensorKind::Weight)), no = make(tensor_of(op.writes, TensorKind::OptState));
  std::vector<EventPtr> deps;
  add_dep(deps, g->ready), add_dep(deps, w->ready), add_dep(deps, o->ready);
  SlotPtr nrm = ctx.plan->clip ? norm : nullptr;
  if (nrm) add_dep(deps, nrm->ready);
  const int step_now = step;
  const float clip = ctx.optimizer.grad_clip;
  // Without clipping nothing took the gradient norm before the first update: each update adds the squares of
  // the elements this rank counts (its norm parts) for the step's log, reading the grad before it is used.
  auto runs = std::make_shared<std::vector<std::pair<long, long>>>();
  SlotPtr part;
  if (!nrm) {
    for (const RankPlan::NormPart& p : plan.norm_parts)
      if (p.op == index)
        for (auto run : grad_runs(op, dwt, p.begin, p.end)) runs->push_back(run);
    part = std::make_shared<Slot>();
    norm_parts_out.push_back(part);
  }
  EventPtr done = submit(op, index, deps, [this, g, w, o, nw, no, nrm, step_now, clip, runs, part](StreamContext& s) {
    if (part) {
      part->buffer = dev.memory().allocate(sizeof(double));
      s.zero(part->buffer->data(), sizeof(double));
      for (auto [off, count] : *runs) s.kernels().sum_squares(g->buffer->as<float>() + off, count, part->buffer->as<double>());
    }
    const LayerLayout& lay = layout(o->id);
    const long P = lay.size();
    const Tensor& ot = o->id;
    const long c = shard_chunk(P, ot.num_shards);
    nw->buffer = alloc(nw->id), no->buffer = alloc(no->id);
    // The elements the update writes, by buffer (the new weights; the new m and v): the rest (the last shard's
    // padding) is zeroed afterwards, not the whole buffer first, which was a pass over all of it.
    std::vector<std::pair<long, long>> w_written, o_written;
    const double* norm_sq = nrm ? nrm->buffer->as<double>() : nullptr;
    long pos = 0;
    for (int j : ot.shards.ids()) {
      const long lo = j * c, hi = std::min(P, (j + 1) * c);
      for (const ParamSpec& p : lay.params()) {
        const long b = std::max(lo, p.offset), e = std::min(hi, p.offset + p.size());
        if (b >= e) continue;
        const long wi = shard_offset(w->id, P, b), gi = shard_offset(g->id, P, b);
        if (wi < 0 || gi < 0) throw std::runtime_error("the weight or its grad lacks a shard being updated");
        const long oi = pos * 2 * c + (b - lo);
        const long ni = pos * c + (b - lo);
        AdamWStep st = adamw_step(ctx.optimizer, step_now, ctx.total_steps, p.decay);
        s.kernels().adamw(w->buffer->as<float>() + wi, g->buffer->as<float>() + gi, o->buffer->as<float>() + oi,
                          o->buffer->as<float>() + oi + c, nw->buffer->as<float>() + ni, no->buffer->as<float>() + oi,
                          no->buffer->as<float>() + oi + c, e - b, st, norm_sq, clip);
        w_written.emplace_back(ni, ni + (e - b));
        o_written.emplace_back(oi, oi + (e - b)), o_written.emplace_back(oi + c, oi + c + (e - b));
      }
      ++pos;
    }
    zero_unwritten(s, *nw->buffer, w_written);
    zero_unwritten(s, *no->buffer, o_written);
  });
  nw->ready = no->ready = done;
  if (part) part->ready = done;
}

void RankExecutor::Impl::accumulate(const Op& op, int index) {
  std::vector<SlotPtr> in;
  std::vector<EventPtr> deps;
  for (const Tensor& t : op.reads) {
    in.push_back(find(op, t));
    add_dep(deps, in.back()->ready);
  }
  SlotPtr out = make(op.writes.front());
  out->ready = submit(op, index, deps, [this, in, out](StreamContext& s) {
    out->buffer = alloc(out->id);
    const long n = static_cast<long>(out->buffer->bytes() / sizeof(float));
    for (const SlotPtr& x : in)
      if (x->buffer->bytes() != out->buffer->bytes()) throw std::runtime_error("accumulated grads differ in size");
    // out = in0 + in1 in one pass (no copy of in0 first: a third less memory traffic, the same bits), then
    // the rest added in place, left to right
    float* sum = out->buffer->as<float>();
    if (in.size() == 1) s.kernels().copy(in.front()->buffer->as<float>(), sum, n);
    else s.kernels().add(in[0]->buffer->as<float>(), in[1]->buffer->as<float>(), sum, n);
    for (std::size_t i = 2; i < in.size(); ++i) s.kernels().add(sum, in[i]->buffer->as<float>(), sum, n);
  });
}

// ---- communication ----
void RankExecutor::Impl::send(const Op& op, int index) {
  SlotPtr x = find(op, op.reads.front());
  std::vector<EventPtr> deps;
  add_dep(deps, x->ready);
  const int peer = plan.peer[index];
  std::string tag = x->id.str();
  submit(op, index, deps, [this, x, peer, tag](StreamContext& s) {
    comm.send(s, x->buffer->data(), x->buffer->bytes(), peer, tag);
  });
}

void RankExecutor::Impl::recv(const Op& op, int index) {
  SlotPtr out = make(op.writes.front());
  const int peer = plan.peer[index];
  std::string tag = out->id.str();
  out->ready = submit(op, index, {}, [this, out, peer, tag](StreamContext& s) {
    out->buffer = alloc(out->id);
    comm.recv(s, out->buffer->data(), out->buffer->bytes(), peer, tag);
  });
}

void RankExecutor::Impl::collective(const Op& op, int index) {
  if (op.kind == OpKind::Barrier) {
    const int group = plan.comm_group[index];
    submit_call(op, index, group, {}, [this, group](StreamContext& s) { comm.barrier(s, group); });
    return;
  }
  SlotPtr in = find(op, op.reads.front());
  SlotPtr out = make(op.writes.front());
  std::vector<EventPtr> deps;
  add_dep(deps, in->ready);
  const int group = plan.comm_group[index];  // (the schedule's group, or its copy for this stream)
  const int k = static_cast<int>(ctx.plan->groups.at(group).size());
  const Tensor& moved = op.reads.front();
  const bool flat = moved.kind == TensorKind::Weight || moved.kind == TensorKind::WeightGrad ||
                    moved.kind == TensorKind::OptState;
  const long P = flat ? ctx.shapes->parameters(moved) : 0;  // (a weight's flat length, for reduce-scatter)
  const std::vector<int> order = plan.gather_order[index];
  const OpKind kind = op.kind;
  if (moved.route != Route::None) {
    expert_collective(op, index, in, out, std::move(deps));
    return;
  }
  if (!flat && kind != OpKind::AllReduce) {
    sequence_collective(op, index, in, out, std::move(deps));
    return;
  }
  out->ready = submit_call(op, index, group, deps, [this, in, out, group, k, P, order, kind](StreamContext& s) {
    out->buffer = alloc(out->id);
    const long in_n = static_cast<long>(in->buffer->bytes() / sizeof(float));
    const long out_n = static_cast<long>(out->buffer->bytes() / sizeof(float));
    if (kind == OpKind::AllReduce) {
      comm.all_reduce(s, in->buffer->as<float>(), out->buffer->as<float>(), in_n, group);
    } else if (kind == OpKind::AllGather) {
      if (order.empty()) {
        comm.all_gather(s, in->buffer->as<float>(), out->buffer->as<float>(), in_n, group);
      } else {
        BufferPtr tmp = dev.memory().allocate(out->buffer->bytes());
        comm.all_gather(s, in->buffer->as<float>(), tmp->as<float>(), in_n, group);
        const long block = out_n / static_cast<long>(order.size());
        for (std::size_t p = 0; p < order.size(); ++p)
          s.copy(out->buffer->as<float>() + p * block, tmp->as<float>() + order[p] * block, block * sizeof(float));
      }
    } else {  // reduce-scatter of a complete grad into shard i of k
      if (in->id.kind != TensorKind::WeightGrad) throw std::runtime_error("only weight grads can be reduce-scattered");
      const long c = shard_chunk(P, k);
      if (out_n != c) throw std::runtime_error("the reduce-scatter's result is not one shard of the group");
      const float* src = in->buffer->as<float>();
      BufferPtr staged;
      if (in_n != k * c) {  // pad to k·c elements, as NCCL's reduce-scatter takes k equal pieces
        staged = dev.memory().allocate(static_cast<std::size_t>(k * c) * sizeof(float));
        s.zero(staged->data(), staged->bytes());
        s.copy(staged->data(), src, static_cast<std::size_t>(std::min(in_n, P)) * sizeof(float));
        src = staged->as<float>();
      }
      if (ctx.fault.local_reduce_scatter) {
        const auto& m = ctx.plan->groups.at(group);
        const long me = std::find(m.begin(), m.end(), rank) - m.begin();
        s.copy(out->buffer->data(), src + me * c, static_cast<std::size_t>(c) * sizeof(float));
      } else {
        comm.reduce_scatter(s, src, out->buffer->as<float>(), c, group);
      }
    }
  });
}

void RankExecutor::Impl::sequence_collective(const Op& op, int index, const SlotPtr& in, const SlotPtr& out, std::vector<EventPtr> deps) {
  const int group = plan.comm_group[index];
  const Tensor &from = in->id, &to = out->id;
  const bool gather = op.kind == OpKind::AllGather;
  const SequenceShards split = sequence_shards(*ctx.shapes, to);  // (the gathered tensor, or the shard kept)
  std::vector<CopyRun> runs;
  if (gather) {
    runs = gather_copies(split, to.shards.size(), from.shards.size(), plan.gather_order[index]);
    if (op.reads.front().kind == TensorKind::Activation) out->source = in;  // (keeps the forward's saved activations)
  } else {
    const int k = static_cast<int>(ctx.plan->groups.at(group).size());
    const int me = member_index(ctx.plan->groups, group, rank, "reduce-scatter");
    if (!from.complete() || to.num_shards != k || to.shards != IdSet{me})
      throw std::runtime_error(fmt::format(
          "{}: a reduce-scatter of {} into {}: the executor reduce-scatters a whole activation or activation grad "
          "into sequence shard i of the group's {} ranks, i the rank's index in the group ({} here)",
          op.label(), from.str(), to.str(), k, me));
    runs = scatter_copies(split);
  }
  out->ready = submit_call(op, index, group, std::move(deps), [this, in, out, group, gather, runs](StreamContext& s) {
    out->buffer = alloc(out->id);
    const long in_n = static_cast<long>(in->buffer->bytes() / sizeof(float));
    const long out_n = static_cast<long>(out->buffer->bytes() / sizeof(float));
    const long whole = gather ? out_n : in_n;  // the elements the copies lay out
    BufferPtr staged;
    if (!is_identity(runs, whole)) staged = dev.memory().allocate(static_cast<std::size_t>(whole) * sizeof(float));
    if (gather) {
      float* dst = staged ? staged->as<float>() : out->buffer->as<float>();
      comm.all_gather(s, in->buffer->as<float>(), dst, static_cast<std::size_t>(in_n), group);
      if (staged)
        for (const CopyRun& r : runs)
          s.copy(out->buffer->as<float>() + r.dst, dst + r.src, static_cast<std::size_t>(r.count) * sizeof(float));
    } else {
      if (in_n != out_n * static_cast<long>(ctx.plan->groups.at(group).size()))
        throw std::runtime_error("the reduce-scatter's result is not one sequence shard of the group");
      const float* src = in->buffer->as<float>();
      if (staged) {
        for (const CopyRun& r : runs)
          s.copy(staged->as<float>() + r.dst, src + r.src, static_cast<std::size_t>(r.count) * sizeof(float));
        src = staged->as<float>();
      }
      comm.reduce_scatter(s, src, out->buffer->as<float>(), static_cast<std::size_t>(out_n), group);
    }
  });
}

void RankExecutor::Impl::rooted(const Op& op, int index) {
  const bool root = op.peer == rank;
  SlotPtr in = op.reads.empty() ? nullptr : find(op, op.reads.front());
  SlotPtr out = op.writes.empty() ? nullptr : make(op.writes.front());
  std::vector<EventPtr> deps;
  if (in) add_dep(deps, in->ready);
  const int group = plan.comm_group[index], peer = op.peer;
  const bool broadcast = op.kind == OpKind::Broadcast;
  const std::size_t count = ctx.shapes->bytes(in ? in->id : out->id) / sizeof(float);
  EventPtr done = submit_call(op, index, group, deps, [this, in, out, group, peer, broadcast, count, root](StreamContext& s) {
    if (out) out->buffer = alloc(out->id);
    float* src = in ? in->buffer->as<float>() : nullptr;
    float* dst = out ? out->buffer->as<float>() : nullptr;
    if (broadcast) comm.broadcast(s, src, root ? src : dst, count, peer, group);
    else comm.reduce(s, src, dst, count, peer, group);
  });
  if (out) out->ready = done;
}

void RankExecutor::Impl::issue(const Op& op, int i) {
  if (ctx.plan->clip && i == plan.first_update) gradient_norm(op, i);
  switch (op.kind) {
    case OpKind::Load: load(op, i); break;
    case OpKind::Free:
      for (const Tensor& t : op.reads) drop(op, t);
      break;
    case OpKind::Forward:
      if (expert_weight(op)) expert_forward(op, i);
      else forward(op, i);
      break;
    case OpKind::Backward:
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight:  // (an expert slice's is whole: make_plan refuses its split)
      if (expert_weight(op)) expert_backward(op, i);
      else backward(op, i);
      break;
    case OpKind::Loss: loss(op, i); break;
    case OpKind::Update: update(op, i); break;
    case OpKind::Accumulate: accumulate(op, i); break;
    case OpKind::Send: send(op, i); break;
    case OpKind::Recv: recv(op, i); break;
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
    case OpKind::Barrier: collective(op, i); break;
    case OpKind::Broadcast:
    case OpKind::Reduce: rooted(op, i); break;
    case OpKind::AllToAll: all_to_all(op, i); break;
  }
}

// ---- the step ----
StepOutput RankExecutor::Impl::run(int step_index, RankState& st) {
  step = step_index;
  // The carried state's buffers are held by this step's loads only: once the schedule frees the weights and
  // optimizer state its updates replaced, they go (the RankState keeping them would hold a second copy of
  // the model state at the end of every step but the first).
  carried_initialized = st.initialized;
  carried = std::move(st.tensors);
  st.tensors.clear();
  held.clear(), last_forward.clear(), last_backward_input.clear(), losses.clear(), aux_sums.clear(), norm.reset();
  norm_parts_out.clear(), moe_sources.clear(), expert_rows.clear(), gathered_rows.clear(), routes.clear();
  const auto& ops = ctx.schedule->ranks[rank];
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const Op& op = ops[i];
    try {
      issue(op, i);
    } catch (const std::bad_alloc& e) {  // (what an op's own work fails with names it already)
      throw std::runtime_error(fmt::format("{}: {}", op.label(),
                                           dynamic_cast<const OutOfMemory*>(&e)
                                               ? std::string(e.what())
                                               : fmt::format("cannot allocate host memory to issue the op ({})", e.what())));
    }
  }
  carried.clear();  // (every load is issued: each holds what it loaded)
  dev.synchronize();
  StepOutput out;
  out.loss_sums.assign(ctx.schedule->header.microbatches, std::numeric_limits<double>::quiet_NaN());
  for (const auto& rec : losses) {
    std::vector<double> sums(rec->batches.size());
    dev.download(sums.data(), rec->sums->data(), sums.size() * sizeof(double));
    for (std::size_t i = 0; i < rec->batches.size(); ++i)
      if (rec->reported.contains(rec->batches[i])) out.loss_sums[rec->batches[i]] = sums[i];
  }
  for (const auto& sum : aux_sums) {  // (in program order: the same sum on every run)
    double v = 0;
    if (*sum) dev.download(&v, (*sum)->data(), sizeof(double));
    out.aux_loss_sum += v;
  }
  for (const SlotPtr& part : norm_parts_out) {  // (in program order: the same sum on every run)
    double v = 0;
    dev.download(&v, part->buffer->data(), sizeof(double));
    out.grad_norm_sq += v;
  }
  out.timings = dev.take_timings();
  for (const auto& [key, digest] : routes)
    out.routing.push_back({key.first, key.second, digest.hash, digest.counts, digest.shard, digest.shards});
  st = next_state();
  held.clear(), losses.clear(), aux_sums.clear(), norm.reset(), last_forward.clear(), last_backward_input.clear();
  norm_parts_out.clear(), moe_sources.clear(), expert_rows.clear(), gathered_rows.clear();
  return out;
}

RankState RankExecutor::Impl::next_state() {
  RankState next;
  next.initialized = true;
  for (const Tensor& t : plan.state) {
    SlotPtr best;
    for (const auto& [u, slots] : held) {
      if (u.kind != t.kind || u.layer != t.layer || u.step != 1 || slots.empty() || u.tp_size != t.tp_size ||
          u.tp_slices != t.tp_slices || u.ep_size != t.ep_size || u.ep_index != t.ep_index)
        continue;
      if (u.num_shards == t.num_shards && u.shards == t.shards) {
        best = slots.front();
        break;
      }
      if ((t.kind == TensorKind::Weight && u.complete()) || (u.num_shards == t.num_shards && u.shards.contains(t.shards)))
        best = best ? best : slots.front();
    }
    if (!best) continue;  // the plan said so (not repeatable); a later load reports it
    if (best->id.num_shards == t.num_shards && best->id.shards == t.shards) {
      next.tensors[t] = best->buffer;
      continue;
    }
    // Cut t's shards out of a complete weight or a superset of shards.
    BufferPtr buf = dev.memory().allocate(ctx.shapes->bytes(t));
    const long P = ctx.shapes->parameters(t);
    const long c = shard_chunk(P, t.num_shards);
    const int fpe = floats_per_element(t.kind);
    const Tensor src_id = best->id;
    BufferPtr src = best->buffer;
    dev.submit(0, {}, [=](StreamContext& s) {
      s.zero(buf->data(), buf->bytes());
      long pos = 0;
      for (int j : t.shards.ids()) {
        if (t.kind == TensorKind::Weight) {  // from a complete weight (flat) or a superset of the same shards
          const long real = std::max(0L, std::min(c, P - j * c));
          s.copy(buf->as<float>() + pos * c, src->as<float>() + shard_offset(src_id, P, j * c),
                 static_cast<std::size_t>(real) * sizeof(float));
        } else {  // optimizer state, same shard count: the block of shard j
          long idx = 0;
          for (int x : src_id.shards.ids()) {
            if (x == j) break;
            ++idx;
          }
          s.copy(buf->as<float>() + pos * c * fpe, src->as<float>() + idx * c * fpe,
                 static_cast<std::size_t>(c * fpe) * sizeof(float));
        }
        ++pos;
      }
    }, -1);
    next.tensors[t] = buf;
  }
  dev.synchronize();
  dev.take_timings();
  return next;
}

RankExecutor::RankExecutor(const ReplayContext& ctx, int rank, Device& device, Communicator& comm)
    : impl_(std::make_unique<Impl>(ctx, rank, device, comm)) {}

RankExecutor::~RankExecutor() {
  if (impl_) impl_->dev.drain();  // the work in flight uses the executor's state
}

StepOutput RankExecutor::run_step(int step, RankState& state) { return impl_->run(step, state); }

}  // namespace trainsim::exec
