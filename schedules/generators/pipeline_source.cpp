// build_pipeline (builder.h): a plan's schedule as a RankSource. The work that needs every rank (where each
// pass runs, the messages between ranks, when each pass would run and so where each receive goes) is done
// once, on the plan's steps; each rank's ops are then made when the rank is asked for, from that alone. A
// 16,384-rank 3D schedule is simulated one rank's ops at a time (schedules/rank_source.h).
#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "schedules/generators/builder.h"
#include "sim/cost_model.h"

namespace trainsim::gen {

namespace {

struct Where {
  int rank = -1;
  int index = -1;
};

struct Message {
  int src = 0, dst = 0;
  bool grad = false;  // an activation grad (of `layer`'s input), else an activation (`layer`'s input)
  int layer = 0, mb = 0;
  int send_step = 0;  // index of the producing step on src
  int consumer = 0;   // index of the consuming step on dst
  int pos = 0;        // the receive goes right before this step on dst
};

[[noreturn]] void bad_plan(const std::string& what) { throw std::logic_error("generator: inconsistent plan: " + what); }

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::F: return "F";
    case Pass::B: return "B";
    case Pass::I: return "I";
    case Pass::W: return "W";
  }
  return "?";
}

class PipelineSource final : public RankSource {
 public:
  explicit PipelineSource(PipelinePlan plan);
  const std::vector<Op>& ops(int rank) const override;
  bool holds_all() const override { return false; }
  std::size_t op_estimate() const override { return estimate_; }
  Schedule take() override;

 private:
  // At most: a receive, a load, the pass, a loss or a send, two frees and an accumulation per step, and
  // per layer a load, an all-gather and the finish (free, reduce-scatter, free, update, free); with TP
  // also the TP collectives (two all-gathers and a reduce-scatter or all-reduce) and their frees; with EP an MoE
  // layer's four all-to-alls, expert passes and frees per step, and per layer the expert slice's load, reduction
  // and update.
  std::size_t ops_bound(int base) const {
    return (plan_.tp > 1 || plan_.ep > 1 ? 14 : 8) * plan_.steps[base].size() +
           (plan_.ep > 1 ? 16 : 8) * static_cast<std::size_t>(plan_.layers) + 8;
  }
  void build_rank(int rank, std::vector<Op>& out) const;

  PipelinePlan plan_;
  // Indexed by a step list of one replica (PipelinePlan::replicas; the plan rank itself without replicas), with
  // messages between step lists and microbatch ids of replica 0.
  std::vector<int> grad_passes_;               // list * layers + layer -> its backward (or weight) passes
  std::vector<Message> msgs_;
  std::vector<std::vector<int>> send_after_;   // list -> step index -> the message it sends, or -1
  std::vector<std::vector<int>> recv_before_;  // list -> its messages, by the step they go before
  std::size_t estimate_ = 0;
  // The rank whose ops buffer_ holds (-1: none yet): the list ops() returned last, kept until the next call.
  mutable int built_ = -1;
  mutable std::vector<Op> buffer_;
};

PipelineSource::PipelineSource(PipelinePlan plan) : RankSource(ScheduleHeader{}), plan_(std::move(plan)) {
  const PipelinePlan& p = plan_;
  // The plan-wide work runs on one replica: P step lists, M microbatches (all of them without replicas).
  const int R = p.replicas, L = p.layers, dp = p.dp, T = p.tp;
  if (R < 1 || p.world_size % R != 0 || p.microbatches % R != 0)
    bad_plan("the plan ranks and microbatches split into the replicas");
  const int P = p.world_size / R, M = p.microbatches / R;
  if (static_cast<int>(p.steps.size()) != P) bad_plan("one step list per rank of a replica");
  if (T < 1 || T > Tensor::kMaxTpSize) bad_plan("a TP degree from 1 to 64");
  if (dp > 1 && (static_cast<int>(p.shard_index.size()) != p.world_size * T ||
                 static_cast<int>(p.group_of.size()) != p.world_size * T))
    bad_plan("shard_index and group_of need one entry per rank");
  if (T > 1 && static_cast<int>(p.tp_group.size()) != p.world_size) bad_plan("tp_group needs one entry per plan rank");
  if (p.ep > 1) {
    if ((T > 1 && !p.sequence_parallel) || (p.etp != 1 && p.etp != T) || (p.ep * p.etp) % T != 0 ||
        (T * dp) % (p.ep * p.etp) != 0 || R != dp ||
        p.dense_layers < 0 || p.dense_layers >= L ||
        static_cast<int>(p.ep_group.size()) != p.world_size * T || static_cast<int>(p.edp_group.size()) != p.world_size * T)
      bad_plan("expert parallelism: etp 1 or tp, ep x etp dividing tp x dp and a multiple of tp (with tp > 1, sequence "
               "parallelism), one "
               "replica per data-parallel rank, an MoE layer, and an EP and expert-data-parallel group per schedule "
               "rank");
  }

  // Where each pass runs.
  std::vector<Where> fwd(L * M), bwd(L * M), wgt(L * M);
  grad_passes_.assign(static_cast<std::size_t>(P) * L, 0);
  for (int r = 0; r < P; ++r)
    for (int i = 0; i < static_cast<int>(p.steps[r].size()); ++i) {
      const Step& s = p.steps[r][i];
      if (s.layer < 0 || s.layer >= L || s.mb < 0 || s.mb >= M)
        bad_plan(fmt::format("rank {} step {} is out of range", r, i));
      Where& w = s.pass == Pass::F ? fwd[s.layer * M + s.mb] : s.pass == Pass::W ? wgt[s.layer * M + s.mb] : bwd[s.layer * M + s.mb];
      if (w.rank >= 0) bad_plan(fmt::format("{} of layer {} batch {} twice", pass_name(s.pass), s.layer, s.mb));
      w = {r, i};
      if (s.pass == Pass::B || s.pass == Pass::W) ++grad_passes_[r * L + s.layer];
    }
  for (int l = 0; l < L; ++l)
    for (int b = 0; b < M; ++b) {
      const Where &f = fwd[l * M + b], &g = bwd[l * M + b], &w = wgt[l * M + b];
      if (f.rank < 0 || g.rank < 0) bad_plan(fmt::format("layer {} batch {} lacks a forward or a backward", l, b));
      if (f.rank != g.rank || g.index < f.index) bad_plan(fmt::format("layer {} batch {}: backward before forward", l, b));
      Pass gp = p.steps[g.rank][g.index].pass;
      if ((gp == Pass::I) != (w.rank >= 0)) bad_plan(fmt::format("layer {} batch {}: backward-input without weight", l, b));
      if (w.rank >= 0 && (w.rank != g.rank || w.index < g.index))
        bad_plan(fmt::format("layer {} batch {}: backward-weight before backward-input", l, b));
    }

  // Messages, in send order per channel: at most one per step.
  {
    std::size_t steps = 0;
    for (const auto& st : p.steps) steps += st.size();
    msgs_.reserve(steps);
  }
  std::map<std::pair<int, int>, std::vector<int>> channels;
  send_after_.resize(P);
  for (int r = 0; r < P; ++r) send_after_[r].assign(p.steps[r].size(), -1);
  for (int r = 0; r < P; ++r)
    for (int i = 0; i < static_cast<int>(p.steps[r].size()); ++i) {
      const Step& s = p.steps[r][i];
      Where c;
      bool grad = false;
      int layer = 0;
      if (s.pass == Pass::F && s.layer + 1 < L) {
        c = fwd[(s.layer + 1) * M + s.mb];
        layer = s.layer + 1;
      } else if ((s.pass == Pass::B || s.pass == Pass::I) && s.layer > 0) {
        c = bwd[(s.layer - 1) * M + s.mb];
        grad = true, layer = s.layer;
      } else {
        continue;
      }
      if (c.rank == r) continue;
      int id = static_cast<int>(msgs_.size());
      msgs_.push_back(Message{r, c.rank, grad, layer, s.mb, i, c.index, c.index});
      channels[{r, c.rank}].push_back(id);
      send_after_[r][i] = id;
    }
  // When each pass would run (dataflow, communication free as in the unit cost model), to place receives.
  auto cost = make_cost_model("unit");
  std::vector<std::vector<Time>> end(P);
  {
    std::vector<Time> clock(P, 0);
    Op op;  // the pass being timed (one op reused: only its kind, layer and batches matter to the cost model)
    auto finished = [&](const Where& w) { return w.index < static_cast<int>(end[w.rank].size()); };
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < P; ++r)
        while (end[r].size() < p.steps[r].size()) {
          const Step& s = p.steps[r][end[r].size()];
          Time ready = 0;
          const Where* dep = nullptr;
          if (s.pass == Pass::F && s.layer > 0) dep = &fwd[(s.layer - 1) * M + s.mb];
          if ((s.pass == Pass::B || s.pass == Pass::I) && s.layer + 1 < L) dep = &bwd[(s.layer + 1) * M + s.mb];
          if (dep) {
            if (!finished(*dep)) break;
            ready = end[dep->rank][dep->index];
          }
          op.kind = s.pass == Pass::F ? OpKind::Forward
                    : s.pass == Pass::B ? OpKind::Backward
                    : s.pass == Pass::I ? OpKind::BackwardInput
                                        : OpKind::BackwardWeight;
          op.layer = s.layer;
          op.batches = one(s.mb);
          clock[r] = std::max(clock[r], ready) + cost->duration(op, 1);
          end[r].push_back(clock[r]);
          progress = true;
        }
    }
    for (int r = 0; r < P; ++r)
      if (end[r].size() < p.steps[r].size()) bad_plan(fmt::format("rank {} waits for a pass that never runs", r));
  }
  // The receiver's clock before its step i.
  auto clock_before = [&](int r, int i) { return i == 0 ? Time{0} : end[r][i - 1]; };

  // A receive goes right before the pass that needs it, unless the sender would then send the next
  // message of the channel before this one is taken (one slot per pair): then it goes at the last step
  // boundary between the two messages' ready times, or the first after the first's. A channel delivers in
  // order, so a message is also received no later than the next one on its channel.
  recv_before_.resize(P);
  for (auto& [key, ids] : channels) {
    const int n = static_cast<int>(ids.size());
    for (int k = n - 1; k >= 0; --k) {
      Message& msg = msgs_[ids[k]];
      const Time ready = end[msg.src][msg.send_step];
      if (k + 1 < n) {
        const Message& next = msgs_[ids[k + 1]];
        const Time next_ready = end[next.src][next.send_step];
        if (clock_before(msg.dst, msg.consumer) > next_ready) {
          int best = -1;
          for (int i = msg.consumer; i >= 0; --i)
            if (clock_before(msg.dst, i) <= next_ready) {
              if (clock_before(msg.dst, i) >= ready) best = i;
              break;
            }
          for (int i = 0; best < 0 && i <= msg.consumer; ++i)
            if (clock_before(msg.dst, i) >= ready) best = i;
          if (best >= 0) msg.pos = best;
        }
        msg.pos = std::min(msg.pos, next.pos);
      }
    }
    for (int id : ids) recv_before_[msgs_[id].dst].push_back(id);
  }
  for (auto& ids : recv_before_)
    std::sort(ids.begin(), ids.end(), [&](int a, int b) {
      return std::tie(msgs_[a].pos, msgs_[a].send_step, msgs_[a].src) <
             std::tie(msgs_[b].pos, msgs_[b].send_step, msgs_[b].src);
    });

  header_ = make_header(p.world_size * T, L, p.microbatches);
  header_.stage_map = p.stage_map;
  header_.groups = p.groups;
  if (!p.group_names.empty()) header_.version = 2, header_.group_names = p.group_names;
  for (int r = 0; r < P; ++r) estimate_ += static_cast<std::size_t>(T) * R * ops_bound(r);
}

const std::vector<Op>& PipelineSource::ops(int rank) const {
  if (rank < 0 || rank >= header_.world_size)
    throw std::out_of_range(fmt::format("rank {} of a schedule of {} ranks", rank, header_.world_size));
  if (built_ != rank) {
    built_ = -1;  // (should building throw, the buffer holds no rank)
    build_rank(rank, buffer_);
    built_ = rank;
  }
  return buffer_;
}

Schedule PipelineSource::take() {
  Schedule s;
  s.header = header_;
  s.ranks.resize(header_.world_size);
  for (int rank = 0; rank < header_.world_size; ++rank) build_rank(rank, s.ranks[rank]);
  return s;
}

void PipelineSource::build_rank(int rank, std::vector<Op>& out) const {
  const PipelinePlan& plan = plan_;
  const int L = plan.layers, M = plan.microbatches, dp = plan.dp, T = plan.tp, R = plan.replicas;
  const int pr = rank / T, j = rank % T;  // the plan rank (the TP group) and the TP slice
  // Its replica and step list (PipelinePlan::replicas): replica `rep` runs list r on microbatch ids + shift, its
  // peers being plan ranks rep + R * list.
  const int r = pr / R, rep = pr % R, shift = rep * (M / R);
  auto plan_rank = [&](int list) { return rep + R * list; };
  const IdSet all = IdSet::range(0, M);
  const bool sp = plan.sequence_parallel && T > 1;
  // How a data-parallel group shards the weight and the optimizer state (1: whole).
  const int weight_shards = dp > 1 && plan.dp_mode == DpMode::Fsdp ? dp : 1;
  const int opt_shards = dp > 1 && plan.dp_mode != DpMode::Replicate ? dp : 1;

  out.clear();  // (the list's capacity is kept: the next rank's ops are made in the same memory)
  RankProgram prog(rank, L, M, std::move(out));
  prog.reserve(ops_bound(r));
  const int d = dp > 1 ? plan.shard_index[rank] : 0;
  const int dp_group = dp > 1 ? plan.group_of[rank] : 0, tp_group = T > 1 ? plan.tp_group[pr] : 0;
  // This rank's TP slice of a weight, optimizer state, weight grad or of the logits (sim/tensor.h); the
  // tensor itself without TP.
  auto slice = [&](Tensor t) { return tp_slice(std::move(t), j, T); };
  // What a row-parallel pass writes: this slice's partial sum (the plain tensor without TP).
  auto partial = [&](Tensor t) { return tp_partial(std::move(t), j, T); };
  // What the rank keeps of a complete activation or activation grad: with sequence parallelism its
  // sequence shard (the reduce-scatter's result), else the whole tensor.
  auto kept = [&](Tensor t) { return sp ? shard(t, j, T) : t; };
  // The whole tensor a pass reads: all-gathered over the TP group from a sequence shard (the caller
  // frees it after the pass), else `t` itself.
  auto gathered = [&](const Tensor& t, int layer) {
    if (t.num_shards == 1) return t;
    Tensor whole = t;
    whole.shards = IdSet::range(0, t.num_shards);
    prog.collective(OpKind::AllGather, layer, tp_group, t, whole);
    return whole;
  };
  // Sums a partial sum over the TP group (all-reduce, or reduce-scatter into this rank's sequence shard
  // with sequence parallelism); returns what the rank keeps. `p` stays resident: the caller frees it.
  auto tp_reduce = [&](const Tensor& p, const Tensor& whole, int layer) {
    if (T == 1) return p;
    Tensor out = kept(whole);
    prog.collective(sp ? OpKind::ReduceScatter : OpKind::AllReduce, layer, tp_group, p, out);
    return out;
  };
  // The model input, loaded whole by every TP rank; any other layer's input as the rank keeps it.
  auto input_kept = [&](int l, const IdSet& b) {
    return l == 0 ? activation_tensor(0, b) : kept(activation_tensor(l, b));
  };
  // Expert parallelism (PipelinePlan::ep): this rank's expert slice, its EP group's microbatches of a step. The EP
  // groups are carved out of the stage's TP x DP ranks in Megatron-Core's expert order etp-ep-edp: the rank's index
  // f = j + T·rep there has expert-TP index f mod Et, expert slice ej = (f / Et) mod E and expert-data-parallel index
  // eg = f / (Et·E); its EP group's replicas are the E·Et/T consecutive ones from eg·E·Et/T.
  const int E = std::max(plan.ep, 1), Et = E > 1 ? plan.etp : 1, f = j + T * rep, ej = (f / Et) % E, eg = f / (Et * E);
  const int Mr = M / R;
  const int edp = E > 1 ? T * dp / (E * Et) : 1;  // the expert-data-parallel degree
  const bool zero1 = plan.dp_mode == DpMode::Zero1;
  // With FSDP the slice's weight is sharded over its expert-data-parallel group too (and gathered before use).
  const int expert_shards = plan.dp_mode == DpMode::Fsdp && edp > 1 ? edp : 1;
  auto moe = [&](int l) {
    return E > 1 && l >= plan.dense_layers && !(l < static_cast<int>(plan.blockless.size()) && plan.blockless[l]);
  };
  const int edp_group = E > 1 ? plan.edp_group[rank] : 0;
  const ExpertPlace place{ej, E, E > 1 ? plan.ep_group[rank] : 0, j, sp ? T : 1,
                          plan.a2a_overlap ? PipelinePlan::a2a_stream : 0, expert_shards, Et, f % Et,
                          Et > 1 ? tp_group : 0};
  // This rank's part of an expert weight, grad or optimizer state: its expert slice (and with expert TP its TP slice).
  auto ex = [&](Tensor t) { return place.state(std::move(t)); };
  auto group_batches = [&](int mb) {
    std::vector<std::pair<int, int>> runs;
    const int first = eg * E * Et / T;
    for (int k = 0; k < E * Et / T; ++k) runs.emplace_back(mb + (first + k) * Mr, mb + (first + k) * Mr + 1);
    return IdSet::from_runs(std::move(runs));
  };
  // The grad of layer l's output as the rank keeps it: the last layer's is its vocabulary slice (an MoE last layer's
  // under sequence parallelism: its sequence shard, which the combine gave the loss).
  auto output_grad_kept = [&](int l, const IdSet& b) {
    return l == L - 1 && !(sp && moe(l)) ? slice(activation_grad_tensor(L, b)) : kept(activation_grad_tensor(l + 1, b));
  };
  // The slice's optimizer state: whole, or with ZeRO-1 and FSDP this rank's shard of its expert-data-parallel group.
  const bool expert_opt_sharded = zero1 || expert_shards > 1;
  auto expert_opt = [&](int l, int step) {
    return ex(opt_shard(l, expert_opt_sharded && edp > 1 ? eg : 0, expert_opt_sharded ? edp : 1, step));
  };

  std::vector<int> mine;
  for (const Step& s : plan.steps[r])
    if (std::find(mine.begin(), mine.end(), s.layer) == mine.end()) mine.push_back(s.layer);
  std::sort(mine.begin(), mine.end());
  if (!mine.empty()) {
    TensorList state;
    for (int l : mine) {
      state.push_back(slice(weight_shard(l, weight_shards > 1 ? d : 0, weight_shards)));
      state.push_back(slice(opt_shard(l, opt_shards > 1 ? d : 0, opt_shards)));
      if (moe(l)) {
        state.push_back(ex(weight_shard(l, expert_shards > 1 ? eg : 0, expert_shards)));
        state.push_back(expert_opt(l, 0));
      }
    }
    prog.load(std::move(state));
  }
  for (int l : mine) {
    if (weight_shards > 1)
      prog.collective(OpKind::AllGather, l, dp_group, slice(weight_shard(l, d, dp)), slice(weight_full(l, dp)),
                      plan.dp_stream);
    if (expert_shards > 1 && moe(l))
      prog.collective(OpKind::AllGather, l, edp_group, ex(weight_shard(l, eg, edp)), ex(weight_full(l, edp)),
                      plan.dp_stream);
  }

  std::vector<int> grads_done(L, 0);
  // With data parallelism a layer's grads are reduced over its group as soon as its last grad is ready (on
  // dp_stream, while the rank's other passes go on) and the optimizer steps after the rank's last pass, as DDP,
  // FSDP and ZeRO do; without it the layer is updated at once.
  std::vector<int> reduced;  // layers whose reduced grad waits for the optimizer step (taken in layer order)
  auto step_layer = [&](int l) {
    const Tensor w = slice(weight_shard(l, weight_shards > 1 ? d : 0, weight_shards));
    const Tensor o = slice(opt_shard(l, opt_shards > 1 ? d : 0, opt_shards));
    if (plan.dp_mode == DpMode::Fsdp) {
      const Tensor gs = slice(weight_grad_tensor(l, all, one(d), dp));
      prog.compute(OpKind::Update, l, {}, {gs, w, o}, {slice(weight_shard(l, d, dp, 1)), slice(opt_shard(l, d, dp, 1))});
      prog.free({w, o, gs});
      return;
    }
    const Tensor ga = slice(weight_grad_tensor(l, all));
    prog.compute(OpKind::Update, l, {}, {ga, w, o});
    prog.free({w, o, ga});
    if (plan.dp_mode == DpMode::Zero1) {  // every rank needs the whole updated weight
      Tensor w1 = slice(weight_shard(l, d, dp, 1));
      prog.collective(OpKind::AllGather, l, dp_group, w1, slice(weight_full(l, dp, 1)), plan.dp_stream);
      prog.free({w1});
    }
  };
  std::vector<Tensor> deferred;  // without data parallelism, with PipelinePlan::step_at_end: grads kept for the step
  auto update_whole = [&](int l, const Tensor& g) {
    const Tensor w = slice(weight_shard(l, 0, 1)), o = slice(opt_shard(l, 0, 1));
    prog.compute(OpKind::Update, l, {}, {g, w, o});
    prog.free({w, o, g});
  };
  auto finish_layer = [&](int l) {
    Tensor g = prog.take_grad(l);
    if (dp == 1) {
      if (g != slice(weight_grad_tensor(l, all))) bad_plan(fmt::format("layer {}'s grads on rank {} miss batches", l, rank));
      if (plan.step_at_end) deferred.push_back(g);
      else update_whole(l, g);
      return;
    }
    if (plan.dp_mode == DpMode::Fsdp) {
      prog.free({slice(weight_full(l, dp))});
      prog.collective(OpKind::ReduceScatter, l, dp_group, g, slice(weight_grad_tensor(l, all, one(d), dp)), plan.dp_stream);
    } else {  // DDP and ZeRO-1 (as gen ddp and gen zero1): the grads all-reduced over the data-parallel group
      prog.collective(OpKind::AllReduce, l, dp_group, g, slice(weight_grad_tensor(l, all)), plan.dp_stream);
    }
    prog.free({g});
    reduced.push_back(l);
  };
  // An MoE layer's expert slice: its grads summed over the EP group's microbatches, all-reduced over the ranks
  // holding the same slice, then (after the rank's last pass) the slice's update; with ZeRO-1 of its shard of
  // the expert-data-parallel group, then the weight all-gathered there.
  std::vector<int> reduced_experts;
  auto finish_experts = [&](int l) {
    Tensor g = prog.take_grad(l, true);
    if (expert_shards > 1) {  // FSDP: the gathered weight dropped, the grads reduce-scattered into this rank's shard
      prog.free({ex(weight_full(l, edp))});
      prog.collective(OpKind::ReduceScatter, l, edp_group, g, ex(weight_grad_tensor(l, all, one(eg), edp)),
                      plan.dp_stream);
      prog.free({g});
    } else if (edp > 1) {
      prog.collective(OpKind::AllReduce, l, edp_group, g, ex(weight_grad_tensor(l, all)), plan.dp_stream);
      prog.free({g});
    }
    reduced_experts.push_back(l);
  };
  auto step_experts = [&](int l) {
    const Tensor o = expert_opt(l, 0), o1 = expert_opt(l, 1);
    if (expert_shards > 1) {
      const Tensor w = ex(weight_shard(l, eg, edp)), gs = ex(weight_grad_tensor(l, all, one(eg), edp));
      prog.compute(OpKind::Update, l, {}, {gs, w, o}, {ex(weight_shard(l, eg, edp, 1)), o1});
      prog.free({w, o, gs});
      return;
    }
    const Tensor w = ex(weight_shard(l, 0, 1));
    const Tensor g = ex(weight_grad_tensor(l, all));
    if (zero1 && edp > 1) {
      Tensor w1 = ex(weight_shard(l, eg, edp, 1));
      prog.compute(OpKind::Update, l, {}, {g, w, o}, {w1, o1});
      prog.free({w, o, g});
      prog.collective(OpKind::AllGather, l, edp_group, w1, ex(weight_full(l, edp, 1)), plan.dp_stream);
      prog.free({w1});
      return;
    }
    Tensor w1 = w;
    ++w1.step;
    prog.compute(OpKind::Update, l, {}, {g, w, o}, {w1, o1});
    prog.free({w, o, g});
  };
  auto grad_done = [&](int l) {
    if (++grads_done[l] == grad_passes_[r * L + l]) {
      finish_layer(l);
      if (moe(l)) finish_experts(l);
    }
  };


  // One step's pass: what it reads and sends, and what it drops at its end.
  struct StepIo {
    const Step* s = nullptr;
    int l = 0;
    IdSet b;
    Tensor a, w, g_out;
    const Message* sent = nullptr;
    TensorList drop;     // (sized once: each growth past the inline tensor is a heap allocation)
    IdSet group;         // an MoE pass's: its EP group's microbatches of this step
    Tensor in, tokens;   // an MoE pass's gathered input, and its tokens between the all-to-alls
    Tensor grad;         // an MoE backward's routed grad
    std::vector<std::pair<int, Tensor>>* deferred = nullptr;  // where its send waits (a2a_overlap's pairs), else sent
  };
  auto step_io = [&](int i) {
    StepIo x;
    x.s = &plan.steps[r][i];
    x.l = x.s->layer;
    x.b = one(x.s->mb + shift);
    x.a = input_kept(x.l, x.b), x.w = slice(weight_full(x.l, weight_shards));
    x.g_out = output_grad_kept(x.l, x.b);
    if (send_after_[r][i] >= 0) x.sent = &msgs_[send_after_[r][i]];
    if (moe(x.l) && x.s->pass != Pass::W) x.group = group_batches(x.s->mb);
    x.drop.reserve(5);
    return x;
  };
  std::size_t next_recv = 0;
  auto receive_before = [&](int i, int stream) {
    for (; next_recv < recv_before_[r].size() && msgs_[recv_before_[r][next_recv]].pos == i; ++next_recv) {
      const Message& msg = msgs_[recv_before_[r][next_recv]];
      const IdSet mb = one(msg.mb + shift);
      prog.recv(j + T * plan_rank(msg.src),
                kept(msg.grad ? activation_grad_tensor(msg.layer, mb) : activation_tensor(msg.layer, mb)), stream);
    }
  };
  auto finish = [&](StepIo& x) {
    prog.free(std::move(x.drop));
    if (x.s->pass == Pass::B || x.s->pass == Pass::W) grad_done(x.l);
  };
  // Sends `t`, step x's message, now (true: the caller drops it with the step), or holds it for the sends after
  // a2a_overlap's pairs.
  auto send_out = [&](StepIo& x, const Tensor& t) {
    const int to = j + T * plan_rank(x.sent->dst);
    if (x.deferred) {
      x.deferred->emplace_back(to, t);
      return false;
    }
    prog.send(to, t);
    return true;
  };
  // An MoE layer's forward in phases (the dense part writes its output routed; the dispatch; the slice's experts on
  // the EP group's microbatches of this step; the combine: docs/design.md, "Mixture of Experts"), then its loss or
  // send.
  auto moe_f_dense = [&](StepIo& x) {
    if (x.l == 0) prog.load({x.a});
    x.in = gathered(x.a, x.l);
    if (x.in != x.a) x.drop.push_back(x.in);
    x.tokens = moe_dense_forward(prog, x.l, x.b, place, x.in, x.w);
  };
  auto moe_f_dispatch = [&](StepIo& x) { x.tokens = moe_dispatch(prog, x.l, x.group, place, x.tokens); };
  auto moe_f_experts = [&](StepIo& x) { x.tokens = moe_experts_forward(prog, x.l, x.group, place, x.tokens); };
  auto moe_f_combine = [&](StepIo& x) {
    const Tensor out = kept(activation_tensor(x.l + 1, x.b));
    moe_combine(prog, x.l, place, x.tokens, out);
    x.tokens = out;
  };
  auto moe_f_end = [&](StepIo& x) {
    const Tensor& out = x.tokens;
    if (x.l == L - 1) {
      prog.compute(OpKind::Loss, L, x.b, {out}, {kept(activation_grad_tensor(L, x.b))});
      x.drop.push_back(out);
    } else if (x.sent && send_out(x, out)) {
      x.drop.push_back(out);
    }
    finish(x);
  };
  // An MoE layer's backward's experts' half in phases: the output's grad (with sequence parallelism its shard,
  // ungathered) dispatched to the experts (and freed), their backward (input and weight grads: the experts' whole
  // backward runs in the input-grad pass of a split backward too), the combine back into the routed grad.
  auto moe_b_dispatch = [&](StepIo& x) { x.tokens = moe_grad_dispatch(prog, x.l, x.group, place, x.g_out); };
  auto moe_b_experts = [&](StepIo& x) { x.tokens = moe_experts_backward(prog, x.l, x.group, place, x.tokens); };
  auto moe_b_combine = [&](StepIo& x) { x.grad = moe_grad_combine(prog, x.l, x.b, place, x.tokens); };
  // A backward (B) or backward-input (I) pass's dense part: an MoE layer's reads the routed grad (freed with the
  // pass, or kept for the dense part's weight-grad pass).
  auto backward = [&](StepIo& x) {
    const int l = x.l;
    const bool full = x.s->pass == Pass::B;
    const Tensor in = gathered(x.a, l);
    const Tensor grad = moe(l) ? x.grad : gathered(x.g_out, l);
    if (in != x.a) x.drop.push_back(in);
    if (grad != x.g_out && (full || !moe(l))) x.drop.push_back(grad);
    TensorList writes;
    if (full) writes.reserve(2), writes.push_back(slice(weight_grad_tensor(l, x.b)));
    const Tensor g_partial = partial(activation_grad_tensor(l, x.b));
    writes.push_back(g_partial);
    prog.compute(full ? OpKind::Backward : OpKind::BackwardInput, l, x.b, {in, grad, x.w}, std::move(writes));
    if (full) x.drop.push_back(x.a);
    if (full && !moe(l)) x.drop.push_back(x.g_out);
    // The weight grad joins the running sum at once, as the frameworks accumulate inside the backward
    // (Megatron-LM's main_grad buffers, PyTorch's .grad): the microbatch's grad and the sum are never both
    // held past the pass. (The layer's update or DP reduction waits for the end of the step: grad_done.)
    if (full) prog.add_grad(slice(weight_grad_tensor(l, x.b)));
    // Nothing reads the model input's grad: layer 0's partial sum is dropped, not reduced.
    Tensor g_in = l > 0 ? tp_reduce(g_partial, activation_grad_tensor(l, x.b), l) : g_partial;
    if (g_in != g_partial) x.drop.push_back(g_partial);
    if ((x.sent && send_out(x, g_in)) || l == 0) x.drop.push_back(g_in);
    finish(x);
  };
  // Sends a2a_overlap's pairs held back, in the order the steps alone would have sent them (a channel's messages
  // are matched in order), then frees what they sent.
  auto send_deferred = [&](std::vector<std::pair<int, Tensor>>& sends) {
    TensorList sent;
    for (auto& [to, t] : sends) prog.send(to, t), sent.push_back(std::move(t));
    if (!sent.empty()) prog.free(std::move(sent));
    sends.clear();
  };

  // One step, alone: its pass's ops.
  auto run_step = [&](int i) {
    StepIo x = step_io(i);
    const int l = x.l;
    const IdSet& b = x.b;
    switch (x.s->pass) {
      case Pass::F: {
        if (moe(l)) {
          moe_f_dense(x), moe_f_dispatch(x), moe_f_experts(x), moe_f_combine(x), moe_f_end(x);
          return;
        }
        if (l == 0) prog.load({x.a});
        const Tensor in = gathered(x.a, l);
        if (in != x.a) x.drop.push_back(in);
        if (l == L - 1) {
          Tensor out = slice(activation_tensor(L, b));  // the LM head is column-parallel: a vocabulary slice
          prog.compute(OpKind::Forward, l, b, {in, x.w}, {out});
          prog.compute(OpKind::Loss, L, b, {out}, {slice(activation_grad_tensor(L, b))});
          x.drop.push_back(out);
        } else {
          Tensor out = partial(activation_tensor(l + 1, b));
          prog.compute(OpKind::Forward, l, b, {in, x.w}, {out});
          Tensor next = tp_reduce(out, activation_tensor(l + 1, b), l);
          if (next != out) x.drop.push_back(out);
          if (x.sent && send_out(x, next)) x.drop.push_back(next);
        }
        finish(x);
        return;
      }
      case Pass::B:
      case Pass::I:
        if (moe(l)) moe_b_dispatch(x), moe_b_experts(x), moe_b_combine(x);
        backward(x);
        return;
      case Pass::W: {
        // An MoE layer's dense part: its weight grad from the routed grad its input-grad pass kept.
        const Tensor in = gathered(x.a, l);
        const Tensor grad =
            moe(l) ? place.tokens(routed_as(activation_grad_tensor(l + 1, b), Route::Routed)) : gathered(x.g_out, l);
        if (in != x.a) x.drop.push_back(in);
        if (grad != x.g_out) x.drop.push_back(grad);
        prog.compute(OpKind::BackwardWeight, l, b, {in, grad}, {slice(weight_grad_tensor(l, b))});
        prog.add_grad(slice(weight_grad_tensor(l, b)));
        x.drop.push_back(x.a);
        if (!moe(l)) x.drop.push_back(x.g_out);
        finish(x);
        return;
      }
    }
  };

  const std::vector<Step>& steps = plan.steps[r];
  const int n_steps = static_cast<int>(steps.size());
  auto moe_pass = [&](int i, bool forward) {
    return i < n_steps && moe(steps[i].layer) &&
           (forward ? steps[i].pass == Pass::F : steps[i].pass == Pass::B || steps[i].pass == Pass::I);
  };
  for (int i = 0; i < n_steps; ++i) {
    // gen 3d --a2a-overlap (as Megatron-LM's combined 1F1B and DeepSeek-V3's DualPipe do): a run of forwards of MoE
    // layers and the run of backwards after it (a stage chunk's layers each way, each run one microbatch's), of
    // another microbatch, go by pairs, the first forward with the first backward and so on. A pair is interleaved by
    // phase so that each one's all-to-alls (on their own stream) run under the other's compute: the backward's grad
    // dispatch under the forward's dense part, the forward's dispatch under the backward's experts, the backward's
    // combine under the forward's experts, the forward's combine under the backward's dense part. The runs' messages are received
    // first (a pair needs both its inputs, as Megatron-LM's combined 1F1B receives them) and sent after the pairs,
    // in the steps' order; the unpaired rest runs after the pairs as it would alone.
    int k = 0, m = 0, pairs = 0;
    if (plan.a2a_overlap && moe_pass(i, true)) {
      // (each run one microbatch's: a stage chunk's pass; a second one's receive would wait for the pairs' sends)
      while (moe_pass(i + k, true) && steps[i + k].mb == steps[i].mb) ++k;
      while (moe_pass(i + k + m, false) && steps[i + k + m].mb == steps[i + k].mb) ++m;
      // (the last stage's backward of a microbatch it just ran forward waits for that forward's loss: not paired)
      if (m > 0 && steps[i + k].mb != steps[i].mb) pairs = std::min(k, m);
    }
    if (pairs == 0) {
      receive_before(i, 0);
      run_step(i);
      continue;
    }
    for (int q = i; q < i + k + m; ++q) receive_before(q, 0);
    std::vector<std::pair<int, Tensor>> forward_sends, backward_sends;
    for (int q = 0; q < pairs; ++q) {
      StepIo f = step_io(i + q), bw = step_io(i + k + q);
      f.deferred = &forward_sends, bw.deferred = &backward_sends;
      moe_b_dispatch(bw);
      moe_f_dense(f);
      moe_f_dispatch(f);
      moe_b_experts(bw);
      moe_b_combine(bw);
      moe_f_experts(f);
      moe_f_combine(f);
      backward(bw);
      moe_f_end(f);
    }
    send_deferred(forward_sends);
    for (int q = pairs; q < k; ++q) run_step(i + q);
    send_deferred(backward_sends);
    for (int q = pairs; q < m; ++q) run_step(i + k + q);
    i += k + m - 1;
  }
  std::sort(reduced.begin(), reduced.end());
  std::sort(reduced_experts.begin(), reduced_experts.end());
  std::size_t next_expert = 0;
  for (int l : reduced) {
    for (; next_expert < reduced_experts.size() && reduced_experts[next_expert] < l; ++next_expert)
      step_experts(reduced_experts[next_expert]);
    step_layer(l);
    if (next_expert < reduced_experts.size() && reduced_experts[next_expert] == l) step_experts(l), ++next_expert;
  }
  // (Without data parallelism, an EP group of TP ranks alone: the dense layers were stepped above or are deferred.)
  for (; next_expert < reduced_experts.size(); ++next_expert) step_experts(reduced_experts[next_expert]);
  std::sort(deferred.begin(), deferred.end(), [](const Tensor& a, const Tensor& b) { return a.layer < b.layer; });
  for (const Tensor& g : deferred) update_whole(g.layer, g);
  out = std::move(prog.ops());
}

}  // namespace

PipelinePlan expand_replicas(PipelinePlan plan) {
  const int R = plan.replicas;
  if (R == 1) return plan;
  if (R < 1 || plan.world_size % R != 0 || plan.microbatches % R != 0 ||
      static_cast<int>(plan.steps.size()) * R != plan.world_size)
    bad_plan("the plan ranks and microbatches split into the replicas");
  const int M = plan.microbatches / R;
  std::vector<std::vector<Step>> steps(plan.world_size);
  for (int list = 0; list < static_cast<int>(plan.steps.size()); ++list)
    for (int d = 0; d < R; ++d)
      for (const Step& st : plan.steps[list]) steps[d + R * list].push_back({st.pass, st.layer, st.mb + d * M});
  plan.steps = std::move(steps);
  plan.replicas = 1;
  return plan;
}

std::unique_ptr<RankSource> build_pipeline(PipelinePlan plan) {
  return std::make_unique<PipelineSource>(std::move(plan));
}

}  // namespace trainsim::gen
