// Chrome/Perfetto trace JSON (visualize/perfetto.h) and the Graphviz dependency graph (visualize/graph.h):
// structure checked against the trace or schedule they were made from, send/receive matching, memory
// counters, escaping, determinism, rendering to SVG and its errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dot_helpers.h"
#include "text_helpers.h"
#include "puzzles/runner.h"
#include "visualize/graph.h"
#include "visualize/perfetto.h"

using namespace trainsim;
using nlohmann::json;
using trainsim::visualize::dependency_dot;
using trainsim::visualize::perfetto_trace_json;
using trainsim::visualize::render_dot_svg;

using trainsim::testing::count;
using trainsim::testing::DotEdge;
using trainsim::testing::dot_edges;
using trainsim::testing::is_data;
using trainsim::testing::is_message;
using trainsim::testing::is_program_order;

namespace {

double us(Time t) { return static_cast<double>(t) / 1000.0; }

const puzzles::PuzzleResult& gpipe_run() {
  static const puzzles::PuzzleResult r = [] {
    const puzzles::Puzzle* p = puzzles::find_puzzle("gpipe");
    REQUIRE(p != nullptr);
    return puzzles::run_puzzle(*p, false, /*record=*/true);
  }();
  return r;
}

Op make_op(OpKind kind, int rank, int layer = -1, IdSet batches = {}) {
  Op op;
  op.kind = kind;
  op.rank = rank;
  op.layer = layer;
  op.batches = std::move(batches);
  return op;
}

OpRun run_of(Op op, Time start, Time end, double memory) { return OpRun{std::move(op), start, end, memory}; }

/// The parsed trace, indexed: rank of each pid (from process_name "rank N"), events by phase.
struct Parsed {
  json doc;
  std::map<long long, int> rank_of_pid;
  std::map<int, long long> pid_of_rank;
  std::map<std::pair<long long, long long>, std::string> thread_names;  // (pid, tid) -> name
  std::vector<json> complete, instants, flow_starts, flow_ends, counters;
  std::vector<json> exposed;  // the "exposed comm" threads' slices (X events of cat "exposed-comm")
};

Parsed parse(const std::string& text) {
  Parsed p;
  p.doc = json::parse(text);
  REQUIRE(p.doc.is_object());
  REQUIRE(p.doc.contains("traceEvents"));
  for (const auto& e : p.doc["traceEvents"]) {
    std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "process_name") {
      std::string name = e.at("args").at("name");
      REQUIRE(name.rfind("rank ", 0) == 0);
      int rank = std::stoi(name.substr(5));
      long long pid = e.at("pid");
      CHECK(p.rank_of_pid.count(pid) == 0);
      p.rank_of_pid[pid] = rank;
      p.pid_of_rank[rank] = pid;
    } else if (ph == "M" && e.at("name") == "thread_name") {
      p.thread_names[{e.at("pid").get<long long>(), e.at("tid").get<long long>()}] = e.at("args").at("name");
    } else if (ph == "X" && e.at("cat") == "exposed-comm") {
      p.exposed.push_back(e);
    } else if (ph == "X") {
      p.complete.push_back(e);
    } else if (ph == "i") {
      p.instants.push_back(e);
    } else if (ph == "s") {
      p.flow_starts.push_back(e);
    } else if (ph == "f") {
      p.flow_ends.push_back(e);
    } else if (ph == "C") {
      p.counters.push_back(e);
    }
  }
  return p;
}

std::string expected_name(const Op& op) {
  std::string s = op_name(op.kind);
  if (op.layer >= 0) s += " L" + std::to_string(op.layer);
  return s;
}

/// Checks a parsed trace against the trace it was made from.
void check_against(const Parsed& p, const Trace& trace) {
  const int nranks = static_cast<int>(trace.ranks.size());
  REQUIRE(static_cast<int>(p.pid_of_rank.size()) == nranks);
  for (int r = 0; r < nranks; ++r) REQUIRE(p.pid_of_rank.count(r) == 1);

  // Complete events: one per timed op, in order per rank, with the trace's times in microseconds.
  std::map<int, std::vector<const json*>> x_by_rank;
  for (const auto& e : p.complete) x_by_rank[p.rank_of_pid.at(e.at("pid").get<long long>())].push_back(&e);
  std::size_t timed_total = 0;
  for (int r = 0; r < nranks; ++r) {
    std::vector<const OpRun*> timed;
    for (const auto& run : trace.ranks[r])
      if (is_timed(run.op.kind)) timed.push_back(&run);
    timed_total += timed.size();
    REQUIRE(x_by_rank[r].size() == timed.size());
    for (std::size_t i = 0; i < timed.size(); ++i) {
      const json& e = *x_by_rank[r][i];
      const OpRun& run = *timed[i];
      CAPTURE(run.op.describe());
      CHECK(e.at("ts").get<double>() == doctest::Approx(us(run.start)));
      CHECK(e.at("dur").get<double>() == doctest::Approx(us(run.end - run.start)));
      CHECK(e.at("name") == expected_name(run.op));
      CHECK(e.at("args").at("memory").get<double>() == doctest::Approx(run.memory));
      CHECK(e.at("args").at("batches") == run.op.batches.str());
      CHECK(e.at("args").at("reads").size() == run.op.reads.size());
      CHECK(e.at("args").at("writes").size() == run.op.writes.size());
      std::string cat = e.at("cat");
      CHECK(cat == (is_p2p(run.op.kind) ? "p2p" : is_collective(run.op.kind) ? "collective" : "compute"));
      // The thread is named after the op's stream.
      auto tn = p.thread_names.find({e.at("pid").get<long long>(), e.at("tid").get<long long>()});
      REQUIRE(tn != p.thread_names.end());
      CHECK(tn->second == (run.op.stream == 0 ? std::string("compute") : "comm " + std::to_string(run.op.stream)));
    }
  }
  CHECK(p.complete.size() == timed_total);

  // Memory counters: a sample at each timed op's start, then one at the rank's last op end.
  std::map<int, std::vector<const json*>> c_by_rank;
  for (const auto& e : p.counters) {
    CHECK(e.at("name") == "memory");
    c_by_rank[p.rank_of_pid.at(e.at("pid").get<long long>())].push_back(&e);
  }
  const std::string unit = trace.memory_unit.empty() ? std::string("memory") : trace.memory_unit;
  for (int r = 0; r < nranks; ++r) {
    if (trace.ranks[r].empty()) continue;
    std::vector<std::pair<Time, double>> want;
    Time last_end = 0;
    for (const auto& run : trace.ranks[r]) {
      if (is_timed(run.op.kind)) want.emplace_back(run.start, run.memory);
      last_end = std::max(last_end, run.end);
    }
    want.emplace_back(last_end, trace.ranks[r].back().memory);
    REQUIRE(c_by_rank[r].size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      CHECK(c_by_rank[r][i]->at("ts").get<double>() == doctest::Approx(us(want[i].first)));
      CHECK(c_by_rank[r][i]->at("args").at(unit).get<double>() == doctest::Approx(want[i].second));
    }
  }
}

}  // namespace

TEST_CASE("perfetto trace json: gpipe run, processes, complete events, memory counters") {
  const auto& r = gpipe_run();
  REQUIRE(r.correct);
  std::string text = perfetto_trace_json(r.trace);
  Parsed p = parse(text);
  CHECK(p.doc.at("displayTimeUnit") == "ms");
  CHECK(p.doc.at("otherData").at("world_size") == r.trace.world_size);
  CHECK(p.doc.at("otherData").at("memory_unit") == r.trace.memory_unit);
  check_against(p, r.trace);
  // Deterministic.
  CHECK(perfetto_trace_json(r.trace) == text);
}

TEST_CASE("perfetto trace json: gpipe run, a flow from each send to its receive") {
  const Trace& trace = gpipe_run().trace;
  Parsed p = parse(perfetto_trace_json(trace));
  std::size_t sends = 0;
  for (const auto& runs : trace.ranks)
    for (const auto& run : runs) sends += run.op.kind == OpKind::Send;
  REQUIRE(sends > 0);
  CHECK(p.flow_starts.size() == sends);
  CHECK(p.flow_ends.size() == sends);

  // Each flow start sits on a send (sender's pid, send's ts), the finish with the same id on the receiving
  // rank's pid at the ts of a receive from the sender.
  std::map<std::uint64_t, const json*> ends;
  for (const auto& f : p.flow_ends) {
    CHECK(f.at("bp") == "e");
    std::uint64_t id = f.at("id");
    CHECK(ends.count(id) == 0);
    ends[id] = &f;
  }
  std::map<std::pair<int, int>, std::vector<double>> send_ts, recv_ts;  // (src, dst) -> ts of each, in order
  for (int r = 0; r < static_cast<int>(trace.ranks.size()); ++r)
    for (const auto& run : trace.ranks[r]) {
      if (run.op.kind == OpKind::Send) send_ts[{r, run.op.peer}].push_back(us(run.start));
      if (run.op.kind == OpKind::Recv) recv_ts[{run.op.peer, r}].push_back(us(run.start));
    }
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> flows;  // (src, dst) -> (s ts, f ts)
  for (const auto& s : p.flow_starts) {
    std::uint64_t id = s.at("id");
    REQUIRE(ends.count(id) == 1);
    const json& f = *ends.at(id);
    CHECK(f.at("name") == s.at("name"));
    CHECK(f.at("cat") == s.at("cat"));
    int src = p.rank_of_pid.at(s.at("pid").get<long long>());
    int dst = p.rank_of_pid.at(f.at("pid").get<long long>());
    CHECK(src != dst);
    flows[{src, dst}].push_back({s.at("ts").get<double>(), f.at("ts").get<double>()});
  }
  // Per pair, the k-th send's ts pairs with the k-th receive's ts (file order is the senders' op order).
  CHECK(flows.size() == send_ts.size());
  for (const auto& [pair, list] : flows) {
    CAPTURE(pair.first);
    CAPTURE(pair.second);
    REQUIRE(list.size() == send_ts[pair].size());
    REQUIRE(list.size() == recv_ts[pair].size());
    for (std::size_t k = 0; k < list.size(); ++k) {
      CHECK(list[k].first == doctest::Approx(send_ts[pair][k]));
      CHECK(list[k].second == doctest::Approx(recv_ts[pair][k]));
      CHECK(list[k].second >= list[k].first);
    }
  }
}

TEST_CASE("perfetto trace json: hand-made trace, exact values, streams, instants, k-th send matching") {
  Trace t;
  t.world_size = 3;
  t.layers = 1;
  t.batches = 2;
  t.cost_model = "test";
  t.memory_unit = "bytes";
  t.ranks.resize(3);
  // Rank 0: load (untimed), forward 0..1 s, send to 2 twice (second on stream 1), loss with zero duration.
  Op load = make_op(OpKind::Load, 0);
  load.writes = {weight_tensor(0)};
  t.ranks[0].push_back(run_of(load, 0, 0, 0));
  Op fwd = make_op(OpKind::Forward, 0, 0, {0});
  fwd.reads = {weight_tensor(0), activation_tensor(0, {0})};
  fwd.writes = {activation_tensor(1, {0})};
  fwd.where = "x.cpp:1";
  t.ranks[0].push_back(run_of(fwd, 0, 1'000'000'000, 10));
  Op s1 = make_op(OpKind::Send, 0);
  s1.peer = 2;
  s1.reads = {activation_tensor(1, {0})};
  t.ranks[0].push_back(run_of(s1, 1'000'000'000, 1'000'001'500, 12.5));
  Op s2 = s1;
  s2.stream = 1;
  t.ranks[0].push_back(run_of(s2, 1'000'001'500, 1'200'000'000, 12.5));
  Op loss = make_op(OpKind::Loss, 0, 1, {0});
  t.ranks[0].push_back(run_of(loss, 1'200'000'000, 1'200'000'000, 7));
  // Rank 1: one send to 2.
  Op s3 = make_op(OpKind::Send, 1);
  s3.peer = 2;
  t.ranks[1].push_back(run_of(s3, 500'000'000, 700'000'000, 1));
  // Rank 2: receives from 1, then from 0, then from 0 (the sends' order per pair decides the matching).
  Op rv = make_op(OpKind::Recv, 2);
  rv.peer = 1;
  t.ranks[2].push_back(run_of(rv, 2'000'000'000, 2'100'000'000, 3));
  rv.peer = 0;
  t.ranks[2].push_back(run_of(rv, 3'000'000'000, 3'100'000'000, 4));
  t.ranks[2].push_back(run_of(rv, 4'000'000'000, 4'100'000'000, 5));

  std::string text = perfetto_trace_json(t);
  Parsed p = parse(text);
  check_against(p, t);

  // Exact microsecond values, including a fractional one.
  REQUIRE(p.complete.size() == 8);
  CHECK(p.complete[0].at("name") == "forward L0");
  CHECK(p.complete[0].at("ts").get<double>() == 0.0);
  CHECK(p.complete[0].at("dur").get<double>() == 1e6);
  CHECK(p.complete[0].at("args").at("where") == "x.cpp:1");
  CHECK(p.complete[1].at("dur").get<double>() == 1.5);
  CHECK(p.complete[3].at("name") == "loss L1");
  CHECK(p.complete[3].at("dur").get<double>() == 0.0);
  // Stream 1 is its own thread "comm 1"; stream 0 "compute".
  CHECK(p.complete[2].at("tid") != p.complete[1].at("tid"));
  std::set<std::string> rank0_threads;
  for (const auto& [key, name] : p.thread_names)
    if (p.rank_of_pid.at(key.first) == 0) rank0_threads.insert(name);
  // (and, its communication taking time under a model other than the puzzles', the exposed-communication track)
  CHECK(rank0_threads == std::set<std::string>{"compute", "comm 1", "exposed comm"});
  // Rank 0's sends from 1 s to 1.2 s run after its forward: exposed, one slice over both.
  REQUIRE(p.exposed.size() == 5);  // and rank 1's send, rank 2's three receives
  CHECK(p.exposed[0].at("ts").get<double>() == 1e6);
  CHECK(p.exposed[0].at("dur").get<double>() == 2e5);
  // Thread ids do not repeat across processes (Perfetto names threads by tid alone).
  std::set<long long> tids;
  for (const auto& [key, name] : p.thread_names) CHECK(tids.insert(key.second).second);
  // The untimed load is an instant.
  REQUIRE(p.instants.size() == 1);
  CHECK(p.instants[0].at("name") == "load");
  // Memory counters carry the unit's name; the final sample is at the last end with the last op's memory.
  CHECK(p.counters.back().at("args").at("bytes").get<double>() == 5);
  CHECK(p.counters.back().at("ts").get<double>() == 4.1e6);

  // Matching: rank 1's send -> rank 2's first receive; rank 0's first send -> second receive, second -> third.
  REQUIRE(p.flow_starts.size() == 3);
  REQUIRE(p.flow_ends.size() == 3);
  std::map<std::uint64_t, double> end_ts;
  for (const auto& f : p.flow_ends) {
    CHECK(p.rank_of_pid.at(f.at("pid").get<long long>()) == 2);
    end_ts[f.at("id").get<std::uint64_t>()] = f.at("ts").get<double>();
  }
  std::map<double, double> start_to_end;
  for (const auto& s : p.flow_starts) start_to_end[s.at("ts").get<double>()] = end_ts.at(s.at("id").get<std::uint64_t>());
  CHECK(start_to_end.at(1e6) == 3e6);
  CHECK(start_to_end.at(1000001.5) == 4e6);
  CHECK(start_to_end.at(5e5) == 2e6);

  CHECK(perfetto_trace_json(t) == text);
}

TEST_CASE("perfetto trace json: an unmatched send has no flow, an empty trace is valid") {
  Trace t;
  t.world_size = 2;
  t.ranks.resize(2);
  Op s = make_op(OpKind::Send, 0);
  s.peer = 1;
  t.ranks[0].push_back(run_of(s, 0, 10, 0));
  Parsed p = parse(perfetto_trace_json(t));
  CHECK(p.flow_starts.empty());
  CHECK(p.flow_ends.empty());
  CHECK(p.pid_of_rank.size() == 2);

  Trace empty;
  Parsed q = parse(perfetto_trace_json(empty));
  CHECK(q.doc.at("traceEvents").empty());
}

// ---- DOT -------------------------------------------------------------------------------------------

TEST_CASE("dependency dot: gpipe schedule, clusters, nodes, program order, data and message edges") {
  const auto& r = gpipe_run();
  REQUIRE(r.schedule.has_value());
  const Schedule& s = *r.schedule;
  std::string dot = dependency_dot(s);
  CHECK(dot.find("digraph") != std::string::npos);
  CHECK(count(dot, "subgraph cluster_rank") == s.ranks.size());
  for (std::size_t rank = 0; rank < s.ranks.size(); ++rank) {
    CHECK(count(dot, "subgraph cluster_rank" + std::to_string(rank) + " {") == 1);
    CHECK(count(dot, "label=\"rank " + std::to_string(rank) + "\"") == 1);
  }
  // One node per op.
  std::size_t nodes = 0;
  for (std::size_t rank = 0; rank < s.ranks.size(); ++rank)
    for (std::size_t i = 0; i < s.ranks[rank].size(); ++i) {
      std::string decl = "\n    r" + std::to_string(rank) + "_" + std::to_string(i) + " [label=";
      CHECK(count(dot, decl) == 1);
      ++nodes;
    }
  CHECK(count(dot, " [label=") == nodes);
  CHECK(nodes == s.op_count());

  std::vector<DotEdge> edges = dot_edges(dot);
  std::size_t program = 0, messages = 0, sends = 0, fwd_to_bwd = 0;
  for (const auto& ops : s.ranks)
    for (const auto& op : ops) sends += op.kind == OpKind::Send;
  for (const auto& e : edges) {
    if (is_program_order(e)) {
      ++program;
      CHECK(e.from_rank == e.to_rank);
      CHECK(e.to == e.from + 1);
    } else if (is_data(e)) {
      REQUIRE(e.from_rank == e.to_rank);
      CHECK(e.from < e.to);
      const Op& w = s.ranks[e.from_rank][e.from];
      const Op& rd = s.ranks[e.to_rank][e.to];
      // The reader reads something the writer wrote (a free: something the op before it used).
      bool shared = false;
      for (const auto& t : rd.reads) {
        for (const auto& u : w.writes) shared = shared || t == u;
        if (rd.kind == OpKind::Free)
          for (const auto& u : w.reads) shared = shared || t == u;
      }
      CHECK(shared);
      if (w.kind == OpKind::Forward && rd.kind == OpKind::Backward) ++fwd_to_bwd;
      // Only data edges between consecutive ops constrain the layout.
      CHECK(e.attrs.find(e.to == e.from + 1 ? "constraint=true" : "constraint=false") != std::string::npos);
    } else if (is_message(e)) {
      ++messages;
      const Op& snd = s.ranks[e.from_rank][e.from];
      const Op& rcv = s.ranks[e.to_rank][e.to];
      CHECK(snd.kind == OpKind::Send);
      CHECK(rcv.kind == OpKind::Recv);
      CHECK(snd.peer == e.to_rank);
      CHECK(rcv.peer == e.from_rank);
      CHECK(snd.reads == rcv.writes);  // the payload that travels
    }
  }
  std::size_t pairs = 0;
  for (const auto& ops : s.ranks) pairs += ops.empty() ? 0 : ops.size() - 1;
  CHECK(program == pairs);
  CHECK(messages == sends);
  CHECK(sends > 0);
  // gpipe holds two layers per rank: each rank's backward of its upper layer reads the activation its
  // forward of the lower layer wrote.
  CHECK(fwd_to_bwd >= s.ranks.size());
  std::set<int> ranks_with_fwd_bwd;
  for (const auto& e : edges)
    if (is_data(e) && s.ranks[e.from_rank][e.from].kind == OpKind::Forward &&
        s.ranks[e.to_rank][e.to].kind == OpKind::Backward)
      ranks_with_fwd_bwd.insert(e.from_rank);
  CHECK(ranks_with_fwd_bwd.size() == s.ranks.size());

  CHECK(dependency_dot(s) == dot);
}

TEST_CASE("dependency dot: collectives, escaping, last writer wins, unmatched receive") {
  Schedule s;
  s.header.world_size = 2;
  s.ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    Op w1 = make_op(OpKind::Forward, r, 0, {r});
    w1.writes = {activation_tensor(1, {r})};
    w1.where = R"(dir\file "q".cpp:3)";
    Op w2 = w1;  // writes the same tensor again: readers link to this one
    w2.where.clear();
    Op ar = make_op(OpKind::AllReduce, r, 0);
    ar.reads = {activation_tensor(1, {r})};
    Op ar2 = make_op(OpKind::AllReduce, r, 0);
    ar2.group = 1;
    s.ranks[r] = {w1, w2, ar, ar2};
  }
  Op any = make_op(OpKind::Recv, 1);  // from any source: not matched statically
  any.peer = -1;
  s.ranks[1].push_back(any);
  Op snd = make_op(OpKind::Send, 0);
  snd.peer = 1;
  s.ranks[0].push_back(snd);
  std::string dot = dependency_dot(s);

  // Two calls (group 0 #0 and group 1 #0), each a point with an edge from both members.
  CHECK(count(dot, "c0_0 [shape=point") == 1);
  CHECK(count(dot, "c1_0 [shape=point") == 1);
  CHECK(count(dot, "r0_2 -> c0_0 [dir=none") == 1);
  CHECK(count(dot, "r1_2 -> c0_0 [dir=none") == 1);
  CHECK(count(dot, "r0_3 -> c1_0 [dir=none") == 1);
  CHECK(count(dot, "r1_3 -> c1_0 [dir=none") == 1);
  // Escaped where in the tooltip.
  CHECK(dot.find(R"((dir\\file \"q\".cpp:3))") != std::string::npos);
  // Data edge from the last writer only.
  std::vector<DotEdge> edges = dot_edges(dot);
  std::vector<std::pair<std::size_t, std::size_t>> data0;
  for (const auto& e : edges)
    if (is_data(e) && e.from_rank == 0) data0.emplace_back(e.from, e.to);
  CHECK(data0 == std::vector<std::pair<std::size_t, std::size_t>>{{1, 2}});
  // The send has no receive naming rank 0: no message edge.
  for (const auto& e : edges) CHECK_FALSE(is_message(e));
  // The whole thing parses and lays out.
  std::string svg = render_dot_svg(dot);
  CHECK(svg.find("<svg") != std::string::npos);
}

TEST_CASE("dependency dot: large schedules collapse program order into data edges") {
  Schedule s;
  s.header.world_size = 1;
  s.ranks.resize(1);
  const int n = 6000;
  for (int i = 0; i < n; ++i) {
    Op op = make_op(OpKind::Forward, 0, i, {0});
    op.reads = {activation_tensor(i, {0})};
    op.writes = {activation_tensor(i + 1, {0})};
    if (i % 2 == 1) op.reads.clear();  // every other pair has no data edge
    s.ranks[0].push_back(op);
  }
  std::string dot = dependency_dot(s);
  std::vector<DotEdge> edges = dot_edges(dot);
  std::size_t program = 0, data = 0;
  for (const auto& e : edges) {
    program += is_program_order(e);
    data += is_data(e);
  }
  CHECK(data == static_cast<std::size_t>(n / 2 - 1));  // reads of A_i for even i > 0, written by op i-1
  CHECK(program == static_cast<std::size_t>(n - 1) - data);
  CHECK(count(dot, " [label=") == static_cast<std::size_t>(n));
}

TEST_CASE("render dot svg: renders labels, rejects bad DOT, keeps working after an error") {
  Schedule s;
  s.header.world_size = 1;
  s.ranks.resize(1);
  Op f = make_op(OpKind::Forward, 0, 0, {0});
  f.writes = {activation_tensor(1, {0})};
  Op b = make_op(OpKind::Backward, 0, 0, {0});
  b.reads = {activation_tensor(1, {0})};
  s.ranks[0] = {f, b};
  std::string svg = render_dot_svg(dependency_dot(s));
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(svg.find("F L0 {0}") != std::string::npos);
  CHECK(svg.find("B L0 {0}") != std::string::npos);
  CHECK(svg.find("rank 0") != std::string::npos);

  CHECK_THROWS_AS(render_dot_svg("digraph { a -> ; }"), std::runtime_error);
  try {
    render_dot_svg("this is not dot {");
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("does not parse") != std::string::npos);
  }
  CHECK_THROWS_AS(render_dot_svg(""), std::runtime_error);
  CHECK_THROWS_AS(render_dot_svg("digraph { a [label=\"unterminated]; }"), std::runtime_error);
  // Graphviz's parser state survives the errors.
  std::string again = render_dot_svg("digraph { x [label=\"after & <errors>\"]; x -> y; }");
  CHECK(again.find("<svg") != std::string::npos);
  CHECK(again.find("after &amp; &lt;errors&gt;") != std::string::npos);
}

TEST_CASE("render dot svg: the gpipe dependency graph") {
  const auto& r = gpipe_run();
  REQUIRE(r.schedule.has_value());
  std::string svg = render_dot_svg(dependency_dot(*r.schedule));
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(count(svg, "class=\"node\"") >= r.schedule->op_count());
  CHECK(count(svg, "class=\"cluster\"") == r.schedule->ranks.size() + 1);  // and the legend
}
