#include "exec/rank_executor.h"

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

namespace {

// A tensor the rank holds in this step: its buffer (filled by the work that produces it, before `ready`)
// and, for an activation a forward read, the activations that forward saved for the backward.
struct Slot;
using SlotPtr = std::shared_ptr<Slot>;
struct Slot {
  Tensor id;
  BufferPtr buffer;
  std::shared_ptr<LayerStash> stash;
  EventPtr ready;  // null: ready now
  // Sequence parallelism: for an activation an all-gather assembled from this rank's sequence shard, that
  // shard's slot. The schedule frees the gathered tensor after each pass and gathers it again for the next
  // (Korthikanti et al. 2022), so the saved activations stay with the shard the rank keeps.
  SlotPtr source;
  // Mixture of Experts: an expert slice's tokens (ExpertIn, ExpertOut), the rows each member of the EP group sent.
  std::shared_ptr<struct ExpertRows> rows;
};

// The tokens an expert slice got from its EP group in one dispatch (filled when the dispatch runs): counts[i][e]
// rows from member i for local expert e. The slice's buffers hold them by expert, then member (exec/moe.h).
struct ExpertRows {
  std::vector<std::vector<long>> counts;
  std::vector<long> per_expert() const {
    std::vector<long> out(counts.empty() ? 0 : counts.front().size(), 0);
    for (const auto& c : counts)
      for (std::size_t e = 0; e < c.size(); ++e) out[e] += c[e];
    return out;
  }
  long total() const {
    long n = 0;
    for (long c : per_expert()) n += c;
    return n;
  }
};

// An expert-parallel MoE layer's forward on this rank, for its all-to-alls (filled when the forward runs): the
// saved activations with the routing, and the layer's weight (the combine's LM head reads it).
struct MoeSource {
  std::shared_ptr<LayerStash> stash;
  SlotPtr weight;
};

// The slot that keeps the saved activations of a forward that reads `a`.
Slot& stash_holder(const SlotPtr& a) { return a->source ? *a->source : *a; }

// The loss sums of one loss op, for the end of the step.
struct LossRecord {
  std::vector<int> batches;  // the op's microbatches in row order
  IdSet reported;
  BufferPtr sums;            // one double per microbatch of the op
};


}  // namespace

struct RankExecutor::Impl {
  const ReplayContext& ctx;
  const int rank;
  Device& dev;
  Communicator& comm;
  const ModelConfig& model;
  const RankPlan& plan;
  BufferPtr rope_cos, rope_sin;

  // Per step:
  int step = 0;
  std::map<Tensor, std::deque<SlotPtr>> held;
  std::map<std::pair<int, IdSet>, EventPtr> last_forward, last_backward_input;
  // Mixture of Experts: by (layer, batches), this rank's expert-parallel MoE forwards; by the expert slice's token
  // tensor of the forward dispatch (layer, batches), the rows its group sent, for the backward's all-to-alls.
  std::map<std::pair<int, IdSet>, std::shared_ptr<MoeSource>> moe_sources;
  std::map<std::pair<int, IdSet>, std::shared_ptr<ExpertRows>> expert_rows;
  // Expert TP: the rows a forward's all-gather over the TP group gave an expert slice (expert_collective), which the
  // backward's all-gather of their grads gives again.
  std::map<std::pair<int, IdSet>, std::shared_ptr<ExpertRows>> gathered_rows;
  // With ctx.record_routing: (MoE block, microbatch) -> its routing's digest (under TP: of the rank's sequence
  // shard of the microbatch), written by the forwards' streams.
  std::mutex routes_mu;
  std::map<std::pair<int, int>, RoutingDigest> routes;
  std::vector<std::shared_ptr<LossRecord>> losses;
  // With the MoE load-balancing loss: each backward op's sum of it (one double, set by the op's work), in program
  // order.
  std::vector<std::shared_ptr<BufferPtr>> aux_sums;
  SlotPtr norm;
  // The last collective submitted over each communicator group. A communicator numbers a group's calls as the
  // stream workers run them; the plan gives a schedule group used on several streams a communicator group per
  // stream (RankPlan::comm_group), but the gradient-norm all-reduce, which no schedule op holds, runs over
  // norm_group from the first update's stream, while the data-parallel all-reduces of the same ranks run on a
  // communication stream (gen ddp: group 0 on stream 1, the norm on stream 0): two streams, one communicator
  // group, and ranks that number the calls differently pair the wrong ones (CUDA-REVIEW.md #5). So each collective
  // waits for the one before it over the same communicator group: they run, and are numbered, in program order,
  // one at a time, as NCCL runs the operations of one communicator (NVIDIA/nccl#574).
  std::map<int, EventPtr> last_call;
  const RankState* state = nullptr;
  std::vector<SlotPtr> norm_parts_out;  // one double each: this rank's parts of the squared gradient norm
  // The state carried from the step before, moved out of the caller's RankState at the step's start: its buffers
  // are the loads' until every op is issued, then only the ops' (so the schedule's frees release them).
  bool carried_initialized = false;
  std::map<Tensor, BufferPtr> carried;

  Impl(const ReplayContext& c, int r, Device& d, Communicator& cm)
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

  ModelContext<float> model_ctx(StreamContext& s, const TpComm<float>* tp = nullptr) {
    return ModelContext<float>{.k = &s.kernels(), .alloc = &dev.memory(), .rope_cos = rope_cos->as<float>(),
                               .rope_sin = rope_sin->as<float>(), .tp = tp && tp->size > 1 ? tp : nullptr,
                               .recompute = ctx.recompute,
                               .microbatch_weight = 1.0 / ctx.schedule->header.microbatches};
  }
  // The TP group's reductions inside a compute op of TP degree `tp_size` running on `s` (exec/model.h): over
  // the plan's copy of the rank's TP group for the op's stream.
  TpComm<float> tp_comm(StreamContext& s, int tp_size) {
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
  BufferPtr alloc(const Tensor& t) { return dev.memory().allocate(ctx.shapes->bytes(t)); }
  // The layout of a W, O or dW tensor (its TP slice's).
  const LayerLayout& layout(const Tensor& t) const { return ctx.shapes->layout(t); }

  SlotPtr find(const Op& op, const Tensor& t) {
    auto it = held.find(t);
    if (it == held.end() || it->second.empty())
      throw std::runtime_error(fmt::format("{}: it reads {}, which this rank does not hold", op.label(), t.str()));
    return it->second.front();
  }
  SlotPtr make(const Tensor& t) {
    auto s = std::make_shared<Slot>();
    s->id = t;
    held[t].push_back(s);
    return s;
  }
  void drop(const Op& op, const Tensor& t) {
    auto it = held.find(t);
    if (it == held.end() || it->second.empty())
      throw std::runtime_error(fmt::format("{}: it frees {}, which this rank does not hold", op.label(), t.str()));
    it->second.pop_front();
    if (it->second.empty()) held.erase(it);
  }

  // Submits `work` for op `index` on its stream after `after`; errors name the op.
  EventPtr submit(const Op& op, int index, std::vector<EventPtr> after, std::function<void(StreamContext&)> work) {
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

  static void add_dep(std::vector<EventPtr>& deps, const EventPtr& e) {
    if (e) deps.push_back(e);
  }

  // submit() for a collective over `group`: after the rank's previous collective over it (last_call).
  EventPtr submit_call(const Op& op, int index, int group, std::vector<EventPtr> after,
                       std::function<void(StreamContext&)> work) {
    EventPtr& last = last_call[group];
    add_dep(after, last);
    last = submit(op, index, std::move(after), std::move(work));
    return last;
  }

  // ---- load ----
  void load(const Op& op, int index) {
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

  void init_weight(const Tensor& t, float* out) const {
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

  // Tokens (and targets) of microbatches `batches` of this step, in increasing microbatch order.
  void batch_tokens(const IdSet& batches, std::vector<int>* tokens, std::vector<int>* targets) const {
    const long per = model.tokens_per_microbatch();
    std::vector<int> tk(per), tg(per);
    for (int b : batches.ids()) {
      ctx.data->microbatch(model, step, ctx.schedule->header.microbatches, b, tk.data(), tg.data());
      if (tokens) tokens->insert(tokens->end(), tk.begin(), tk.end());
      if (targets) targets->insert(targets->end(), tg.begin(), tg.end());
    }
  }

  // ---- compute ----
  void forward(const Op& op, int index) {
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

  void backward(const Op& op, int index) {
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

  // ---- Mixture of Experts (exec/moe.h) ----
  // The routing of a forward over microbatches `batches` (in order), per microbatch; of their sequence shard
  // `shard` of `shards` under TP.
  void record(int block, const std::vector<int>& batches, const MoeRouting& r, int shard, int shards) {
    const long per = model.tokens_per_microbatch() / shards;
    std::lock_guard lock(routes_mu);
    for (std::size_t i = 0; i < batches.size(); ++i)
      routes.try_emplace({block, batches[i]},
                         routing_digest(r, static_cast<long>(i) * per, per, model.seq, shard, shards));
  }

  // An expert slice's forward: its experts on the rows the dispatch gathered, by expert (under expert TP, the
  // rank's TP slice of each on the rows of the TP group's shards: partial outputs, expert_collective).
  void expert_forward(const Op& op, int index) {
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

  // An expert slice's backward: from its tokens (saved) and their output grads to its weight grads and the tokens'
  // input grads.
  void expert_backward(const Op& op, int index) {
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

  // The offset of the experts in an expert slice's layout (its layer's MoE block, the last).
  static long expert_offset(const LayerLayout& lay) { return lay.block(lay.spec().num_blocks - 1).experts; }

  // The dispatch and combine all-to-alls over the EP group, forward and backward (exec/moe.h, the packed order):
  //   dispatch  A<routed> -> A<ej/e>        (forward: the packed tokens; backward: dA -> dA<ej/e>, the experts'
  //   combine   A<ej/e:out> -> A            output grads, after the combine's and the LM head's backward)
  //   backward combine  dA<ej/e:out> -> dA<routed>
  // Member i of the group holds expert slice i (make_plan checks it). Each sends its rows for every member, by
  // member; an expert slice's rows are then put in its order, by expert then member, and back for the return.
  void all_to_all(const Op& op, int index) {
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

  // Host numbers (token counts) in backend memory for a collective: the communicator moves backend memory (device
  // memory on CUDA, which NCCL reads; the host's on the CPU), so counts go there first and come back with
  // Kernels::to_host, which waits for the stream.
  BufferPtr staged(StreamContext& s, const std::vector<float>& host) {
    BufferPtr b = dev.memory().allocate(std::max<std::size_t>(host.size(), 1) * sizeof(float));
    s.kernels().to_device(b->data(), host.data(), host.size() * sizeof(float));
    return b;
  }

  // The TP group of an MoE layer's combine and its backward dispatch on `s` (exec/model.h): a TP slice whose layer
  // has the LM head all-gathers the final norm's sequence shards and sums the head's input grad there, over the
  // plan's TP communicator for the stream (make_plan counts these all-to-alls as the TP group's collective ops);
  // one without the head makes no TP call.
  TpComm<float> layer_tp(StreamContext& s, const Tensor& weight) {
    if (weight.tp_size > 1 && layout(weight).spec().head) return tp_comm(s, weight.tp_size);
    TpComm<float> none;
    none.size = weight.tp_size;
    return none;
  }

  // Floats of this rank's packed tokens for each of the `k` expert slices of `per` experts (the dispatch sends
  // them, the combine returns them), and floats of each member's tokens an expert slice got (`rows`).
  std::vector<std::size_t> to_slices(const MoeRouting& routing, int k, int per) const {
    std::vector<std::size_t> out(k, 0);
    for (int e = 0; e < k * per; ++e) out[e / per] += static_cast<std::size_t>(routing.counts[e] * model.dim);
    return out;
  }
  std::vector<std::size_t> from_members(const ExpertRows& rows) const {
    std::vector<std::size_t> out;
    for (const std::vector<long>& member : rows.counts) {
      long n = 0;
      for (long c : member) n += c;
      out.push_back(static_cast<std::size_t>(n * model.dim));
    }
    return out;
  }

  std::shared_ptr<MoeSource> source_of(const Op& op, int layer, const IdSet& batches) {
    auto it = moe_sources.find({layer, batches});
    if (it == moe_sources.end())
      throw std::runtime_error(fmt::format("{}: no expert-parallel MoE forward of layer {} for batches {} ran on this "
                                           "rank before it",
                                           op.label(), layer, batches.str()));
    return it->second;
  }

  // An expert slice's rows between the all-to-all's order (by member, then expert) and the slice's (by expert,
  // then member): `to_expert` for a dispatch, the other way for a combine.
  void reorder(StreamContext& s, const ExpertRows& rows, const float* src, float* dst, bool to_expert) const {
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

  // Which vocabulary slice of the logits a loss reads: (t, j) for slice j of t, (1, 0) for all of them. A TP
  // slice's LM head writes its vocabulary slice A_L<j/t>; an MoE last layer's TP slice writes A_L[j/t], which the
  // schedule names sequence shard j of the final activation (the sequence-parallel layer's output) and the executor
  // holds as the logits' vocabulary slice j of every token, the same elements (exec/model.h, moe_layer_combine).
  static std::pair<int, int> logits_slice(const Tensor& a) {
    if (a.tp_sliced()) return {a.tp_size, a.tp_index()};
    if (a.num_shards > 1 && a.shards.size() == 1) return {a.num_shards, a.shards.ids().front()};
    return {1, 0};
  }

  void loss(const Op& op, int index) {
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

  // Where flat elements [b, e) of the layer of `dwt` (the grad an update op `u` reads) lie in its buffer: runs
  // contiguous within one shard.
  std::vector<std::pair<long, long>> grad_runs(const Op& u, const Tensor& dwt, long b, long e) const {
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

  void gradient_norm(const Op& first, int index) {
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

  // Zeroes the floats of `buffer` outside the element ranges `written` [begin, end) (any order, disjoint).
  static void zero_unwritten(StreamContext& s, Buffer& buffer, std::vector<std::pair<long, long>>& written) {
    std::sort(written.begin(), written.end());
    const long size = static_cast<long>(buffer.bytes() / sizeof(float));
    long at = 0;
    for (auto [begin, end] : written) {
      if (begin > at) s.zero(buffer.as<float>() + at, static_cast<std::size_t>(begin - at) * sizeof(float));
      at = std::max(at, end);
    }
    if (at < size) s.zero(buffer.as<float>() + at, static_cast<std::size_t>(size - at) * sizeof(float));
  }

  void update(const Op& op, int index) {
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

  void accumulate(const Op& op, int index) {
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
  void send(const Op& op, int index) {
    SlotPtr x = find(op, op.reads.front());
    std::vector<EventPtr> deps;
    add_dep(deps, x->ready);
    const int peer = plan.peer[index];
    std::string tag = x->id.str();
    submit(op, index, deps, [this, x, peer, tag](StreamContext& s) {
      comm.send(s, x->buffer->data(), x->buffer->bytes(), peer, tag);
    });
  }

  void recv(const Op& op, int index) {
    SlotPtr out = make(op.writes.front());
    const int peer = plan.peer[index];
    std::string tag = out->id.str();
    out->ready = submit(op, index, {}, [this, out, peer, tag](StreamContext& s) {
      out->buffer = alloc(out->id);
      comm.recv(s, out->buffer->data(), out->buffer->bytes(), peer, tag);
    });
  }

  void collective(const Op& op, int index) {
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

  // Sequence parallelism's collectives over the TP group (exec/sequence_shard.h): an all-gather of sequence shards
  // of an activation or activation grad into the tensor they make up, a reduce-scatter of a whole one (a partial
  // sum) into this rank's sequence shard. The communicator moves member-major pieces; stream-ordered copies put
  // each sequence's rows in place (none when every microbatch is one sequence and the pieces come in order).
  void sequence_collective(const Op& op, int index, const SlotPtr& in, const SlotPtr& out, std::vector<EventPtr> deps) {
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

  // Expert tensor parallelism (Megatron-Core's expert TP equal to TP; docs/executor.md "Expert tensor
  // parallelism"): each TP rank holds a TP slice of every expert of its expert slice, so the tokens the dispatch
  // gave the TP group's members (each member routed its own sequence shard) are all-gathered over the group before
  // the experts run, and the experts' partial outputs (row-parallel down projections) reduce-scattered back to
  // the member that got each token. The members' token counts differ, so they go first, and the tokens are
  // padded to the longest member's, as NCCL's equal-count calls take them. The gathered rows are in the slice's
  // order by expert, then by (shard q, member i) of the EP group: source q·k + i of the gathered ExpertRows.
  void expert_collective(const Op& op, int index, const SlotPtr& in, const SlotPtr& out, std::vector<EventPtr> deps) {
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

  // Broadcast and reduce (NCCL's semantics, docs/schedule-format.md): a broadcast's root sends its tensor in
  // place and the others receive it into a new one; a reduce's members send theirs and the root alone gets the
  // sum into a new one.
  void rooted(const Op& op, int index) {
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

  // Issues op `i` of the step (and the gradient norm before the first update).
  void issue(const Op& op, int i) {
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
  StepOutput run(int step_index, RankState& st) {
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

  // The plan's state tensors, from what the rank holds at the end of the step (updated copies, step 1).
  RankState next_state() {
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
};

RankExecutor::RankExecutor(const ReplayContext& ctx, int rank, Device& device, Communicator& comm)
    : impl_(std::make_unique<Impl>(ctx, rank, device, comm)) {}

RankExecutor::~RankExecutor() {
  if (impl_) impl_->dev.drain();  // the work in flight uses the executor's state
}

StepOutput RankExecutor::run_step(int step, RankState& state) { return impl_->run(step, state); }

}  // namespace trainsim::exec
