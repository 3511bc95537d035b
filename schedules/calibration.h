// Calibration of a device (and network) description from measured traces: the executor's `trainsim replay
// FILE --trace T` writes the last step of a replay as Chrome/Perfetto JSON (host clock; the format of
// visualize/perfetto.h), and `trainsim calibrate T... -o DEVICE.json` fits the efficiency table of
// hardware/device.h to it.
//
// The fit, in order (every op's FLOPs and bytes from hardware/op_costs.h for the model the replays trained):
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
// Efficiencies are fractions of the base device's peak_flops, clamped to (0, 1]: calibrate a device whose
// peak is at least what it reaches.
#pragma once

#include <string>
#include <vector>

#include "hardware/setting.h"

namespace trainsim {

/// What calibration found.
struct Calibration {
  hw::DeviceSpec device;    ///< the base device with the fitted table (and memory bandwidth scale)
  hw::NetworkSpec network;  ///< the base network with fitted latency and bandwidth (when measured)
  int compute_ops = 0;      ///< measured compute ops used
  int comm_ops = 0;         ///< measured sends and collective calls used
  bool network_fitted = false;
  std::vector<std::string> traces;
};

/// Fits `base`'s device and network to the traces (files). The model, microbatch size and sequence length
/// of `base` must be the ones the replays trained (their layer count is read from each trace). Throws
/// std::invalid_argument naming the file and the problem (unreadable, not a trace, no compute op).
Calibration calibrate(const std::vector<std::string>& trace_files, const hw::HardwareSetting& base);

}  // namespace trainsim
