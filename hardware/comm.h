// Communication times: the alpha-beta ring formulas of DESIGN §2, and nccl-tests' bus bandwidth.
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
#pragma once

#include "hardware/network.h"

namespace trainsim::hw {

/// Collectives the formulas know.
enum class Collective { AllGather, ReduceScatter, AllReduce, Broadcast, Reduce };

/// Seconds to send S bytes point to point.
double p2p_seconds(double bytes, const Link& link);
/// Seconds of a ring collective of n ranks over S bytes (n = 1: 0).
double collective_seconds(Collective c, int n, double bytes, const Link& link);
/// nccl-tests' bus bandwidth (bytes/s) of a collective of n ranks that moved S bytes in t seconds.
double bus_bandwidth(Collective c, int n, double bytes, double seconds);

}  // namespace trainsim::hw
