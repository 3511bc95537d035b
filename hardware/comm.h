// Communication times: the alpha-beta ring formulas of DESIGN §2, NCCL's choice of algorithm on a network
// (hardware/network.h), and nccl-tests' bus bandwidth.
//
// n ranks, S bytes of the full tensor (the all-gather's output, the reduce-scatter's and all-reduce's input),
// alpha the latency per step (seconds), B the bandwidth per rank and direction (bytes/s):
// - p2p: T = alpha + S/B
// - ring all-gather, reduce-scatter: T = (n-1)·alpha + ((n-1)/n)·S/B
// - ring all-reduce (a reduce-scatter then an all-gather): T = 2(n-1)·alpha + 2((n-1)/n)·S/B
// - broadcast, reduce (NCCL's pipelined ring, a chain from or to the root: the message goes in chunks, each
//   hop forwarding one chunk while it receives the next): T = (n-1)·alpha + S/B for large messages, each
//   link carrying S once (Thakur, Rabenseifner and Gropp 2005, "Optimization of collective communication
//   operations in MPICH", the pipelined/chain bound; NCCL's ncclBroadcast and ncclReduce run such a ring)
// nccl-tests (doc/PERFORMANCE.md) report algbw = S/t and busbw = algbw·2(n-1)/n for all-reduce,
// algbw·(n-1)/n for all-gather and reduce-scatter, algbw for broadcast and reduce, so that busbw of a ring
// with no latency equals B.
//
// On a network (nccl_collective), as NCCL's tuning model predicts the Simple protocol (src/graph/tuning.cc,
// ncclTopoTuneModel and ncclTopoGetAlgoTime; the constants in hardware/network.cpp), for a group of n ranks on
// N nodes with at most ppn on one node:
// - ring bus bandwidth: inside one node the NVLink bus bandwidth; across nodes the NICs of the group's GPUs on
//   a node, ppn·nics_per_node/gpus_per_node of them (NCCL spreads its rings over every NIC: a rail-optimised
//   fabric gives each GPU its own), capped by NVLink when ppn > 1: B = min(intra, ppn·nics/gpus·nic);
// - ring: collective_latency + (steps - inter_steps)·intra_latency + inter_steps·inter_latency + share·S/B,
//   steps = n-1 (all-gather, reduce-scatter) or 2(n-1) (all-reduce), inter_steps = N-1 or 2(N-1), share as
//   above; broadcast and reduce: collective_latency + (n-1)·hop + S/B (hop: intra inside a node, else inter);
// - tree (all-reduce across nodes): 2·((ppn-1)·tree_intra_latency + floor(log2 N)·tree_inter_latency) +
//   S / (0.5 · 0.92·B) (NCCL: tree bus bandwidth 0.92 of the ring's, algorithm bandwidth half of it);
// - NVLS (all-reduce inside one node, where the network has NVLink SHARP): nvls_latency + 2((n-1)/n)·S/nvls;
// and NCCL runs the fastest. The LL and LL128 protocols (faster for messages of a few hundred kB and less)
// are not modelled: a training step's collectives are megabytes.
#pragma once

#include "hardware/network.h"

namespace trainsim::hw {

/// Collectives the formulas know.
enum class Collective { AllGather, ReduceScatter, AllReduce, Broadcast, Reduce };

/// NCCL's algorithms (Simple protocol).
enum class NcclAlgorithm { Ring, Tree, Nvls };
/// "ring", "tree", "nvls".
const char* algorithm_name(NcclAlgorithm a);

/// Seconds to send S bytes point to point.
double p2p_seconds(double bytes, const Link& link);
/// Seconds of a ring collective of n ranks over S bytes (n = 1: 0).
double collective_seconds(Collective c, int n, double bytes, const Link& link);
/// nccl-tests' bus bandwidth (bytes/s) of a collective of n ranks that moved S bytes in t seconds.
double bus_bandwidth(Collective c, int n, double bytes, double seconds);

/// A collective's time on a network and the algorithm NCCL picks.
struct CollectiveTime {
  double seconds = 0;
  NcclAlgorithm algorithm = NcclAlgorithm::Ring;
};
/// The ring bus bandwidth (bytes/s) of a group of `shape` on `net` (see the header comment).
double ring_bus_bandwidth(const GroupShape& shape, const NetworkSpec& net);
/// Collective `c` over S bytes by a group of `shape` on `net`: the fastest of ring, tree and NVLS where each
/// applies (see the header comment). 0 seconds for a group of one rank.
CollectiveTime nccl_collective(Collective c, const GroupShape& shape, double bytes, const NetworkSpec& net);
/// Seconds of an all-to-all in which each of the group's n ranks sends and receives S bytes in all, S/n to and
/// from each member (itself included), as NCCL runs it: grouped point-to-point sends and receives to every peer
/// at once (PyTorch's all_to_all_single; NCCL has no all-to-all algorithm of its own). The transfers share the
/// rank's links: the (ppn-1)/n of S for the peers on its node over NVLink (intra_bandwidth), the (n-ppn)/n for
/// the other nodes over its NICs (nics_per_node/gpus_per_node of them, rail-optimised), both at once; so
/// collective_latency + a hop's latency (inter_latency across nodes) + max(intra, inter). 0 for one rank or no bytes.
double nccl_all_to_all_seconds(const GroupShape& shape, double bytes, const NetworkSpec& net);

/// Seconds of an MoE dispatch (or combine) through DeepEP's normal kernels (deepseek-ai/DeepEP, "internode"
/// kernels; DeepSeek-AI 2024, DeepSeek-V3 report §3.2.2): each of the rank's tokens (`token_bytes` in all, one copy
/// of each) is routed to `top_k` of the group's `experts`, held evenly by its nodes. A token crosses the network
/// once per other node holding one of its experts, to the GPU of the same local index there (its NIC share of the
/// node's NICs, as nccl_all_to_all_seconds), which forwards it over NVLink to the GPUs holding its experts; copies
/// for the rank's own node go over NVLink. Under uniform routing a node holds none of a token's experts with
/// probability C(E - E/N, k) / C(E, k), so the NIC bytes are token_bytes × (N - 1) × (1 - that) rather than NCCL's
/// k copies × (n - ppn) / n; NVLink carries token_bytes × k × (1 - 1/ppn). Time: collective_latency + a hop +
/// max(NVLink, NIC). DeepEP reaches the NICs' rate (its README: 43-58 GB/s per H800 over 400 Gb/s CX7), so the
/// network's own bandwidths are used. With group-limited routing (`groups` G, `group_topk` M: a token's experts in
/// its M best of G equal groups, DeepSeek-V3's "at most 4 nodes") the miss probability is node_miss_probability's.
/// DeepEP's FP8 dispatch is not modelled (it would make it faster). In one node (or one rank): NCCL's formula
/// over NVLink (nccl_all_to_all_seconds of token_bytes × top_k), as DeepEP's intranode kernels run at NVLink rate.
double deepep_all_to_all_seconds(const GroupShape& shape, double token_bytes, int top_k, int experts,
                                 const NetworkSpec& net, int groups = 0, int group_topk = 0);

/// The probability that one of `nodes` nodes, each holding experts / nodes of the experts, holds none of a token's
/// `top_k` experts, the token's groups and experts chosen uniformly: unrestricted top-k (groups 0, or group_topk =
/// groups): C(E - E/N, k) / C(E, k); group-limited, each node holding whole groups (G a multiple of N): over the
/// number j of the node's G/N groups among the token's M, hypergeometric, C(M·E/G - j·E/G, k) / C(M·E/G, k); each
/// group over several nodes (N a multiple of G): 1 - M/G + M/G · C(M·E/G - E/N, k) / C(M·E/G, k). Otherwise the
/// unrestricted figure (an approximation).
double node_miss_probability(int experts, int nodes, int top_k, int groups = 0, int group_topk = 0);

}  // namespace trainsim::hw
