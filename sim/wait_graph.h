// Deadlock reports, shared by the puzzles' World (sim/world.h) and the stream engine
// (schedules/stream_sim.h): rank lists cut to a readable length, the wait-for cycle found without
// recursion, and its text. A report stays linear in the world size however many ranks wait for how many.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace trainsim {

/// Ranks and lines a deadlock report lists before it gives a count of the rest.
inline constexpr std::size_t kListedRanks = 16;

/// "0, 1, 2" (the first kListedRanks, then ", ... and N more").
std::string rank_list(const std::vector<int>& ranks);

/// The i-th node that `node` waits for; -1 past the last edge, -2 for an edge to skip (a finished rank,
/// itself). `stack` is the depth-first path so far (nodes), for edges that depend on it.
using WaitEdge = std::function<int(int node, std::size_t i, const std::vector<int>& stack)>;

/// A cycle in a wait-for graph of `node_count` nodes, of which 0..ranks-1 are ranks and the others helper
/// nodes (e.g. one per collective call, waiting for its missing members): a depth-first search with an
/// explicit stack from each root in order. Returns the cycle's ranks, the first repeated at the end
/// ("0 1 0"); empty when there is none. O(nodes + edges followed).
std::vector<int> find_wait_cycle(int node_count, int ranks, const std::vector<int>& roots, const WaitEdge& edge);

/// "\n  no rank can send: ..." for a deadlock in which every blocked rank waits in a receive from any source:
/// there is no wait-for cycle to report (a cycle through "any rank" would be made up), only nobody left to send.
std::string no_sender_text();

/// "\n  wait-for cycle: rank 0 -> rank 1 -> rank 0" (the first kListedRanks ranks of a long cycle, then how
/// many more), or the line saying there is none.
std::string cycle_text(const std::vector<int>& cycle);

}  // namespace trainsim
