#include "sim/world.h"

#include <algorithm>
#include <functional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

namespace trainsim {

std::string format_time(Time t) {
  std::string s = fmt::format("{:.9f}", to_seconds(t));
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

std::string format_memory(double m) {
  if (m == static_cast<double>(static_cast<long long>(m))) return fmt::format("{}", static_cast<long long>(m));
  return fmt::format("{:.1f}", m);
}

namespace {
std::string where_suffix(const Op& op) { return op.where.empty() ? std::string() : fmt::format(" ({})", op.where); }

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + fmt::format("{}", ranks[i]);
  return s;
}
}  // namespace

World::World(WorldOptions options, const CostModel& cost) : options_(options), cost_(&cost) {
  if (options_.world_size < 1)
    throw std::invalid_argument(fmt::format("world size must be at least 1, got {}", options_.world_size));
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
  double mem = rs.ledger.total();
  if (options_.memory_limit && mem > *options_.memory_limit)
    throw MemoryLimitError(fmt::format(
        "rank {}: memory limit exceeded at t={}: {}{} starts with {} {} resident (limit {}); resident: {}", rank,
        format_time(rs.clock), op.describe(), where_suffix(op), format_memory(mem), cost_->memory_unit(),
        format_memory(*options_.memory_limit), rs.ledger.summary()));
  Time d = cost_->duration(op, group_size);
  op.rank = rank;
  trace_.ranks[rank].push_back(OpRun{std::move(op), rs.clock, rs.clock + d, mem});
  rs.clock += d;
  if (observer_) observer_(trace_.ranks[rank].back().op);
}

void World::execute(Op op) {
  check_rank(op.rank, "an op");
  record(op.rank, std::move(op), 1);
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
  check_rank(dst, fmt::format("rank {}: {}{}", rank, op.describe(), where_suffix(op)).c_str());
  if (dst == rank) throw SimError(fmt::format("rank {}: {}{} sends to itself", rank, op.describe(), where_suffix(op)));
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
    kernel_->wake(ranks_[dst].waiter);
  }
}

asio::awaitable<Message> World::recv(Op op) {
  int rank = op.rank, src = op.peer;
  if (src >= 0) {
    check_rank(src, fmt::format("rank {}: {}{}", rank, op.describe(), where_suffix(op)).c_str());
    if (src == rank)
      throw SimError(fmt::format("rank {}: {}{} receives from itself", rank, op.describe(), where_suffix(op)));
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
      for (int s : box.blocked_senders) kernel_->wake(ranks_[s].waiter);
      box.blocked_senders.clear();
      RankState& rs = ranks_[rank];
      rs.clock = std::max(rs.clock, m.ready);
      op.peer = m.src;
      op.writes = {m.payload};
      record(rank, std::move(op), 1);
      co_return m;
    }
    std::vector<int> from;
    if (src >= 0) from.push_back(src);
    else
      for (int r = 0; r < options_.world_size; ++r)
        if (r != rank) from.push_back(r);
    box.receiver_waiting = true;
    std::string detail = src >= 0 ? fmt::format("waiting for a message from rank {}", src)
                                  : std::string("waiting for a message from any rank");
    if (!box.messages.empty()) detail += fmt::format(" (its slot holds one from rank {})", box.messages.front().src);
    Blocked why{op, 0, std::move(from), std::move(detail)};
    co_await block(rank, std::move(why));
  }
}

asio::awaitable<Tensor> World::collective(Op op, Tensor input) {
  int rank = op.rank;
  if (op.group < 0 || op.group >= static_cast<int>(groups_.size()))
    throw SimError(fmt::format("rank {}: {}{} names group {}, which does not exist", rank, op.describe(),
                               where_suffix(op), op.group));
  Group& g = groups_[op.group];
  auto pos_it = g.index_of.find(rank);
  if (pos_it == g.index_of.end())
    throw SimError(fmt::format("rank {}: {}{}: rank {} is not a member of group {}", rank, op.describe(),
                               where_suffix(op), rank, op.group));
  int pos = pos_it->second;
  co_await sync(rank);
  std::uint64_t seq = g.next_seq[pos]++;
  Call& call = g.calls[seq];
  if (call.arrivals.empty()) call.arrivals.resize(g.members.size());
  for (const auto& a : call.arrivals) {
    if (!a) continue;
    if (a->op.kind != op.kind || a->op.layer != op.layer)
      throw CollectiveMismatchError(fmt::format(
          "collective mismatch in group {} at call #{}: rank {} calls {}{} but rank {} called {}{}", op.group, seq,
          rank, op.describe(), where_suffix(op), a->op.rank, a->op.describe(), where_suffix(a->op)));
    break;
  }
  op.reads = {input};
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
                                where_suffix(call.arrivals[i]->op), e.what()));
  };
  Tensor acc = first.input;
  for (int i = 1; i < n; ++i) {
    try {
      if (kind == OpKind::AllGather) acc = combine(acc, call.arrivals[i]->input);
      else if (kind == OpKind::AllReduce || kind == OpKind::ReduceScatter) acc = sum(acc, call.arrivals[i]->input);
    } catch (const TensorError& e) {
      throw fail(i, e);
    }
  }
  call.results.assign(n, acc);
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
    record(r, std::move(op), n);
    if (ranks_[r].blocked) kernel_->wake(ranks_[r].waiter);
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

std::pair<std::vector<int>, std::string> World::waiting_on(const Blocked& b) const {
  if (b.group < 0) return {b.waits_for, b.detail};
  const Group& g = groups_[b.group];
  std::vector<int> missing;
  auto it = g.calls.find(b.seq);
  for (std::size_t i = 0; i < g.members.size(); ++i)
    if (it == g.calls.end() || !it->second.arrivals[i]) missing.push_back(g.members[i]);
  return {missing, fmt::format("collective #{} of group {}, waiting for rank{} {}", b.seq, b.group,
                               missing.size() == 1 ? "" : "s", rank_list(missing))};
}

std::string World::deadlock_report() const {
  std::vector<int> blocked;
  for (int r = 0; r < options_.world_size; ++r)
    if (!ranks_[r].finished) blocked.push_back(r);
  std::string s = fmt::format("deadlock: no event is left at t={} and rank{} {} {} blocked",
                              format_time(kernel_->now()), blocked.size() == 1 ? "" : "s", rank_list(blocked),
                              blocked.size() == 1 ? "is" : "are");
  for (int r : blocked) {
    const RankState& rs = ranks_[r];
    if (!rs.blocked) {
      s += fmt::format("\n  rank {}: suspended outside the simulator's primitives", r);
      continue;
    }
    const Blocked& b = *rs.blocked;
    auto [waits_for, detail] = waiting_on(b);
    std::vector<int> finished;
    for (int w : waits_for)
      if (ranks_[w].finished) finished.push_back(w);
    s += fmt::format("\n  rank {} at t={}: {}{}: {}", r, format_time(b.since), b.op.describe(), where_suffix(b.op),
                     detail);
    if (!finished.empty())
      s += fmt::format(" (rank{} {} finished without it)", finished.size() == 1 ? "" : "s", rank_list(finished));
  }
  // Wait-for cycle: follow edges between blocked ranks from the lowest blocked rank.
  std::vector<int> state(options_.world_size, 0);  // 0 new, 1 on stack, 2 done
  std::vector<int> stack;
  std::vector<int> cycle;
  std::function<bool(int)> dfs = [&](int r) {
    state[r] = 1;
    stack.push_back(r);
    if (ranks_[r].blocked)
      for (int w : waiting_on(*ranks_[r].blocked).first) {
        if (ranks_[w].finished) continue;
        if (state[w] == 1) {
          auto it = std::find(stack.begin(), stack.end(), w);
          cycle.assign(it, stack.end());
          cycle.push_back(w);
          return true;
        }
        if (state[w] == 0 && dfs(w)) return true;
      }
    stack.pop_back();
    state[r] = 2;
    return false;
  };
  for (int r : blocked)
    if (state[r] == 0 && dfs(r)) break;
  if (!cycle.empty()) {
    s += "\n  wait-for cycle: ";
    for (std::size_t i = 0; i < cycle.size(); ++i) s += fmt::format("{}rank {}", i ? " -> " : "", cycle[i]);
  } else {
    s += "\n  no wait-for cycle: the blocked ranks wait for ranks that finished";
  }
  return s;
}

}  // namespace trainsim
