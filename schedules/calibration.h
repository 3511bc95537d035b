// Calibration of a device (and network) description from measured traces: the executor's `trainsim replay
// FILE --trace T [--trace-steps K]` writes the last K steps of a replay as Chrome/Perfetto JSON (host clock;
// the format of visualize/perfetto.h, read back by schedules/measured_trace.h), and `trainsim calibrate
// T... -o DEVICE.json` fits the efficiency table of hardware/device.h to them.
//
// Medians first: an op is the same op in every traced step of a trace (its rank and position in the rank's
// step), and in every step of the other traces of the same schedule (traces whose op lists are the same:
// replays repeated, e.g. interleaved with other schedules' to spread a shared machine's load over all of
// them); its time is the median of its durations over those steps, and a collective call's the median over
// the steps of its shortest member. One slow step (another process took the core) therefore moves nothing
// while most steps agree. A trace of one step (as replays wrote before --trace-steps) gives each op its one
// time.
//
// The fit, in order, on those per-op times (every op's FLOPs and bytes from hardware/op_costs.h for the model
// the replays trained):
// 1. memory-bound ops (update, loss): time = bytes / (hbm_bandwidth x memory) + op_overhead_s, least squares
//    over the ops (the intercept only when at least two sizes were measured; both kept >= 0);
// 2. forward ops: efficiency.forward = their FLOPs / (peak x (their time - bytes and overhead terms)), summed
//    over the ops; efficiency.attention = efficiency.forward (one model shape cannot tell the attention core
//    from the projections: both grow with the tokens);
// 3. backward-weight and backward-input ops likewise; a full backward (no split measured) gives both halves
//    the same efficiency.
// 4. communication: sends and collectives (a collective's time is the shortest over its members: the others
//    include waiting for the last to arrive) against the alpha-beta formulas of hardware/comm.h, least
//    squares for latency and bandwidth, written to the network description.
// 5. dispatch: each op's gap, the time from the moment it could start to its start, which no op's own time
//    holds (thread wake-ups and event waits; schedules/op_gaps.h defines it, a recv's gap being the time
//    from its message's send to its end), median over the steps per op; efficiency.dispatch_s is the least
//    squares constant over the ops' medians, their mean (a step pays the sum of the gaps on its critical
//    path, so the mean and not the median: a few long wake-ups per step are part of the cost). The cost model
//    adds it to every timed op (hardware/cost_model.h).
// Efficiencies are fractions of the base device's peak_flops, clamped to (0, 1]: calibrate a device whose
// peak is at least what it reaches. The same traces give the same numbers (no randomness, fixed order).
#pragma once

#include <string>
#include <vector>

#include "hardware/comm.h"
#include "hardware/setting.h"

namespace trainsim {

/// What calibration found.
struct Calibration {
  hw::DeviceSpec device;    ///< the base device with the fitted table (and memory bandwidth scale)
  hw::NetworkSpec network;  ///< the base network with fitted latency and bandwidth (when measured)
  int compute_ops = 0;      ///< measured compute ops used
  int comm_ops = 0;         ///< measured sends and collective calls used
  int gap_ops = 0;          ///< ops whose dispatch gap was measured (efficiency.dispatch_s)
  int steps = 0;            ///< traced steps over all the traces
  bool network_fitted = false;
  int kernels = 0;          ///< Kineto traces: GPU kernels read
  int left_out = 0;         ///< Kineto traces: kernels not used
  double kernel_floor_s = 0;  ///< Kineto traces: the memory-bound kernels' fitted floor (fit_device)
  std::vector<std::string> traces;
};

/// Fits `base`'s device and network to the traces (files, one step or several each). The model, microbatch
/// size and sequence length of `base` must be the ones the replays trained (their layer count is read from
/// each trace). Throws std::invalid_argument naming the file and the problem (unreadable, not a trace, a
/// malformed event, no compute op).
Calibration calibrate(const std::vector<std::string>& trace_files, const hw::HardwareSetting& base);

// ---- calibration from measured (op, shape, seconds) records: a user's own GPU run ----------------------------

/// One measured piece of work of a user's run (a GPU kernel and the op that launched it: schedules/
/// kineto_trace.h): the class of the efficiency table its time is charged to, the op and its shape, its FLOPs
/// (as hardware/op_costs.h counts them) and bytes, and its seconds.
struct MeasuredWork {
  enum class Class { ForwardGemm, BackwardGemm, Attention, MemoryBound };
  Class cls = Class::MemoryBound;
  std::string op;                ///< "aten::mm", "aten::_scaled_dot_product_flash_attention_backward", ...
  std::vector<long long> shape;  ///< GEMM: B, M, N, K; attention: B, H, S_q, S_k, D; memory-bound: elements read
  double flops = 0;              ///< GEMM and attention
  double bytes = 0;              ///< memory-bound traffic
  double seconds = 0;
};

/// One measured collective call or point-to-point send.
struct MeasuredComm {
  hw::Collective collective = hw::Collective::AllReduce;
  bool p2p = false;          ///< a send (alpha + S/B), not a collective
  int ranks = 2;             ///< the group's size
  double bytes = 0;          ///< S, as hardware/comm.h takes it (the all-gather's output, the others' input)
  bool inter_node = false;   ///< the group spans nodes
  double seconds = 0;
};

/// The efficiency table of `base` fitted to `work`: `memory` from the memory-bound records by least squares
/// (time = bytes / (hbm_bandwidth x memory) + a floor per kernel, the floor reported in `floor_s` and not
/// written: op_overhead_s is per schedule op, not per kernel); `forward` from the forward GEMMs, `backward_input`
/// and `backward_weight` both from the backward GEMMs (a kernel's trace does not say which half it is), and
/// `attention` from the attention records, each as the sum of their FLOPs over peak_flops x the sum of their
/// seconds, clamped to (0, 1]. A class without records keeps the base's value. This is the one place that turns records into a
/// table: a table by shape (GEMM efficiency per M, N, K) is fitted from the same records.
hw::DeviceSpec fit_device(const std::vector<MeasuredWork>& work, const hw::DeviceSpec& base, double* floor_s = nullptr);

/// The network of `base` fitted to `comm`: latency and bandwidth by least squares against the alpha-beta formulas
/// of hardware/comm.h, separately for intra-node and inter-node records (a link without records keeps the
/// base's). `fitted` (when given) says whether any link was.
hw::NetworkSpec fit_network(const std::vector<MeasuredComm>& comm, const hw::NetworkSpec& base, bool* fitted = nullptr);

}  // namespace trainsim
