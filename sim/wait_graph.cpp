#include "sim/wait_graph.h"

#include <algorithm>

#include <fmt/format.h>

namespace trainsim {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size() && i < kListedRanks; ++i) s += (i ? ", " : "") + fmt::format("{}", ranks[i]);
  if (ranks.size() > kListedRanks) s += fmt::format(", ... and {} more", ranks.size() - kListedRanks);
  return s;
}

std::vector<int> find_wait_cycle(int node_count, int ranks, const std::vector<int>& roots, const WaitEdge& edge) {
  std::vector<char> state(static_cast<std::size_t>(node_count), 0);  // 0 new, 1 on the stack, 2 done
  std::vector<int> path;                                              // the nodes on the stack
  std::vector<std::size_t> next;                                      // each one's next edge
  for (int root : roots) {
    if (state[root] != 0) continue;
    path.assign(1, root);
    next.assign(1, 0);
    state[root] = 1;
    while (!path.empty()) {
      const int w = edge(path.back(), next.back(), path);
      if (w == -1) {
        state[path.back()] = 2;
        path.pop_back();
        next.pop_back();
        continue;
      }
      ++next.back();
      if (w == -2 || state[w] == 2) continue;
      if (state[w] == 1) {
        std::vector<int> cycle;
        for (auto it = std::find(path.begin(), path.end(), w); it != path.end(); ++it)
          if (*it < ranks) cycle.push_back(*it);
        cycle.push_back(w);
        return cycle;
      }
      state[w] = 1;
      path.push_back(w);
      next.push_back(0);
    }
  }
  return {};
}

std::string no_sender_text() {
  return "\n  no rank can send: every blocked rank waits to receive from any rank, and no rank that is still running "
         "reaches a send (each receive needs a matching pass_to/send on another rank)";
}

std::string cycle_text(const std::vector<int>& cycle) {
  if (cycle.empty()) return "\n  no wait-for cycle: the blocked ranks wait for ranks that finished";
  std::string s = "\n  wait-for cycle: ";
  for (std::size_t i = 0; i + 1 < cycle.size() && i < kListedRanks; ++i) s += fmt::format("{}rank {}", i ? " -> " : "", cycle[i]);
  if (cycle.size() - 1 > kListedRanks) s += fmt::format(" -> ... ({} more ranks)", cycle.size() - 1 - kListedRanks);
  s += fmt::format(" -> rank {}", cycle.back());
  if (cycle.size() - 1 > kListedRanks) s += fmt::format(" ({} ranks in the cycle)", cycle.size() - 1);
  return s;
}

}  // namespace trainsim
