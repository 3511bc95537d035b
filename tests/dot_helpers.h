// Reading the dependency graph's DOT in tests: its op-to-op edges and what kind each one is (the styles
// visualize/graph.cpp writes).
#pragma once

#include <cstddef>
#include <regex>
#include <string>
#include <vector>

namespace trainsim::testing {

/// One edge between op nodes: from rank `from_rank`'s op `from` to rank `to_rank`'s op `to`, with its attributes.
struct DotEdge {
  int from_rank;
  std::size_t from;
  int to_rank;
  std::size_t to;
  std::string attrs;
};

/// Edges between op nodes ("  r<a>_<i> -> r<b>_<j> [attrs];"), in the order the DOT lists them.
inline std::vector<DotEdge> dot_edges(const std::string& dot) {
  static const std::regex re(R"(\n  r(\d+)_(\d+) -> r(\d+)_(\d+) \[([^\]]*)\];)");
  std::vector<DotEdge> edges;
  for (auto it = std::sregex_iterator(dot.begin(), dot.end(), re); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    edges.push_back(DotEdge{std::stoi(m[1]), std::stoul(m[2]), std::stoi(m[3]), std::stoul(m[4]), m[5]});
  }
  return edges;
}

/// A data edge: the op at the head reads what the tail wrote, on the same rank.
inline bool is_data(const DotEdge& e) { return e.attrs.rfind("color=gray40", 0) == 0; }
/// A message: a send to its matched receive.
inline bool is_message(const DotEdge& e) { return e.attrs.rfind("style=bold, color=blue", 0) == 0; }
/// Program order between consecutive ops (of one stream).
inline bool is_program_order(const DotEdge& e) { return e.attrs.rfind("style=dashed, color=gray80", 0) == 0; }

}  // namespace trainsim::testing
