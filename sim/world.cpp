#include "sim/world.h"

#include "sim/wait_graph.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

namespace trainsim {

std::string format_time(Time t) {
  // Exact, in integers: a double has too few digits for times near kMaxTime.
  const Time whole = t / kTicksPerSecond, frac = t % kTicksPerSecond;
  std::string s = fmt::format("{}{}.{:09d}", t < 0 && whole == 0 ? "-" : "", whole, frac < 0 ? -frac : frac);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

std::string format_memory(double m) {
  if (m == static_cast<double>(static_cast<long long>(m))) return fmt::format("{}", static_cast<long long>(m));
  return fmt::format("{:.1f}", m);
}

namespace {

}  // namespace

World::World(WorldOptions options, const CostModel& cost) : options_(options), cost_(&cost) {
  if (options_.world_size < 1)
    throw std::invalid_argument(fmt::format("world size must be at least 1, got {}", options_.world_size));
  if (options_.memory_limit && !(std::isfinite(*options_.memory_limit) && *options_.memory_limit >= 0))
    throw std::invalid_argument(
        fmt::format("the memory limit must be a finite number of at least 0, got {}", *options_.memory_limit));
  for (int r = 0; r < options_.world_size; ++r) ranks_.emplace_back(cost);
  mailboxes_.resize(options_.world_size);
  std::vector<int> all(options_.world_size);
  for (int r = 0; r < options_.world_size; ++r) all[r] = r;
  add_group(all);
  trace_.world_size = options_.world_size;
  trace_.layers = options_.layers;
  trace_.batches = options_.batches;
  trace_.cost_model = cost.name();
  trace_.memory_unit = cost.memory_unit();
  trace_.ranks.resize(options_.world_size);
  kernel_ = std::make_unique<Kernel>();
}

World::~World() {
  // Parked coroutines (a deadlock, an error) are destroyed through the io_context: drop their handlers
  // while the kernel is alive, then let the kernel run the destruction.
  for (auto& r : ranks_) r.waiter.handler.reset();
  kernel_.reset();
}

int World::add_group(std::vector<int> members) {
  if (members.empty()) throw std::invalid_argument("a group needs at least one member");
  Group g;
  for (int i = 0; i < static_cast<int>(members.size()); ++i) {
    int r = members[i];
    if (r < 0 || r >= options_.world_size)
      throw std::invalid_argument(fmt::format("group member {} is not a rank (world size {})", r, options_.world_size));
    if (!g.index_of.emplace(r, i).second)
      throw std::invalid_argument(fmt::format("rank {} is listed twice in a group", r));
  }
  g.members = std::move(members);
  g.next_seq.assign(g.members.size(), 0);
  groups_.push_back(std::move(g));
  return static_cast<int>(groups_.size()) - 1;
}

const std::vector<int>& World::group(int id) const {
  if (id < 0 || id >= static_cast<int>(groups_.size()))
    throw std::invalid_argument(fmt::format("no group {} (groups 0..{})", id, groups_.size() - 1));
  return groups_[id].members;
}

void World::check_rank(int rank, const char* what) const {
  if (rank < 0 || rank >= options_.world_size)
    throw SimError(fmt::format("{} names rank {}, but the world has ranks 0..{}", what, rank, options_.world_size - 1));
}

void World::record(int rank, Op op, int group_size) {
  RankState& rs = ranks_.at(rank);
  double mem = rs.ledger.total() + cost_->workspace(op);
  if (options_.memory_limit && mem > *options_.memory_limit)
    throw MemoryLimitError(fmt::format(
        "rank {}: memory limit exceeded at t={}: {}{} starts with {} {} resident (limit {}); resident: {}", rank,
        format_time(rs.clock), op.describe(), op.where_suffix(), format_memory(mem), cost_->memory_unit(),
        format_memory(*options_.memory_limit), rs.ledger.summary()));
  Time d = cost_->duration(op, group_size);
  if (d < 0 || d > kMaxTime - rs.clock)
    throw SimError(fmt::format("rank {}: {}{} starts at t={} and takes {} s: simulated time would pass its limit of "
                               "{} s (2^63 ns, about 292 years)",
                               rank, op.describe(), op.where_suffix(), format_time(rs.clock), format_time(d),
                               format_time(kMaxTime)));
  op.rank = rank;
  trace_.ranks[rank].push_back(OpRun{std::move(op), rs.clock, rs.clock + d, mem});
  rs.clock += d;
  if (observer_) observer_(trace_.ranks[rank].back().op);
}

void World::execute(Op op) {
  check_rank(op.rank, "an op");
  record(op.rank, std::move(op), 1);
}

void World::resume(int rank, bool satisfied) {
  // Until it runs again the rank is not waiting for anything: if the run stops first (another rank's error),
  // it must not be reported as blocked (blocked_ranks).
  if (satisfied) ranks_[rank].blocked.reset();
  kernel_->wake(ranks_[rank].waiter);
}

asio::awaitable<void> World::sync(int rank) { co_await kernel_->sleep_until(ranks_[rank].clock); }

asio::awaitable<void> World::block(int rank, Blocked b) {
  RankState& rs = ranks_[rank];
  b.since = rs.clock;
  rs.blocked = std::move(b);
  co_await kernel_->wait(rs.waiter);
  rs.blocked.reset();
}

Task World::send(Op op, Tensor payload) {
  int rank = op.rank, dst = op.peer;
  check_rank(dst, fmt::format("rank {}: {}{}", rank, op.describe(), op.where_suffix()).c_str());
  if (dst == rank) throw SimError(fmt::format("rank {}: {}{} sends to itself", rank, op.describe(), op.where_suffix()));
  op.kind = OpKind::Send;
  op.reads = {payload};
  co_await sync(rank);
  Op blocked_op = op;
  record(rank, std::move(op), 1);
  Mailbox& box = mailboxes_[dst];
  auto full = [&] { return options_.p2p == P2PMode::OneSlotPerDestination && !box.messages.empty(); };
  while (full()) {
    box.blocked_senders.push_back(rank);
    // (Built before co_await: g++ 12 mis-compiles string literals inside a co_await expression.)
    Blocked why{blocked_op, 0, {dst}, fmt::format("rank {}'s receive slot is full", dst)};
    co_await block(rank, std::move(why));
  }
  box.messages.push_back(Message{rank, std::move(payload), ranks_[rank].clock, blocked_op.where});
  if (box.receiver_waiting) {
    box.receiver_waiting = false;
    // The receiver waits no more if this is a message it takes (from its source, or from any); otherwise it
    // wakes, finds none for it and waits again.
    const auto& b = ranks_[dst].blocked;
    const bool satisfied = b && (b->any_source || (b->waits_for.size() == 1 && b->waits_for[0] == rank));
    resume(dst, satisfied);
  }
}

asio::awaitable<Message> World::recv(Op op) {
  int rank = op.rank, src = op.peer;
  if (src >= 0) {
    check_rank(src, fmt::format("rank {}: {}{}", rank, op.describe(), op.where_suffix()).c_str());
    if (src == rank)
      throw SimError(fmt::format("rank {}: {}{} receives from itself", rank, op.describe(), op.where_suffix()));
  }
  op.kind = OpKind::Recv;
  co_await sync(rank);
  Mailbox& box = mailboxes_[rank];
  for (;;) {
    auto it = std::find_if(box.messages.begin(), box.messages.end(),
                           [&](const Message& m) { return src < 0 || m.src == src; });
    if (it != box.messages.end()) {
      Message m = std::move(*it);
      box.messages.erase(it);
      for (int s : box.blocked_senders) resume(s, true);  // the slot is free: none of them waits now
      box.blocked_senders.clear();
      RankState& rs = ranks_[rank];
      rs.clock = std::max(rs.clock, m.ready);
      op.peer = m.src;
      op.writes = {m.payload};
      record(rank, std::move(op), 1);
      co_return m;
    }
    std::vector<int> from;  // empty for any source: every other rank, worked out only if a report needs it
    if (src >= 0) from.push_back(src);
    box.receiver_waiting = true;
    std::string detail = src >= 0 ? fmt::format("waiting for a message from rank {}", src)
                                  : std::string("waiting for a message from any rank");
    if (!box.messages.empty()) detail += fmt::format(" (its slot holds one from rank {})", box.messages.front().src);
    Blocked why{op, 0, std::move(from), std::move(detail)};
    why.any_source = src < 0;
    co_await block(rank, std::move(why));
  }
}

asio::awaitable<Tensor> World::collective(Op op, Tensor input) {
  int rank = op.rank;
  if (op.group < 0 || op.group >= static_cast<int>(groups_.size()))
    throw SimError(fmt::format("rank {}: {}{} names group {}, which does not exist", rank, op.describe(),
                               op.where_suffix(), op.group));
  Group& g = groups_[op.group];
  auto pos_it = g.index_of.find(rank);
  if (pos_it == g.index_of.end())
    throw SimError(fmt::format("rank {}: {}{}: rank {} is not a member of group {}", rank, op.describe(),
                               op.where_suffix(), rank, op.group));
  int pos = pos_it->second;
  if (is_rooted(op.kind) && !g.index_of.count(op.peer))
    throw SimError(fmt::format("rank {}: {}{}: the root, rank {}, is not a member of group {}", rank, op.describe(),
                               op.where_suffix(), op.peer, op.group));
  co_await sync(rank);
  std::uint64_t seq = g.next_seq[pos]++;
  Call& call = g.calls[seq];
  if (call.arrivals.empty()) call.arrivals.resize(g.members.size());
  for (const auto& a : call.arrivals) {
    if (!a) continue;
    if (a->op.kind != op.kind || a->op.layer != op.layer || (is_rooted(op.kind) && a->op.peer != op.peer))
      throw CollectiveMismatchError(fmt::format(
          "collective mismatch in group {} at call #{}: rank {} calls {}{} but rank {} called {}{}", op.group, seq,
          rank, op.describe(), op.where_suffix(), a->op.rank, a->op.describe(), a->op.where_suffix()));
    break;
  }
  // (a broadcast reads nothing but on its root)
  if (op.kind == OpKind::Broadcast && op.peer != rank) op.reads.clear();
  else op.reads = {input};
  call.arrivals[pos] = Arrival{op, std::move(input), ranks_[rank].clock};
  ++call.arrived;
  if (call.arrived == static_cast<int>(g.members.size())) {
    complete(g, seq, call);
  } else {
    // Who is missing is worked out only if a report needs it: listing it here would cost O(members) per
    // arrival, O(members^2) per collective.
    Blocked why{op, 0, {}, {}, op.group, seq};
    co_await block(rank, std::move(why));
  }
  Call& done = g.calls.at(seq);
  Tensor result = done.results.at(pos);
  if (--done.arrived == 0) g.calls.erase(seq);
  co_return result;
}

void World::complete(Group& g, std::uint64_t seq, Call& call) {
  const int n = static_cast<int>(g.members.size());
  const Arrival& first = *call.arrivals[0];
  OpKind kind = first.op.kind;
  auto fail = [&](int i, const std::exception& e) {
    return SimError(fmt::format("{} layer {} (collective #{} of group {}): rank {}{} and the ranks before it: {}",
                                op_name(kind), first.op.layer, seq, first.op.group, g.members[i],
                                call.arrivals[i]->op.where_suffix(), e.what()));
  };
  // A broadcast gives the root's input; the others fold every member's in member order.
  const int root = is_rooted(kind) ? g.index_of.at(first.op.peer) : -1;
  Tensor acc = kind == OpKind::Broadcast ? call.arrivals[root]->input : first.input;
  for (int i = 1; i < n && kind != OpKind::Broadcast && kind != OpKind::AllToAll; ++i) {
    try {
      if (kind == OpKind::AllGather) acc = combine(acc, call.arrivals[i]->input);
      else if (kind == OpKind::AllReduce || kind == OpKind::ReduceScatter || kind == OpKind::Reduce)
        acc = sum(acc, call.arrivals[i]->input);
    } catch (const TensorError& e) {
      throw fail(i, e);
    }
  }
  call.results.assign(n, acc);
  if (kind == OpKind::AllToAll) {
    // Expert parallelism's dispatch or combine: each member gets its own tokens (sim/all_to_all.h).
    std::vector<const Tensor*> inputs;
    for (const auto& a : call.arrivals) inputs.push_back(&a->input);
    try {
      call.results = g.all_to_all.call(inputs);
    } catch (const AllToAllError& e) {
      throw fail(e.member, e);
    }
  }
  if (kind == OpKind::ReduceScatter) {
    for (int i = 0; i < n; ++i) {
      try {
        call.results[i] = shard(acc, i, n);
      } catch (const TensorError& e) {
        throw fail(i, e);
      }
    }
  }
  Time start = 0;
  for (const auto& a : call.arrivals) start = std::max(start, a->clock);
  for (int i = 0; i < n; ++i) {
    int r = g.members[i];
    ranks_[r].clock = start;
    Op op = call.arrivals[i]->op;
    op.writes = {call.results[i]};
    // Only the root gets a reduce's sum (the others get their input back, NCCL leaving their buffer as it
    // was); a broadcast's root keeps its tensor in place.
    if ((kind == OpKind::Reduce && i != root) || (kind == OpKind::Broadcast && i == root)) {
      op.writes.clear();
      if (kind == OpKind::Reduce) call.results[i] = call.arrivals[i]->input;
    }
    record(r, std::move(op), n);
    if (ranks_[r].blocked) resume(r, true);
  }
  call.done = true;
}

void World::spawn(int rank, Task program) {
  check_rank(rank, "spawn");
  if (ranks_[rank].started) throw std::invalid_argument(fmt::format("rank {} already has a program", rank));
  ranks_[rank].started = true;
  kernel_->spawn(std::move(program), [this, rank](std::exception_ptr e) {
    ranks_[rank].finished = true;
    if (e && !error_) {
      try {
        std::rethrow_exception(e);
      } catch (const SimError&) {
        error_ = e;
      } catch (const std::exception& ex) {
        error_ = std::make_exception_ptr(SimError(fmt::format("rank {}: {}", rank, ex.what())));
      } catch (...) {
        error_ = std::make_exception_ptr(SimError(fmt::format("rank {}: unknown error", rank)));
      }
      kernel_->stop();
    }
  });
}

void World::run() {
  for (int r = 0; r < options_.world_size; ++r)
    if (!ranks_[r].started) throw std::invalid_argument(fmt::format("rank {} has no program", r));
  kernel_->run();
  if (error_) std::rethrow_exception(error_);
  bool all_done = std::all_of(ranks_.begin(), ranks_.end(), [](const RankState& r) { return r.finished; });
  if (!all_done) throw DeadlockError(deadlock_report());
  for (int dst = 0; dst < options_.world_size; ++dst)
    for (const Message& m : mailboxes_[dst].messages)
      throw SimError(fmt::format("rank {}: send of {} to rank {}{} was never received", m.src, m.payload.str(), dst,
                                 m.where.empty() ? std::string() : fmt::format(" ({})", m.where)));
}

std::vector<int> World::missing_members(const Blocked& b) const {
  const Group& g = groups_[b.group];
  std::vector<int> missing;
  auto it = g.calls.find(b.seq);
  for (std::size_t i = 0; i < g.members.size(); ++i)
    if (it == g.calls.end() || !it->second.arrivals[i]) missing.push_back(g.members[i]);
  return missing;
}

std::vector<int> World::wait_for_cycle(const std::vector<int>& blocked) const {
  // Wait-for graph: ranks are nodes 0..N-1, and each collective call that blocked ranks wait in is one more
  // node (edges rank -> call -> its missing members), so that the graph stays as large as the groups rather
  // than (blocked members) x (missing members). A receive from any source waits for every unfinished rank.
  const int n = options_.world_size;
  std::map<std::pair<int, std::uint64_t>, int> call_node;
  std::vector<std::vector<int>> call_edges;  // node n + i -> the unfinished members it waits for
  for (int r : blocked) {
    const auto& b = ranks_[r].blocked;
    if (!b || b->group < 0) continue;
    auto [it, fresh] = call_node.try_emplace({b->group, b->seq}, n + static_cast<int>(call_edges.size()));
    if (!fresh) continue;
    std::vector<int> edges;
    for (int w : missing_members(*b))
      if (!ranks_[w].finished) edges.push_back(w);
    call_edges.push_back(std::move(edges));
  }
  std::vector<int> unfinished;
  for (int r = 0; r < n; ++r)
    if (!ranks_[r].finished) unfinished.push_back(r);
  auto edge = [&](int node, std::size_t i, const std::vector<int>& stack) -> int {
    if (node >= n) {
      const auto& e = call_edges[node - n];
      return i < e.size() ? e[i] : -1;
    }
    const auto& b = ranks_[node].blocked;
    if (!b) return -1;
    if (b->group >= 0) return i == 0 ? call_node.at({b->group, b->seq}) : -1;
    if (!b->any_source) {
      const auto& w = b->waits_for;
      return i < w.size() && !ranks_[w[i]].finished ? w[i] : (i < w.size() ? -2 : -1);
    }
    // Any source: the nearest rank below on the stack waits for this one, which waits for it: a cycle.
    for (std::size_t k = stack.size() - 1; k-- > 0;)
      if (stack[k] < n) return i == 0 ? stack[k] : -1;
    if (i >= unfinished.size()) return -1;
    return unfinished[i] == node ? -2 : unfinished[i];
  };
  return find_wait_cycle(n + static_cast<int>(call_edges.size()), n, blocked, edge);
}

std::vector<World::BlockedRank> World::blocked_ranks() const {
  std::vector<BlockedRank> out;
  for (int r = 0; r < options_.world_size; ++r) {
    const RankState& rs = ranks_[r];
    if (rs.finished || !rs.blocked) continue;
    const Blocked& b = *rs.blocked;
    std::string detail = b.detail;
    std::vector<int> on = b.waits_for;
    if (b.group >= 0) {
      on = missing_members(b);
      if (on.empty()) continue;  // every member arrived: the call is complete, the rank no longer waits
      detail = fmt::format("collective #{} of group {}, waiting for rank{} {}", b.seq, b.group,
                           on.size() == 1 ? "" : "s", rank_list(on));
    }
    std::vector<int> ended;
    for (int w : on)
      if (ranks_[w].finished) ended.push_back(w);
    if (!ended.empty())
      detail += fmt::format(" (rank{} {} ended without it)", ended.size() == 1 ? "" : "s", rank_list(ended));
    out.push_back({r, b.since, b.op.describe() + b.op.where_suffix(), std::move(detail)});
  }
  return out;
}

std::string World::deadlock_report() const {
  std::vector<int> blocked;
  for (int r = 0; r < options_.world_size; ++r)
    if (!ranks_[r].finished) blocked.push_back(r);
  std::string s = fmt::format("deadlock: no event is left at t={} and rank{} {} {} blocked",
                              format_time(kernel_->now()), blocked.size() == 1 ? "" : "s", rank_list(blocked),
                              blocked.size() == 1 ? "is" : "are");
  for (std::size_t i = 0; i < blocked.size() && i < kListedRanks; ++i) {
    int r = blocked[i];
    const RankState& rs = ranks_[r];
    if (!rs.blocked) {
      s += fmt::format("\n  rank {}: suspended outside the simulator's primitives", r);
      continue;
    }
    const Blocked& b = *rs.blocked;
    std::vector<int> waits_for = b.waits_for;
    std::string detail = b.detail;
    if (b.group >= 0) {
      waits_for = missing_members(b);
      detail = fmt::format("collective #{} of group {}, waiting for rank{} {}", b.seq, b.group,
                           waits_for.size() == 1 ? "" : "s", rank_list(waits_for));
    } else if (b.any_source) {
      for (int w = 0; w < options_.world_size; ++w)
        if (w != r) waits_for.push_back(w);
    }
    std::vector<int> finished;
    for (int w : waits_for)
      if (ranks_[w].finished) finished.push_back(w);
    s += fmt::format("\n  rank {} at t={}: {}{}: {}", r, format_time(b.since), b.op.describe(), b.op.where_suffix(),
                     detail);
    if (!finished.empty())
      s += fmt::format(" (rank{} {} finished without it)", finished.size() == 1 ? "" : "s", rank_list(finished));
  }
  if (blocked.size() > kListedRanks) s += fmt::format("\n  ... and {} more blocked ranks", blocked.size() - kListedRanks);
  const bool all_receive_from_any = std::all_of(blocked.begin(), blocked.end(), [&](int r) {
    return ranks_[r].blocked && ranks_[r].blocked->group < 0 && ranks_[r].blocked->any_source;
  });
  if (all_receive_from_any) return s + no_sender_text();
  return s + cycle_text(wait_for_cycle(blocked));
}

}  // namespace trainsim
