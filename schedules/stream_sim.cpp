#include "schedules/stream_sim.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "sim/algebra.h"
#include "schedules/cost_models.h"
#include "sim/cost_model.h"
#include "sim/errors.h"
#include "sim/ledger.h"

namespace trainsim {

namespace {

constexpr std::size_t kReportRanks = 16;  // a deadlock report details this many ranks, then counts the rest

std::string where_suffix(const Op& op) { return op.where.empty() ? std::string() : fmt::format(" ({})", op.where); }

SimError op_error(const Op& op, const std::string& what) {
  return SimError(fmt::format("rank {}: {}{}: {}", op.rank, op.describe(), where_suffix(op), what));
}

// "0, 1, 2" with at most `limit` ranks, then "and N more".
std::string rank_list(const std::vector<int>& ranks, std::size_t limit = kReportRanks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size() && i < limit; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > limit) s += fmt::format(" and {} more", ranks.size() - limit);
  return s;
}

// One op of the schedule as a node of the dependency graph. Node ids number every rank's ops in order.
struct Node {
  int rank = 0, index = 0;
  int pending = 0;            // dependencies not yet ended
  Time ready = 0;             // the latest end among the dependencies that ended
  Time start = 0, end = 0;
  bool done = false;
  int call = -1;              // collectives: the call it belongs to
  std::vector<int> next;      // nodes that depend on this one
};

// One collective call: the k-th call of a group, one op per member.
struct Call {
  int group = 0;
  std::uint64_t seq = 0;
  std::vector<int> nodes;     // by member index; -1 where the member never calls it
  std::vector<Tensor> results;
  int arrived = 0;
  Time latest = 0;
};

class StreamSim {
 public:
  StreamSim(const Schedule& s, const SimOptions& o) : s_(s), o_(o), cost_(make_schedule_cost_model(s)) {
    const int world = s.header.world_size;
    offset_.resize(world + 1, 0);
    for (int r = 0; r < world; ++r) offset_[r + 1] = offset_[r] + static_cast<int>(s.ranks[r].size());
    nodes_.resize(offset_[world]);
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) nodes_[offset_[r] + i].rank = r, nodes_[offset_[r] + i].index = i;
    groups_.push_back({});
    for (int r = 0; r < world; ++r) groups_[0].push_back(r);
    for (const auto& g : s.header.groups) groups_.push_back(g);
    matched_src_.assign(nodes_.size(), -1);
    paired_.assign(nodes_.size(), 0);
    trace_.world_size = world;
    trace_.layers = s.header.layers;
    trace_.batches = s.header.microbatches;
    trace_.cost_model = cost_->name();
    trace_.memory_unit = cost_->memory_unit();
    trace_.ranks.resize(world);
  }

  void run() {
    check_groups();
    for (int r = 0; r < s_.header.world_size; ++r) issue(r);
    match_p2p();
    form_calls();
    time();
    if (int blocked = count_unfinished(); blocked > 0) throw DeadlockError(deadlock_report());
    for (int id : unmatched_sends_) {
      const Op& op = op_of(id);
      throw SimError(fmt::format("rank {}: send of {} to rank {}{} was never received", op.rank, op.reads.front().str(),
                                 op.peer, where_suffix(op)));
    }
  }

  // The trace of what ran (in program order per rank), with memory samples; throws MemoryLimitError.
  void fill_trace() {
    for (int r = 0; r < s_.header.world_size; ++r) sample_memory(r);
  }

  Trace& trace() { return trace_; }

 private:
  const Op& op_of(int id) const { return s_.ranks[nodes_[id].rank][nodes_[id].index]; }
  int id_of(int rank, int index) const { return offset_[rank] + index; }

  void depend(int node, int on) {
    if (on < 0 || on == node) return;
    nodes_[on].next.push_back(node);
    ++nodes_[node].pending;
  }

  void check_groups() const {
    const int world = s_.header.world_size;
    if (static_cast<int>(s_.ranks.size()) != world)
      throw SimError(fmt::format("the schedule has op lists for {} ranks but world_size is {}", s_.ranks.size(), world));
    for (std::size_t g = 1; g < groups_.size(); ++g) {
      if (groups_[g].empty()) throw SimError(fmt::format("group {} has no member", g));
      std::vector<char> seen(world, 0);
      for (int r : groups_[g]) {
        if (r < 0 || r >= world)
          throw SimError(fmt::format("group {}: member {} is not a rank (world size {})", g, r, world));
        if (seen[r]++) throw SimError(fmt::format("group {}: rank {} is listed twice", g, r));
      }
    }
  }

  // Program order on one rank: the algebra and residency of every op (as the ledger says at issue), and
  // the dependencies on the same rank (stream order, writers of what it reads, users of what it frees).
  void issue(int rank) {
    const ScheduleHeader& h = s_.header;
    MemoryLedger ledger(*cost_, rank);
    std::map<Tensor, int> writer;                 // the last op that wrote each tensor
    std::map<Tensor, std::vector<int>> users;     // ops that used it since
    std::map<int, int> stream_tail;               // the last op issued on each stream
    const auto& ops = s_.ranks[rank];
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Op& op = ops[i];
      const int id = id_of(rank, i);
      if (std::string p = algebra_problem(op, h.layers, h.microbatches); !p.empty()) throw op_error(op, p);
      for (const Tensor& t : op.reads)
        if (ledger.count(t) == 0)
          throw op_error(op, fmt::format("it reads {} ({}), which is not resident; resident: {}", t.str(),
                                         long_name(t.kind), ledger.summary()));
      if (op.kind == OpKind::Send && op.reads.size() != 1) throw op_error(op, "a send carries exactly one tensor");
      if (op.kind == OpKind::Recv && op.writes.size() != 1) throw op_error(op, "a recv receives exactly one tensor");
      if (op.kind == OpKind::Send) {
        if (op.peer < 0 || op.peer >= h.world_size)
          throw op_error(op, fmt::format("rank {} does not exist (world size {})", op.peer, h.world_size));
        if (op.peer == rank) throw op_error(op, "it sends to its own rank");
      }
      if (op.kind == OpKind::Recv && op.peer >= h.world_size)
        throw op_error(op, fmt::format("rank {} does not exist (world size {})", op.peer, h.world_size));
      if (is_collective(op.kind)) {
        if (op.group < 0 || op.group >= static_cast<int>(groups_.size()))
          throw op_error(op, fmt::format("group {} does not exist", op.group));
        const auto& m = groups_[op.group];
        if (std::find(m.begin(), m.end(), rank) == m.end())
          throw op_error(op, fmt::format("rank {} is not a member of group {} (ranks {})", rank, op.group, rank_list(m)));
      }
      auto [tail, fresh] = stream_tail.try_emplace(op.stream, -1);
      depend(id, tail->second);
      tail->second = id;
      for (const Tensor& t : op.reads) {
        if (auto w = writer.find(t); w != writer.end()) depend(id, w->second);
        if (op.kind == OpKind::Free) {
          for (int u : users[t]) depend(id, u);
        } else {
          users[t].push_back(id);
        }
      }
      if (op.kind == OpKind::Free) {
        for (const Tensor& t : op.reads) {
          ledger.remove(t);
          if (ledger.count(t) == 0) writer.erase(t), users.erase(t);
        }
      } else {
        for (const Tensor& t : op.writes) {
          ledger.add(t);
          writer[t] = id;
          users[t].clear();
        }
      }
      if (op.kind == OpKind::Send) channels_[{rank, op.peer}].sends.push_back(id);
      if (op.kind == OpKind::Recv) {
        if (op.peer >= 0) channels_[{op.peer, rank}].recvs.push_back(id);
        else any_recvs_.push_back(id);
      }
      if (is_collective(op.kind)) calls_of_[{op.group, rank}].push_back(id);
    }
  }

  // Sends and receives: in order per (source, destination) pair; a recv from any source is matched to the
  // one rank whose next unmatched send to it carries that tensor.
  void match_p2p() {
    for (int id : any_recvs_) {
      const Op& recv = op_of(id);
      const Tensor& want = recv.writes.front();
      std::vector<int> sources;
      // Candidates: for each source, the sends not claimed by its explicit receives, in order.
      for (auto& [pair, ch] : channels_) {
        if (pair.second != recv.rank) continue;
        for (std::size_t k = 0; k < ch.sends.size(); ++k)
          if (!ch.claimed(k) && op_of(ch.sends[k]).reads.front() == want) {
            sources.push_back(pair.first);
            break;
          }
      }
      if (sources.empty()) continue;  // never matched: a deadlock, reported with what it waits for
      if (sources.size() > 1)
        throw op_error(recv, fmt::format("ranks {} all send {} to rank {}: say which with 'recv from RANK'",
                                         rank_list(sources), want.str(), recv.rank));
      Channel& ch = channels_[{sources.front(), recv.rank}];
      for (std::size_t k = 0; k < ch.sends.size(); ++k)
        if (!ch.claimed(k) && op_of(ch.sends[k]).reads.front() == want) {
          ch.any.emplace(k, id);
          break;
        }
    }
    for (auto& [pair, ch] : channels_) {
      // The explicit receives take the sends in order, skipping those a recv-from-any claimed.
      std::size_t k = 0;
      for (int recv_id : ch.recvs) {
        while (k < ch.sends.size() && ch.any.count(k)) ++k;
        if (k == ch.sends.size()) break;  // a recv without a send: a deadlock, reported later
        pair_up(ch.sends[k++], recv_id);
      }
      for (auto& [at, recv_id] : ch.any) pair_up(ch.sends[at], recv_id);
      for (int send_id : ch.sends)
        if (!paired_[send_id]) unmatched_sends_.push_back(send_id);
    }
    std::sort(unmatched_sends_.begin(), unmatched_sends_.end());
    // A recv that no send matches waits for ever (reported as a deadlock, with what it waits for).
    for (int id = 0; id < static_cast<int>(nodes_.size()); ++id)
      if (op_of(id).kind == OpKind::Recv && matched_src_[id] < 0) ++nodes_[id].pending;
  }

  void pair_up(int send_id, int recv_id) {
    const Op& send = op_of(send_id);
    const Op& recv = op_of(recv_id);
    const Tensor& payload = send.reads.front();
    if (payload != recv.writes.front())
      throw op_error(recv, fmt::format("expected {} but rank {} sent {}{}", recv.writes.front().str(), send.rank,
                                       payload.str(), where_suffix(send)));
    depend(recv_id, send_id);
    matched_src_[recv_id] = send.rank;
    paired_[send_id] = 1;
  }

  // Collectives: the k-th call of every member of a group forms call k; members must agree on the kind and
  // layer, and the inputs must combine to what each member expects.
  void form_calls() {
    for (int g = 0; g < static_cast<int>(groups_.size()); ++g) {
      const auto& members = groups_[g];
      std::size_t most = 0;
      for (int r : members) most = std::max(most, calls_of_[{g, r}].size());
      for (std::size_t k = 0; k < most; ++k) {
        Call call;
        call.group = g, call.seq = k;
        call.nodes.assign(members.size(), -1);
        int first = -1;
        for (std::size_t m = 0; m < members.size(); ++m) {
          const auto& mine = calls_of_[{g, members[m]}];
          if (k >= mine.size()) continue;
          const int id = mine[k];
          const Op& op = op_of(id);
          if (first < 0) {
            first = id;
          } else if (const Op& a = op_of(first); a.kind != op.kind || a.layer != op.layer) {
            throw CollectiveMismatchError(fmt::format(
                "collective mismatch in group {} at call #{}: rank {} calls {}{} but rank {} called {}{}", g, k,
                op.rank, op.describe(), where_suffix(op), a.rank, a.describe(), where_suffix(a)));
          }
          call.nodes[m] = id;
          nodes_[id].call = static_cast<int>(calls_.size());
        }
        if (std::find(call.nodes.begin(), call.nodes.end(), -1) == call.nodes.end()) combine_inputs(call);
        calls_.push_back(std::move(call));
      }
    }
  }

  void combine_inputs(Call& call) {
    const int n = static_cast<int>(call.nodes.size());
    const Op& first = op_of(call.nodes[0]);
    auto input = [&](int m) { return op_of(call.nodes[m]).reads.empty() ? Tensor{} : op_of(call.nodes[m]).reads.front(); };
    auto fail = [&](int m, const std::exception& e) {
      return SimError(fmt::format("{} layer {} (collective #{} of group {}): rank {}{} and the ranks before it: {}",
                                  op_name(first.kind), first.layer, call.seq, call.group, op_of(call.nodes[m]).rank,
                                  where_suffix(op_of(call.nodes[m])), e.what()));
    };
    Tensor acc = input(0);
    for (int m = 1; m < n; ++m) {
      try {
        if (first.kind == OpKind::AllGather) acc = combine(acc, input(m));
        else if (first.kind == OpKind::AllReduce || first.kind == OpKind::ReduceScatter) acc = sum(acc, input(m));
      } catch (const TensorError& e) {
        throw fail(m, e);
      }
    }
    call.results.assign(n, acc);
    for (int m = 0; m < n; ++m) {
      if (first.kind == OpKind::ReduceScatter) {
        try {
          call.results[m] = shard(acc, m, n);
        } catch (const TensorError& e) {
          throw fail(m, e);
        }
      }
      const Op& op = op_of(call.nodes[m]);
      if (!op.writes.empty() && op.writes.front() != call.results[m])
        throw op_error(op, fmt::format("it expects {} but the {} gives {}", op.writes.front().str(), op_name(op.kind),
                                       call.results[m].str()));
    }
  }

  // Longest path: a node starts when its last dependency ends (a collective when its last member is ready).
  void time() {
    std::vector<int> work;
    for (int id = 0; id < static_cast<int>(nodes_.size()); ++id)
      if (nodes_[id].pending == 0) work.push_back(id);
    std::reverse(work.begin(), work.end());
    while (!work.empty()) {
      int id = work.back();
      work.pop_back();
      Node& n = nodes_[id];
      const Op& op = op_of(id);
      if (n.call >= 0) {
        Call& c = calls_[n.call];
        ++c.arrived;
        c.latest = std::max(c.latest, n.ready);
        if (c.arrived < static_cast<int>(c.nodes.size())) continue;
        const int size = static_cast<int>(c.nodes.size());
        for (int member : c.nodes) finish(member, c.latest, cost_->duration(op_of(member), size), work);
        continue;
      }
      finish(id, n.ready, is_timed(op.kind) ? cost_->duration(op, 1) : 0, work);
    }
  }

  void finish(int id, Time start, Time duration, std::vector<int>& work) {
    Node& n = nodes_[id];
    n.start = start;
    n.end = start + duration;
    n.done = true;
    last_time_ = std::max(last_time_, n.end);
    for (int next : n.next) {
      Node& m = nodes_[next];
      m.ready = std::max(m.ready, n.end);
      if (--m.pending == 0) work.push_back(next);
    }
  }

  int count_unfinished() const {
    int k = 0;
    for (const Node& n : nodes_) k += !n.done;
    return k;
  }

  // What rank `r`'s first unfinished op waits for: the ranks, and in words.
  std::pair<std::vector<int>, std::string> waits(int id) const {
    const Op& op = op_of(id);
    if (op.kind == OpKind::Recv) {
      int src = matched_src_[id] >= 0 ? matched_src_[id] : op.peer;
      if (src < 0) return {{}, fmt::format("waiting for a message carrying {} (no rank sends it)", op.writes.front().str())};
      return {{src}, fmt::format("waiting for a message from rank {}", src)};
    }
    if (nodes_[id].call >= 0) {
      const Call& c = calls_[nodes_[id].call];
      std::vector<int> missing;
      const auto& members = groups_[c.group];
      for (std::size_t m = 0; m < members.size(); ++m)
        if (c.nodes[m] < 0 || nodes_[c.nodes[m]].pending > 0) missing.push_back(members[m]);
      return {missing, fmt::format("collective #{} of group {}, waiting for rank{} {}", c.seq, c.group,
                                   missing.size() == 1 ? "" : "s", rank_list(missing))};
    }
    return {{}, "waiting for an op of its own that cannot start"};
  }

  std::string deadlock_report() const {
    const int world = s_.header.world_size;
    std::vector<int> first(world, -1);  // each rank's first unfinished op
    std::vector<int> blocked;
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < static_cast<int>(s_.ranks[r].size()); ++i)
        if (!nodes_[id_of(r, i)].done) {
          first[r] = id_of(r, i);
          blocked.push_back(r);
          break;
        }
    std::string s = fmt::format("deadlock: no event is left at t={} and rank{} {} {} blocked", format_time(last_time_),
                                blocked.size() == 1 ? "" : "s", rank_list(blocked), blocked.size() == 1 ? "is" : "are");
    std::vector<std::vector<int>> edges(world);
    for (std::size_t k = 0; k < blocked.size(); ++k) {
      const int r = blocked[k];
      auto [on, detail] = waits(first[r]);
      std::vector<int> finished;
      for (int w : on) (first[w] < 0 ? finished : edges[r]).push_back(w);
      if (k < kReportRanks) {
        const Op& op = op_of(first[r]);
        s += fmt::format("\n  rank {} at t={}: {}{}: {}", r, format_time(nodes_[first[r]].ready), op.describe(),
                         where_suffix(op), detail);
        if (!finished.empty())
          s += fmt::format(" (rank{} {} finished without it)", finished.size() == 1 ? "" : "s", rank_list(finished));
      }
    }
    if (blocked.size() > kReportRanks) s += fmt::format("\n  ... and {} more blocked ranks", blocked.size() - kReportRanks);
    // The wait-for cycle: an iterative depth-first search from the lowest blocked rank.
    std::vector<int> state(world, 0), edge_at(world, 0), stack;
    std::vector<int> cycle;
    for (int root : blocked) {
      if (state[root] != 0 || !cycle.empty()) continue;
      stack.push_back(root);
      state[root] = 1;
      while (!stack.empty() && cycle.empty()) {
        int r = stack.back();
        if (edge_at[r] == static_cast<int>(edges[r].size())) {
          state[r] = 2;
          stack.pop_back();
          continue;
        }
        int w = edges[r][edge_at[r]++];
        if (state[w] == 1) {
          cycle.assign(std::find(stack.begin(), stack.end(), w), stack.end());
          cycle.push_back(w);
        } else if (state[w] == 0) {
          state[w] = 1;
          stack.push_back(w);
        }
      }
    }
    if (!cycle.empty()) {
      s += "\n  wait-for cycle: ";
      for (std::size_t i = 0; i < cycle.size(); ++i) {
        if (i == kReportRanks && cycle.size() > kReportRanks + 1) {
          s += fmt::format(" -> ... ({} more ranks) -> rank {}", cycle.size() - kReportRanks - 1, cycle.back());
          break;
        }
        s += fmt::format("{}rank {}", i ? " -> " : "", cycle[i]);
      }
    }
    return s;
  }

  // Memory of rank `r` over time; every timed op's sample; the limit.
  void sample_memory(int r) {
    struct Event {
      Time time;
      int index;
      bool add;
      Tensor t;
    };
    std::vector<Event> events;
    const auto& ops = s_.ranks[r];
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Op& op = ops[i];
      const Node& n = nodes_[id_of(r, i)];
      if (op.kind == OpKind::Free) {
        for (const Tensor& t : op.reads) events.push_back({n.start, i, false, t});
      } else {
        for (const Tensor& t : op.writes) events.push_back({n.start, i, true, t});
      }
    }
    std::stable_sort(events.begin(), events.end(),
                     [](const Event& a, const Event& b) { return a.time != b.time ? a.time < b.time : a.index < b.index; });
    // Timed ops by (start, program order), each sampled after the events before it.
    std::vector<int> timed;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i)
      if (is_timed(ops[i].kind)) timed.push_back(i);
    std::vector<std::pair<Time, int>> order;
    for (int i : timed) order.push_back({nodes_[id_of(r, i)].start, i});
    std::sort(order.begin(), order.end());
    MemoryLedger ledger(*cost_, r);
    std::map<int, double> sample;
    std::size_t e = 0;
    for (auto [start, i] : order) {
      for (; e < events.size() && (events[e].time < start || (events[e].time == start && events[e].index < i)); ++e)
        events[e].add ? ledger.add(events[e].t) : static_cast<void>(ledger.remove(events[e].t));
      sample[i] = ledger.total();
      if (o_.memory_limit && ledger.total() > *o_.memory_limit) {
        const Op& op = ops[i];
        limit_errors_.push_back({start, r, fmt::format(
            "rank {}: memory limit exceeded at t={}: {}{} starts with {} {} resident (limit {}); resident: {}", r,
            format_time(start), op.describe(), where_suffix(op), format_memory(ledger.total()), cost_->memory_unit(),
            format_memory(*o_.memory_limit), ledger.summary())});
        break;
      }
    }
    for (int i : timed) {
      const Node& n = nodes_[id_of(r, i)];
      Op op = ops[i];
      if (op.kind == OpKind::Recv) op.peer = matched_src_[id_of(r, i)];
      if (n.call >= 0) {
        const Call& c = calls_[n.call];
        const auto& members = groups_[c.group];
        auto m = std::find(members.begin(), members.end(), r) - members.begin();
        if (!c.results.empty()) op.writes = {c.results[m]};
      }
      auto it = sample.find(i);
      trace_.ranks[r].push_back(OpRun{std::move(op), n.start, n.end, it == sample.end() ? 0.0 : it->second});
    }
  }

 public:
  // The earliest memory-limit error over the ranks (by time, then rank), if any.
  void throw_memory_limit() const {
    if (limit_errors_.empty()) return;
    auto first = std::min_element(limit_errors_.begin(), limit_errors_.end(), [](const auto& a, const auto& b) {
      return std::tie(a.time, a.rank) < std::tie(b.time, b.rank);
    });
    throw MemoryLimitError(first->message);
  }

 private:
  struct Channel {
    std::vector<int> sends, recvs;
    std::map<std::size_t, int> any;  // send position -> the recv from any source that takes it
    bool claimed(std::size_t k) const { return any.count(k) > 0; }
  };
  struct LimitError {
    Time time;
    int rank;
    std::string message;
  };

  const Schedule& s_;
  const SimOptions& o_;
  std::unique_ptr<CostModel> cost_;
  std::vector<int> offset_;
  std::vector<Node> nodes_;
  std::vector<std::vector<int>> groups_;
  std::map<std::pair<int, int>, Channel> channels_;  // (src, dst)
  std::vector<int> any_recvs_;
  std::vector<int> matched_src_;
  std::vector<char> paired_;  // sends matched with a recv
  std::vector<int> unmatched_sends_;
  std::map<std::pair<int, int>, std::vector<int>> calls_of_;  // (group, rank) -> its collectives in order
  std::vector<Call> calls_;
  std::vector<LimitError> limit_errors_;
  Time last_time_ = 0;
  Trace trace_;
};

}  // namespace

SimResult simulate_streams(const Schedule& schedule, const SimOptions& options) {
  SimResult result;
  if (static_cast<int>(schedule.ranks.size()) != schedule.header.world_size) {
    result.error = fmt::format("the schedule has op lists for {} ranks but world_size is {}", schedule.ranks.size(),
                               schedule.header.world_size);
    return result;
  }
  StreamSim sim(schedule, options);
  try {
    sim.run();
    sim.fill_trace();
    sim.throw_memory_limit();
    result.ok = true;
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  result.trace = std::move(sim.trace());
  return result;
}

}  // namespace trainsim
