// Dependency graph readability (issue 10 §5): a load links only to the first reader of each tensor it loads, a
// free to the last user of what it frees, and a legend names the edge styles.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "schedules/generators.h"
#include "text_helpers.h"
#include "visualize/graph.h"

using namespace trainsim;
using trainsim::testing::count;

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
