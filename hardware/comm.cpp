#include "hardware/comm.h"

#include <algorithm>
#include <cmath>

namespace trainsim::hw {

const char* algorithm_name(NcclAlgorithm a) {
  switch (a) {
    case NcclAlgorithm::Ring: return "ring";
    case NcclAlgorithm::Tree: return "tree";
    case NcclAlgorithm::Nvls: return "nvls";
  }
  return "ring";
}

double p2p_seconds(double bytes, const Link& link) { return link.latency_s + bytes / link.bandwidth; }

double collective_seconds(Collective c, int n, double bytes, const Link& link) {
  if (n <= 1) return 0;
  if (c == Collective::Broadcast || c == Collective::Reduce) return (n - 1) * link.latency_s + bytes / link.bandwidth;
  const double steps = n - 1, share = (n - 1.0) / n;
  const double one = steps * link.latency_s + share * bytes / link.bandwidth;
  return c == Collective::AllReduce ? 2 * one : one;
}

double bus_bandwidth(Collective c, int n, double bytes, double seconds) {
  const double algbw = bytes / seconds;
  if (c == Collective::Broadcast || c == Collective::Reduce) return algbw;
  const double factor = (n - 1.0) / n;
  return c == Collective::AllReduce ? algbw * 2 * factor : algbw * factor;
}

double ring_bus_bandwidth(const GroupShape& g, const NetworkSpec& net) {
  if (g.nodes <= 1) return net.intra_bandwidth;
  const double nics = std::min<double>(net.nics_per_node, static_cast<double>(g.ranks_per_node) * net.nics_per_node /
                                                              net.gpus_per_node);
  const double inter = nics * net.inter_bandwidth;
  return g.ranks_per_node > 1 ? std::min(net.intra_bandwidth, inter) : inter;
}

CollectiveTime nccl_collective(Collective c, const GroupShape& g, double bytes, const NetworkSpec& net) {
  const int n = g.ranks, N = std::max(g.nodes, 1);
  if (n <= 1) return {};
  const double bus = ring_bus_bandwidth(g, net);
  if (c == Collective::Broadcast || c == Collective::Reduce) {
    const double hop = N == 1 ? net.intra_latency_s : net.inter_latency_s;
    return {net.collective_latency_s + (n - 1) * hop + bytes / bus, NcclAlgorithm::Ring};
  }
  const bool all_reduce = c == Collective::AllReduce;
  const double steps = all_reduce ? 2.0 * (n - 1) : n - 1.0;
  const double inter_steps = all_reduce ? 2.0 * (N - 1) : N - 1.0;
  const double share = (all_reduce ? 2.0 : 1.0) * (n - 1.0) / n;
  CollectiveTime best{net.collective_latency_s + (steps - inter_steps) * net.intra_latency_s +
                          inter_steps * net.inter_latency_s + share * bytes / bus,
                      NcclAlgorithm::Ring};
  if (all_reduce && N > 1) {
    const double levels = std::floor(std::log2(static_cast<double>(N)));
    const double t = 2 * ((g.ranks_per_node - 1) * net.tree_intra_latency_s + levels * net.tree_inter_latency_s) +
                     bytes / (0.5 * 0.92 * bus);
    if (t < best.seconds) best = {t, NcclAlgorithm::Tree};
  }
  if (all_reduce && N == 1 && net.nvls_bandwidth > 0) {
    const double t = net.nvls_latency_s + share * bytes / net.nvls_bandwidth;
    if (t < best.seconds) best = {t, NcclAlgorithm::Nvls};
  }
  return best;
}

double nccl_all_to_all_seconds(const GroupShape& g, double bytes, const NetworkSpec& net) {
  const int n = g.ranks;
  if (n <= 1 || bytes <= 0) return 0;
  const int ppn = std::clamp(g.ranks_per_node, 1, n);
  const double intra = net.intra_bandwidth > 0 ? bytes * (ppn - 1) / n / net.intra_bandwidth : 0;
  const double nics = static_cast<double>(net.nics_per_node) / std::max(net.gpus_per_node, 1);
  const double inter = g.nodes > 1 && n > ppn ? bytes * (n - ppn) / n / (net.inter_bandwidth * nics) : 0;
  const double hop = g.nodes > 1 ? net.inter_latency_s : net.intra_latency_s;
  return net.collective_latency_s + hop + std::max(intra, inter);
}

namespace {

// C(pool - avoid, k) / C(pool, k): k distinct of `pool` miss all of `avoid` of them.
double none_of(double pool, double avoid, int k) {
  double p = 1;
  for (int i = 0; i < k && p > 0; ++i) p *= std::max(0.0, (pool - avoid - i) / (pool - i));
  return p;
}

// C(n, r) as a double (lgamma: the group counts reach thousands).
double choose(int n, int r) {
  if (r < 0 || r > n) return 0;
  return std::exp(std::lgamma(n + 1.0) - std::lgamma(r + 1.0) - std::lgamma(n - r + 1.0));
}

}  // namespace

double node_miss_probability(int experts, int nodes, int top_k, int groups, int group_topk) {
  const int k = std::max(top_k, 1), N = std::max(nodes, 1);
  const double E = std::max(experts, k);
  const int G = groups, M = group_topk;
  if (G > 0 && M > 0 && M < G) {
    const double per_group = E / G, pool = M * per_group;
    if (G % N == 0) {  // each node holds G/N whole groups
      const int mine = G / N;
      double miss = 0;
      for (int j = 0; j <= std::min(mine, M); ++j)
        miss += choose(mine, j) * choose(G - mine, M - j) / choose(G, M) * none_of(pool, j * per_group, k);
      return miss;
    }
    if (N % G == 0)  // each group over N/G nodes: the node's experts are in one group
      return (1 - static_cast<double>(M) / G) + static_cast<double>(M) / G * none_of(pool, E / N, k);
  }
  return none_of(E, E / N, k);
}

double deepep_all_to_all_seconds(const GroupShape& g, double token_bytes, int top_k, int experts,
                                 const NetworkSpec& net, int groups, int group_topk) {
  const int n = g.ranks, k = std::max(top_k, 1);
  if (n <= 1 || token_bytes <= 0) return 0;
  if (g.nodes <= 1) return nccl_all_to_all_seconds(g, token_bytes * k, net);
  const int ppn = std::clamp(g.ranks_per_node, 1, n), N = g.nodes;
  // Each other node is crossed to when it holds one of the token's experts (the sender's node is like any other).
  const double remote_nodes = (N - 1) * (1 - node_miss_probability(experts, N, k, groups, group_topk));
  const double nics = static_cast<double>(net.nics_per_node) / std::max(net.gpus_per_node, 1);
  const double inter = token_bytes * remote_nodes / (net.inter_bandwidth * nics);
  const double intra = net.intra_bandwidth > 0 ? token_bytes * k * (1 - 1.0 / ppn) / net.intra_bandwidth : 0;
  return net.collective_latency_s + net.inter_latency_s + std::max(intra, inter);
}

}  // namespace trainsim::hw
