#include "exec/plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "schedules/replay.h"

namespace trainsim::exec {

namespace {


const std::vector<int>& members(const ReplayPlan& plan, int group) { return plan.groups.at(group); }

// Applies what `op` does to the tensors its rank holds (the simulator's ledger, without the timing).
void apply(const Op& op, std::map<Tensor, int>& held) {
  if (op.kind == OpKind::Free) {
    for (const Tensor& t : op.reads)
      if (auto it = held.find(t); it != held.end() && --it->second == 0) held.erase(it);
    return;
  }
  for (const Tensor& t : op.writes) ++held[t];
}

void resolve_peers(const Schedule& s, ReplayPlan& plan) {
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    RankPlan& rp = plan.ranks[r];
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Op& op = s.ranks[r][i];
      if (op.kind == OpKind::Send || (op.kind == OpKind::Recv && op.peer >= 0)) rp.peer[i] = op.peer;
      if (op.kind != OpKind::Recv || op.peer >= 0) continue;
      std::vector<int> senders;
      for (std::size_t q = 0; q < s.ranks.size(); ++q)
        for (const Op& o : s.ranks[q])
          if (o.kind == OpKind::Send && o.peer == static_cast<int>(r) && o.reads.front() == op.writes.front() &&
              std::find(senders.begin(), senders.end(), static_cast<int>(q)) == senders.end())
            senders.push_back(static_cast<int>(q));
      if (senders.size() != 1)
        throw PlanError(fmt::format("{}: cannot replay a receive from any source when {} rank{} send {} to rank {}; "
                                    "name the source (recv from R)",
                                    op.label(), senders.size(), senders.size() == 1 ? "" : "s", op.writes.front().str(), r));
      rp.peer[i] = senders.front();
    }
  }
}

void assign_losses(const Schedule& s, ReplayPlan& plan) {
  IdSet reported;
  for (std::size_t r = 0; r < s.ranks.size(); ++r)
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Op& op = s.ranks[r][i];
      if (op.kind != OpKind::Loss) continue;
      IdSet mine;
      for (int b : op.writes.front().batches.ids())
        if (!reported.contains(b)) mine.insert(b), reported.insert(b);
      plan.ranks[r].reported_batches[i] = mine;
    }
}

void order_gathers(const Schedule& s, ReplayPlan& plan) {
  // Pair the k-th collective call of every member of a group (the simulator checked that they agree).
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> calls;  // (group, k) -> (rank, op index)
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    std::map<int, int> seq;
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Op& op = s.ranks[r][i];
      if (is_collective(op.kind)) calls[{op.group, seq[op.group]++}].push_back({static_cast<int>(r), static_cast<int>(i)});
    }
  }
  for (const auto& [key, ops] : calls) {
    const Op& first = s.ranks[ops.front().first][ops.front().second];
    if (first.kind != OpKind::AllGather) continue;
    const std::vector<int>& group = members(plan, key.first);
    std::vector<const Tensor*> pieces(group.size(), nullptr);
    for (auto [r, i] : ops) {
      auto pos = std::find(group.begin(), group.end(), r) - group.begin();
      pieces[pos] = &s.ranks[r][i].reads.front();
    }
    const int per = pieces.front()->shards.size();
    for (std::size_t j = 0; j < pieces.size(); ++j)
      if (!pieces[j] || pieces[j]->shards.size() != per)
        throw PlanError(fmt::format("{}: all-gather of unequal pieces ({} holds {} shard(s), rank {} holds {}): NCCL's "
                                    "all-gather takes the same count from every member",
                                    first.label(), first.reads.front().str(), per, group[j],
                                    pieces[j] ? pieces[j]->shards.size() : 0));
    // Member-major block of each shard id, then the blocks in increasing shard order.
    std::map<int, int> block;
    for (std::size_t j = 0; j < pieces.size(); ++j) {
      std::vector<int> ids = pieces[j]->shards.ids();
      for (std::size_t x = 0; x < ids.size(); ++x) block[ids[x]] = static_cast<int>(j * per + x);
    }
    std::vector<int> order;
    bool identity = true;
    for (const auto& [id, b] : block) {
      identity = identity && b == static_cast<int>(order.size());
      order.push_back(b);
    }
    if (!identity)
      for (auto [r, i] : ops) plan.ranks[r].gather_order[i] = order;
  }
}

// Flat element ranges [begin, end) of the shards an update writes, within the layer's P elements.
std::vector<std::pair<long, long>> update_ranges(const Op& op, long P) {
  const Tensor& o = tensor_of(op.reads, TensorKind::OptState);
  const long c = shard_chunk(P, o.num_shards);
  std::vector<std::pair<long, long>> out;
  for (const auto& [lo, hi] : o.shards.runs()) {
    long b = lo * c, e = std::min(P, hi * c);
    if (b < e) out.push_back({b, e});
  }
  return out;
}

// Removes `claimed` from [b, e); returns the pieces left.
std::vector<std::pair<long, long>> subtract(long b, long e, const std::vector<std::pair<long, long>>& claimed) {
  std::vector<std::pair<long, long>> out;
  long cur = b;
  for (const auto& [cb, ce] : claimed) {  // sorted, disjoint
    if (ce <= cur) continue;
    if (cb >= e) break;
    if (cb > cur) out.push_back({cur, cb});
    cur = std::max(cur, ce);
    if (cur >= e) break;
  }
  if (cur < e) out.push_back({cur, e});
  return out;
}

void assign_norm(const Schedule& s, const ModelShapes& shapes, ReplayPlan& plan) {
  // Claimed ranges by (layer, TP degree, TP slice, expert slice): slices are different parameters, but the norm
  // gains every TP slice holds whole are one parameter, counted by slice 0 only.
  std::map<std::tuple<int, int, int, int, int>, std::vector<std::pair<long, long>>> claimed;
  for (std::size_t r = 0; r < s.ranks.size(); ++r)
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Op& op = s.ranks[r][i];
      if (op.kind != OpKind::Update) continue;
      RankPlan& rp = plan.ranks[r];
      if (rp.first_update < 0) rp.first_update = static_cast<int>(i);
      const Tensor& ot = tensor_of(op.reads, TensorKind::OptState);
      const auto key = std::make_tuple(op.layer, static_cast<int>(ot.tp_size), ot.tp_index(), static_cast<int>(ot.ep_size),
                                       static_cast<int>(ot.ep_index));
      auto [it, fresh] = claimed.try_emplace(key);
      auto& cl = it->second;
      if (fresh && ot.tp_index() > 0) {
        for (const ParamSpec& p : shapes.layout(ot).params())
          if (p.tp_replicated) cl.push_back({p.offset, p.offset + p.size()});
        std::sort(cl.begin(), cl.end());
      }
      for (auto [b, e] : update_ranges(op, shapes.parameters(ot)))
        for (auto [pb, pe] : subtract(b, e, cl)) {
          rp.norm_parts.push_back({static_cast<int>(i), pb, pe});
          cl.push_back({pb, pe});
          std::sort(cl.begin(), cl.end());
        }
    }
}

// Why global-norm clipping cannot run on this schedule (a clause: "rank 0 runs update layer 0 before it has
// dW1{0-3}, which ... reads, and ..."), or "" when it can.
std::string clip_problem(const Schedule& s, ReplayPlan& plan) {
  std::vector<int> updaters;
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const RankPlan& rp = plan.ranks[r];
    if (rp.first_update < 0) continue;
    updaters.push_back(static_cast<int>(r));
    // Every grad this rank's updates read must exist when its first update runs.
    std::map<Tensor, int> held;
    for (int i = 0; i < rp.first_update; ++i) apply(s.ranks[r][i], held);
    for (std::size_t i = rp.first_update; i < s.ranks[r].size(); ++i) {
      const Op& op = s.ranks[r][i];
      if (op.kind != OpKind::Update) continue;
      const Tensor& dw = tensor_of(op.reads, TensorKind::WeightGrad);
      if (!held.count(dw)) {
        const Op& first = s.ranks[r][rp.first_update];
        return fmt::format("rank {} runs {}{} before it has {}, which {}{} reads, and clipping by the global norm needs "
                           "every gradient before the first update",
                           r, first.describe(), first.where_suffix(), dw.str(), op.describe(), op.where_suffix());
      }
    }
  }
  if (updaters.empty()) return "";
  // An all-reduce of the norm over the updating ranks, just before each one's first update, must not deadlock:
  // check it in the simulator with a barrier in its place.
  Schedule probe = s;
  int group = 0;
  if (updaters.size() != s.ranks.size()) {
    probe.header.groups.push_back(updaters);
    group = static_cast<int>(probe.header.groups.size());
  }
  for (int r : updaters) {
    Op b;
    b.kind = OpKind::Barrier, b.rank = r, b.group = group, b.where = "(gradient norm)";
    probe.ranks[r].insert(probe.ranks[r].begin() + plan.ranks[r].first_update, b);
  }
  SimResult res = simulate(probe);
  if (!res.ok) {
    std::string first = res.error.substr(0, res.error.find('\n'));
    return "an all-reduce of the gradient norm before each rank's first update would not complete: " + first;
  }
  if (group != 0) {  // (the communicator's index of the group, which may differ from the probe's)
    plan.groups.push_back(updaters);
    group = static_cast<int>(plan.groups.size()) - 1;
  }
  plan.norm_group = group;
  return "";
}

void carry_state(const Schedule& s, const ModelShapes& shapes, ReplayPlan& plan) {
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    RankPlan& rp = plan.ranks[r];
    std::map<Tensor, int> held;
    std::size_t bytes = 0;
    for (const Op& op : s.ranks[r]) {
      if (op.kind == OpKind::Load)
        for (const Tensor& t : op.writes)
          if ((t.kind == TensorKind::Weight || t.kind == TensorKind::OptState) &&
              std::find(rp.state.begin(), rp.state.end(), t) == rp.state.end())
            rp.state.push_back(t);
      if (op.kind == OpKind::Free) {
        for (const Tensor& t : op.reads)
          if (held.count(t)) bytes -= shapes.bytes(t);
      } else {
        for (const Tensor& t : op.writes) bytes += shapes.bytes(t);
      }
      apply(op, held);
      rp.peak_bytes = std::max(rp.peak_bytes, bytes);
    }
    for (const Tensor& t : rp.state) {
      bool found = false;
      for (const auto& [u, n] : held)
        if (u.kind == t.kind && u.layer == t.layer && u.step == 1 && u.tp_size == t.tp_size &&
            u.tp_slices == t.tp_slices && u.ep_size == t.ep_size && u.ep_index == t.ep_index &&
            ((t.kind == TensorKind::Weight && u.complete()) ||
             (u.num_shards == t.num_shards && u.shards.contains(t.shards))))
          found = true;
      if (!found && plan.repeatable) {
        plan.repeatable = false;
        plan.repeat_note = fmt::format(
            "rank {} loads {} at the start of every step but holds no updated copy of it (at step 1) when the step "
            "ends, so the schedule cannot run a second step",
            r, t.str());
      }
    }
  }
}

// The communicator group of each collective (RankPlan::comm_group). A communicator numbers a group's calls in
// the order they run, and a rank's streams run in any order relative to each other, so a group whose collectives
// run on several streams gets a copy per stream: the calls on one stream are numbered alike on every member when
// every member runs the group's k-th collective (in program order, the simulator's matching) on the same stream,
// which is checked here. A group on one stream keeps its own communicator group.
void plan_collective_streams(const Schedule& s, ReplayPlan& plan) {
  const std::size_t schedule_groups = plan.groups.size();
  std::vector<std::vector<int>> streams(schedule_groups);  // group -> the streams of its collectives
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    plan.ranks[r].comm_group.assign(s.ranks[r].size(), -1);
    for (const Op& op : s.ranks[r]) {
      if (!is_collective(op.kind) || op.group < 0 || op.group >= static_cast<int>(schedule_groups)) continue;
      auto& v = streams[op.group];
      if (std::find(v.begin(), v.end(), op.stream) == v.end()) v.push_back(op.stream);
    }
  }
  std::map<std::pair<int, int>, int> copy;  // (group, stream) -> communicator group, for groups on several streams
  for (std::size_t g = 0; g < schedule_groups; ++g) {
    if (streams[g].size() < 2) continue;
    std::sort(streams[g].begin(), streams[g].end());
    for (int stream : streams[g]) {
      plan.groups.push_back(plan.groups[g]);
      copy[{static_cast<int>(g), stream}] = static_cast<int>(plan.groups.size()) - 1;
    }
  }
  // The k-th collective of each group on each rank, against the first rank's that makes it: the same stream.
  std::vector<std::vector<std::pair<int, const Op*>>> first(schedule_groups);  // group -> k -> (stream, op)
  std::vector<std::size_t> k(schedule_groups);
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    std::fill(k.begin(), k.end(), 0);
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Op& op = s.ranks[r][i];
      if (!is_collective(op.kind) || op.group < 0 || op.group >= static_cast<int>(schedule_groups)) continue;
      const int g = op.group;
      if (streams[g].size() < 2) {
        plan.ranks[r].comm_group[i] = g;
        continue;
      }
      plan.ranks[r].comm_group[i] = copy.at({g, op.stream});
      const std::size_t n = k[g]++;
      auto& seen = first[g];
      if (n == seen.size()) {
        seen.emplace_back(op.stream, &op);
      } else if (seen[n].first != op.stream) {
        throw PlanError(fmt::format(
            "{}: collective #{} of group {} runs on stream {} here but on stream {} on rank {} ({}): the executor "
            "runs a group's collectives of one stream over a communicator of their own, so every member must run "
            "each of the group's collectives on the same stream",
            op.label(), n, g, op.stream, seen[n].first, seen[n].second->rank, seen[n].second->describe()));
      }
    }
  }
}

// Tensor parallelism: each rank's TP group and the communicator groups of the reductions inside its compute
// ops; refuses what the executor cannot run (docs/executor.md, "Tensor parallelism").
void plan_tensor_parallel(const Schedule& s, ReplayPlan& plan) {
  std::map<std::pair<int, int>, int> comm_group;  // (TP group, stream) -> communicator group
  std::map<std::pair<int, int>, std::map<int, std::vector<int>>> order;  // (TP group, stream) -> rank -> op indices
  std::vector<int> tp_group;  // rank -> its TP group (tp_groups_by_rank), 0 for none; empty until needed
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    RankPlan& rp = plan.ranks[r];
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Op& op = s.ranks[r][i];
      const int t = compute_tp_size(op, s.header.layers);
      if (t <= 1) continue;
      if (rp.tp_size > 1 && rp.tp_size != t)
        throw PlanError(fmt::format("{}: it computes with a TP degree of {}, but rank {}'s compute ops before it with {}: "
                                    "the executor runs one TP degree per rank",
                                    op.label(), t, r, rp.tp_size));
      rp.tp_size = t;
      if (tp_group.empty()) {  // each rank's TP group, once, when the first TP compute op needs it
        try {
          tp_group = tp_groups_by_rank(s.header);
        } catch (const std::invalid_argument& e) {
          throw PlanError(fmt::format("{}: {}", op.label(), e.what()));
        }
      }
      const int g = r < tp_group.size() ? tp_group[r] : 0;
      if (g == 0)
        throw PlanError(fmt::format("{}: it computes a TP slice of {}, but rank {} is in no TP group: name its group in "
                                    "the header with a name starting 'tp' (e.g. 'group 1 tp0 0 1', format version 2)",
                                    op.label(), t, r));
      if (static_cast<int>(plan.groups.at(g).size()) != t)
        throw PlanError(fmt::format("{}: it computes a TP slice of {}, but rank {}'s TP group {} ('{}') has {} ranks",
                                    op.label(), t, r, g, s.header.group_names.at(g - 1), plan.groups.at(g).size()));
      rp.tp_group = g;
      const std::pair<int, int> key{g, op.stream};
      if (!comm_group.count(key)) {
        plan.groups.push_back(plan.groups[g]);
        comm_group[key] = static_cast<int>(plan.groups.size()) - 1;
      }
      if (static_cast<int>(rp.tp_comm_groups.size()) <= op.stream) rp.tp_comm_groups.resize(op.stream + 1, -1);
      rp.tp_comm_groups[op.stream] = comm_group[key];
      order[key][static_cast<int>(r)].push_back(static_cast<int>(i));
    }
  }
  // Each compute op of a TP slice is collective over the TP group: the members must run them in the same order
  // on each stream (the same layers and batches), or the reductions inside would pair the wrong ops.
  for (const auto& [key, by_rank] : order) {
    const std::vector<int>& members = plan.groups.at(key.first);
    const int r0 = members.front();
    auto it0 = by_rank.find(r0);
    static const std::vector<int> none;
    const std::vector<int>& first = it0 == by_rank.end() ? none : it0->second;
    for (int r : members) {
      auto it = by_rank.find(r);
      const std::vector<int>& mine = it == by_rank.end() ? none : it->second;
      for (std::size_t k = 0; k < std::max(first.size(), mine.size()); ++k) {
        const Op* a = k < first.size() ? &s.ranks[r0][first[k]] : nullptr;
        const Op* b = k < mine.size() ? &s.ranks[r][mine[k]] : nullptr;
        if (a && b && a->kind == b->kind && a->layer == b->layer && a->batches == b->batches) continue;
        const Op* shown = b ? b : a;
        throw PlanError(fmt::format(
            "{}: the members of TP group {} ('{}') must run the same compute ops in the same order on stream {} (each "
            "is collective over the group), but compute op {} on that stream is {} on rank {} and {} on rank {}",
            shown->label(), key.first, s.header.group_names.at(key.first - 1), key.second, k + 1,
            a ? a->describe() : std::string("nothing"), r0, b ? b->describe() : std::string("nothing"), r));
      }
    }
  }
}

// Mixture of Experts: what the executor replays of it (docs/executor.md "Mixture of Experts"): an expert slice's
// backward whole (its layer's dense part may split it), the model's experts where the schedule puts them.
void check_moe_op(const Op& op, const ModelShapes& shapes) {
  const bool compute = op.kind == OpKind::Forward || op.kind == OpKind::Backward || op.kind == OpKind::BackwardInput ||
                       op.kind == OpKind::BackwardWeight;
  if (!compute || op.layer < 0 || op.layer >= shapes.layers()) return;
  const bool split = shapes.expert_parallel.count(op.layer) > 0;
  if (split && expert_weight(op) && (op.kind == OpKind::BackwardInput || op.kind == OpKind::BackwardWeight))
    throw PlanError(fmt::format("{}: layer {}'s expert slice runs its backward whole in the executor (a backward op, "
                                "not backward-input and backward-weight; gen 3d --ep writes it so)",
                                op.label(), op.layer));
  if (!split && shapes.model.moe() && shapes.layouts.at(op.layer).has_moe())
    for (const auto* ts : {&op.reads, &op.writes})
      for (const Tensor& t : *ts)
        if (t.route != Route::None)
          throw PlanError(fmt::format("{}: it reads or writes MoE tokens ({}) of layer {}, whose experts the schedule "
                                      "does not put in expert slices",
                                      op.label(), t.str(), op.layer));
}

// Each all-to-all's group: member i holds expert slice i of as many as the group has members (the executor
// sends member i the tokens of slice i's experts).
void check_all_to_alls(const Schedule& s, const ReplayPlan& plan) {
  for (std::size_t r = 0; r < s.ranks.size(); ++r)
    for (const Op& op : s.ranks[r]) {
      if (op.kind != OpKind::AllToAll) continue;
      const Tensor& side = op.writes.front().expert() ? op.writes.front() : op.reads.front();
      const std::vector<int>& members = plan.groups.at(op.group);
      const auto me = std::find(members.begin(), members.end(), static_cast<int>(r)) - members.begin();
      if (!side.expert() || side.ep_size != members.size() || side.ep_index != me)
        throw PlanError(fmt::format("{}: the executor runs an all-to-all over an EP group whose member i holds expert "
                                    "slice i of as many as the group has ranks; rank {} is member {} of {} here and "
                                    "{} is {}",
                                    op.label(), r, me, members.size(), side.str(),
                                    side.expert() ? fmt::format("slice {} of {}", side.ep_index, side.ep_size)
                                                  : std::string("no expert slice's")));
    }
}

}  // namespace

int compute_tp_size(const Op& op, int layers) {
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward:
    case OpKind::BackwardInput:
      for (const Tensor& t : op.reads)
        if (t.kind == TensorKind::Weight) return t.tp_size;
      return 1;
    case OpKind::BackwardWeight:
      for (const Tensor& t : op.writes)
        if (t.kind == TensorKind::WeightGrad) return t.tp_size;
      return 1;
    case OpKind::Loss:
      if (op.reads.empty()) return 1;
      if (op.reads.front().layer == layers && op.reads.front().num_shards > 1) return op.reads.front().num_shards;
      return op.reads.front().tp_size;
    case OpKind::AllToAll:
      // (an MoE last layer's combine, which writes the final activation's sequence shard, and its backward
      // dispatch, which reads its grad: the LM head's TP calls run inside them)
      for (const auto* ts : {&op.reads, &op.writes})
        for (const Tensor& t : *ts)
          if (t.layer == layers && t.route == Route::None && t.num_shards > 1) return t.num_shards;
      return 1;
    default: return 1;
  }
}

std::vector<int> tp_degrees(const Schedule& schedule) {
  std::set<int> found;
  for (const auto& ops : schedule.ranks)
    for (const Op& op : ops)
      for (const auto* ts : {&op.reads, &op.writes})
        for (const Tensor& t : *ts)
          if (t.tp_size > 1) found.insert(t.tp_size);
  return {found.begin(), found.end()};
}

ReplayPlan make_plan(const Schedule& s, const ModelShapes& shapes, float clip, bool clip_required) {
  // Context parallelism and FP8 are what-ifs of the hardware cost model (hardware/op_costs.h): replayed, the ranks
  // of a CP group (gen 3d --cp) would train their own microbatches as data-parallel replicas, not split one
  // sequence, and every layer would run in fp32.
  const auto cp_group = [](const std::string& name) {
    return name.size() > 2 && name.rfind("cp", 0) == 0 &&
           name.find_first_not_of("0123456789", 2) == std::string::npos;
  };
  for (const std::string& name : s.header.group_names)
    if (cp_group(name))
      throw PlanError(fmt::format("the schedule has context-parallel groups (header group '{}'): the executor does not "
                                  "replay context parallelism, which exists in the hardware cost model only (trainsim "
                                  "sim); generate the schedule without --cp to replay it",
                                  name));
  if (s.header.hardware && s.header.hardware->fp8)
    throw PlanError("the schedule's hardware setting has FP8 linear layers (fp8 in its cost_model hardware block): the "
                    "executor does not train in FP8, which exists in the hardware cost model only (trainsim sim); drop "
                    "the fp8 line (or --fp8) to replay it");
  ReplayPlan plan;
  const int world = s.header.world_size;
  std::vector<int> all(world);
  for (int r = 0; r < world; ++r) all[r] = r;
  plan.groups.push_back(all);
  for (const auto& g : s.header.groups) plan.groups.push_back(g);
  plan.ranks.resize(world);
  for (int r = 0; r < world; ++r) {
    const std::size_t n = s.ranks[r].size();
    plan.ranks[r].peer.assign(n, -1);
    plan.ranks[r].reported_batches.assign(n, IdSet{});
    plan.ranks[r].gather_order.assign(n, {});
    for (const Op& op : s.ranks[r]) {
      check_moe_op(op, shapes);
      for (const auto* ts : {&op.reads, &op.writes})
        for (const Tensor& t : *ts) try {
            shapes.elements(t);
          } catch (const std::invalid_argument& e) {
            throw PlanError(fmt::format("{}: {}", op.label(), e.what()));
          }
    }
  }
  check_all_to_alls(s, plan);
  resolve_peers(s, plan);
  assign_losses(s, plan);
  order_gathers(s, plan);
  assign_norm(s, shapes, plan);
  carry_state(s, shapes, plan);
  plan_collective_streams(s, plan);
  plan_tensor_parallel(s, plan);
  if (clip > 0) {
    std::string why = clip_problem(s, plan);
    if (!why.empty() && clip_required)
      throw PlanError("gradient clipping cannot run: " + why + " (--grad-clip 0 turns clipping off)");
    plan.clip = why.empty();
    plan.clip_note = why.empty() ? "" : "off: " + why;
  } else {
    plan.clip_note = "off (--grad-clip 0)";
  }
  return plan;
}

}  // namespace trainsim::exec
