// Dependency graph readability (issue 10 §5): a load links only to the first reader of each tensor it loads, a
// free to the last user of what it frees, and a legend names the edge styles. Streams (issue 7 §1): a rank with
// several streams gets a sub-cluster per stream and program-order edges along each stream only.
#include <doctest/doctest.h>

#include <cstddef>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "schedules/generators.h"
#include "schedules/text_format.h"
#include "dot_helpers.h"
#include "text_helpers.h"
#include "visualize/graph.h"

using namespace trainsim;
using trainsim::testing::count;
using trainsim::testing::dot_edges;
using trainsim::testing::is_data;
using trainsim::testing::is_program_order;

TEST_CASE("dependency dot of a 4-rank, 8-microbatch 1F1B: loads link to first readers, frees to last users, legend") {
  GenOptions o;
  o.stages = 4;
  o.microbatches = 8;
  Schedule s = generate("1f1b", o);
  std::string dot = visualize::dependency_dot(s);
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const auto& ops = s.ranks[r];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const std::string from = fmt::format("  r{}_{} -> ", r, i);
      // Data edges leaving this op (solid gray40).
      std::size_t out = 0, at = 0;
      while ((at = dot.find(from, at)) != std::string::npos) {
        std::size_t eol = dot.find('\n', at);
        if (dot.substr(at, eol - at).find("color=gray40") != std::string::npos) ++out;
        at = eol;
      }
      if (ops[i].kind == OpKind::Load) {
        // At most one edge per loaded tensor (to its first reader), however often a weight is read.
        CAPTURE(ops[i].describe());
        CHECK(out <= ops[i].writes.size());
      }
    }
    // The stage's weight is read by 8 forwards and 8 backwards, but the load has no edge to the later ones:
    // find the load of a weight and check its only data edge goes to the first op reading it.
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind != OpKind::Load) continue;
      for (const Tensor& t : ops[i].writes) {
        std::size_t first = 0, readers = 0;
        for (std::size_t j = i + 1; j < ops.size(); ++j)
          for (const Tensor& u : ops[j].reads)
            if (u == t) {
              if (readers++ == 0) first = j;
            }
        if (readers == 0) continue;
        CHECK(dot.find(fmt::format("  r{}_{} -> r{}_{} [color=gray40", r, i, r, first)) != std::string::npos);
      }
    }
  }
  // The legend: one cluster naming the four edge styles.
  CHECK(count(dot, "subgraph cluster_legend {") == 1);
  for (const char* what : {"program order", "data: reads what the earlier op wrote", "message: send to its receive",
                           "collective: each member to one point per call"})
    CHECK_MESSAGE(dot.find(what) != std::string::npos, what);
  // Graphviz lays it out (the legend's HTML label parses).
  std::string svg = visualize::render_dot_svg(dot);
  CHECK(svg.find("program order (next op on the rank)") != std::string::npos);
}

namespace {

/// The stream sub-cluster each node is declared in: (rank, op index) -> stream, -1 outside any.
std::map<std::pair<int, std::size_t>, int> node_streams(const std::string& dot) {
  static const std::regex open(R"(^    subgraph cluster_rank(\d+)_stream(\d+) \{$)");
  static const std::regex node(R"(^ +r(\d+)_(\d+) \[label=)");
  std::map<std::pair<int, std::size_t>, int> where;
  int current = -1;
  std::size_t pos = 0;
  while (pos < dot.size()) {
    std::size_t eol = dot.find('\n', pos);
    if (eol == std::string::npos) eol = dot.size();
    const std::string line = dot.substr(pos, eol - pos);
    std::smatch m;
    if (std::regex_match(line, m, open)) current = std::stoi(m[2]);
    else if (line == "    }") current = -1;
    else if (std::regex_search(line, m, node)) where[{std::stoi(m[1]), std::stoul(m[2])}] = current;
    pos = eol + 1;
  }
  return where;
}

}  // namespace

TEST_CASE("dependency dot with streams: a sub-cluster per stream, program order along each stream only") {
  GenOptions o;
  o.stages = 2;
  o.microbatches = 3;
  Schedule s = generate("gpipe", o);
  std::size_t recvs = 0;
  for (auto& ops : s.ranks)
    for (Op& op : ops)
      if (op.kind == OpKind::Recv) {
        op.stream = 1;
        ++recvs;
      }
  REQUIRE(recvs >= 6);  // each rank receives 3 activations or 3 gradients
  const std::string dot = visualize::dependency_dot(s);
  CHECK(visualize::dependency_dot(s) == dot);

  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    // Both ranks receive (rank 1 activations, rank 0 gradients): two sub-clusters each, compute first.
    const std::string c0 = fmt::format("    subgraph cluster_rank{}_stream0 {{\n      label=\"compute\";", r);
    const std::string c1 = fmt::format("    subgraph cluster_rank{}_stream1 {{\n      label=\"comm 1\";", r);
    CHECK(count(dot, c0) == 1);
    CHECK(count(dot, c1) == 1);
    CHECK(dot.find(c0) < dot.find(c1));
    CHECK(dot.find(c1) < dot.find(fmt::format("subgraph cluster_rank{} {{", r + 1)));
  }
  // Every op is declared once, inside its stream's sub-cluster.
  const auto where = node_streams(dot);
  CHECK(where.size() == s.op_count());
  for (std::size_t r = 0; r < s.ranks.size(); ++r)
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      auto it = where.find({static_cast<int>(r), i});
      REQUIRE(it != where.end());
      CHECK(it->second == s.ranks[r][i].stream);
    }

  // Dashed edges: exactly one from each op to the next op on its stream; none across streams.
  std::set<std::pair<std::pair<int, std::size_t>, std::size_t>> expected;  // ((rank, from), to)
  std::size_t stream1_pairs = 0;
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const auto& ops = s.ranks[r];
    for (std::size_t i = 0; i < ops.size(); ++i)
      for (std::size_t j = i + 1; j < ops.size(); ++j)
        if (ops[j].stream == ops[i].stream) {
          expected.insert({{static_cast<int>(r), i}, j});
          stream1_pairs += ops[i].stream == 1;
          break;
        }
  }
  CHECK(stream1_pairs >= 4);  // 2 per rank
  std::set<std::pair<std::pair<int, std::size_t>, std::size_t>> got;
  std::size_t cross_data = 0;
  for (const auto& e : dot_edges(dot)) {
    if (is_program_order(e)) {
      REQUIRE(e.from_rank == e.to_rank);
      const Op& a = s.ranks[e.from_rank][e.from];
      const Op& b = s.ranks[e.to_rank][e.to];
      CAPTURE(a.describe());
      CAPTURE(b.describe());
      CHECK(a.stream == b.stream);
      CHECK(got.insert({{e.from_rank, e.from}, e.to}).second);
    } else if (is_data(e) && s.ranks[e.from_rank][e.from].stream != s.ranks[e.to_rank][e.to].stream) {
      // A receive on the comm stream feeding compute: nothing else ranks the pair, so it constrains the layout.
      CHECK(e.attrs.find("constraint=true") != std::string::npos);
      ++cross_data;
    }
  }
  CHECK(got == expected);
  CHECK(cross_data >= recvs);  // each received tensor is read on the compute stream

  CHECK(dot.find("program order on a stream (next op on the same stream)") != std::string::npos);
  CHECK(dot.find("program order (next op on the rank)") == std::string::npos);
  // Graphviz lays it out: rank clusters, their stream sub-clusters and the legend.
  const std::string svg = visualize::render_dot_svg(dot);
  CHECK(count(svg, "class=\"cluster\"") == s.ranks.size() * 3 + 1);
  CHECK(svg.find(">comm 1<") != std::string::npos);
  CHECK(svg.find(">compute<") != std::string::npos);
}

TEST_CASE("dependency dot with streams: only ranks using several streams get sub-clusters, one stream has none") {
  GenOptions o;
  o.stages = 2;
  o.microbatches = 3;
  Schedule s = generate("gpipe", o);
  const std::string plain = visualize::dependency_dot(s);
  CHECK(plain.find("_stream") == std::string::npos);
  CHECK(plain.find("program order (next op on the rank)") != std::string::npos);
  CHECK(plain.find("program order on a stream") == std::string::npos);
  std::size_t dashed_edges = 0;
  for (const auto& e : dot_edges(plain))
    if (is_program_order(e)) {
      CHECK(e.to == e.from + 1);
      ++dashed_edges;
    }
  CHECK(dashed_edges == s.op_count() - s.ranks.size());

  // Only rank 1's receives move: rank 0 keeps its flat cluster.
  for (Op& op : s.ranks[1])
    if (op.kind == OpKind::Recv) op.stream = 1;
  const std::string mixed = visualize::dependency_dot(s);
  CHECK(mixed.find("cluster_rank0_stream") == std::string::npos);
  CHECK(count(mixed, "subgraph cluster_rank1_stream") == 2);
  CHECK(mixed.find("program order on a stream (next op on the same stream)") != std::string::npos);
  // Rank 0's part of the text is as before.
  const std::string rank0 = "  subgraph cluster_rank0 {";
  const std::string rank1 = "  subgraph cluster_rank1 {";
  CHECK(mixed.substr(mixed.find(rank0), mixed.find(rank1) - mixed.find(rank0)) ==
        plain.substr(plain.find(rank0), plain.find(rank1) - plain.find(rank0)));
}

TEST_CASE("dependency dot with streams: a .sched with a receive on stream 1 and sends on stream 2") {
  const Schedule s = parse_schedule(R"(trainsim-schedule 1
world_size 2
layers 2
microbatches 2
cost_model unit
p2p per-pair
stage_map 0 1

rank 0
  load -> W0
  load -> A0{0}
  forward L0 {0}
  send to 1 stream 2 : A1{0}
  load -> A0{1}
  forward L0 {1}
  send to 1 stream 2 : A1{1}
rank 1
  load -> W1
  recv from 0 stream 1 -> A1{0}
  recv from 0 stream 1 -> A1{1}
  forward L1 {0}
  forward L1 {1}
)");
  REQUIRE(s.ranks.size() == 2);
  REQUIRE(s.ranks[0].size() == 7);
  REQUIRE(s.ranks[1].size() == 5);
  const std::string dot = visualize::dependency_dot(s);
  CHECK(count(dot, "subgraph cluster_rank0_stream0 {") == 1);
  CHECK(count(dot, "subgraph cluster_rank0_stream2 {\n      label=\"comm 2\";") == 1);
  CHECK(count(dot, "subgraph cluster_rank1_stream1 {\n      label=\"comm 1\";") == 1);
  CHECK(dot.find("cluster_rank0_stream1") == std::string::npos);
  // Stream order: rank 0's loads and forwards on 0, its sends on 2; rank 1's load and forwards on 0, its
  // receives on 1.
  for (const char* edge : {"r0_0 -> r0_1 [style=dashed", "r0_1 -> r0_2 [style=dashed", "r0_2 -> r0_4 [style=dashed",
                           "r0_4 -> r0_5 [style=dashed", "r0_3 -> r0_6 [style=dashed", "r1_0 -> r1_3 [style=dashed",
                           "r1_3 -> r1_4 [style=dashed", "r1_1 -> r1_2 [style=dashed"})
    CHECK_MESSAGE(count(dot, edge) == 1, edge);
  std::size_t dashed_edges = 0;
  for (const auto& e : dot_edges(dot)) dashed_edges += is_program_order(e);
  CHECK(dashed_edges == 8);
  // No dashed edge between a compute op and the send or receive next to it in program order.
  for (const char* edge : {"r0_2 -> r0_3 [style=dashed", "r0_3 -> r0_4 [style=dashed", "r0_5 -> r0_6 [style=dashed",
                           "r1_0 -> r1_1 [style=dashed", "r1_2 -> r1_3 [style=dashed"})
    CHECK_MESSAGE(count(dot, edge) == 0, edge);
  // Messages still go from each send to its receive; a received activation feeds its forward across streams.
  CHECK(count(dot, "r0_3 -> r1_1 [style=bold, color=blue") == 1);
  CHECK(count(dot, "r0_6 -> r1_2 [style=bold, color=blue") == 1);
  CHECK(count(dot, "r1_1 -> r1_3 [color=gray40, constraint=true") == 1);
  CHECK(count(dot, "r1_2 -> r1_4 [color=gray40, constraint=true") == 1);
}

TEST_CASE("dependency dot with streams: large schedules collapse program order per stream") {
  // One rank, 6000 forwards alternating between streams 0 and 1; op i reads what op i-2 (the op before it on
  // its stream) wrote for i % 4 < 2, so half of the stream-order pairs also have a data edge.
  Schedule s;
  s.header.world_size = 1;
  s.header.layers = 1;
  s.header.microbatches = 1;
  s.ranks.resize(1);
  const std::size_t n = 6000;
  for (std::size_t i = 0; i < n; ++i) {
    Op op;
    op.kind = OpKind::Forward;
    op.layer = 0;
    op.batches = IdSet{0};
    op.stream = static_cast<int>(i % 2);
    op.writes = {activation_tensor(static_cast<int>(i + 1), {0})};
    if (i >= 2 && i % 4 < 2) op.reads = {activation_tensor(static_cast<int>(i - 1), {0})};
    s.ranks[0].push_back(op);
  }
  const std::string dot = visualize::dependency_dot(s);
  std::size_t program = 0, data = 0;
  for (const auto& e : dot_edges(dot)) {
    if (is_program_order(e)) {
      ++program;
      CHECK(e.to == e.from + 2);
    } else if (is_data(e)) {
      ++data;
      CHECK(e.to == e.from + 2);
      CHECK(e.attrs.find("constraint=true") != std::string::npos);
    }
  }
  CHECK(data == n / 2 - 2);          // i = 4, 5, 8, 9, ..., 5996, 5997
  CHECK(program == (n - 2) - data);  // stream-order pairs not already joined by a data edge
}
