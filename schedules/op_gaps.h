// The dispatch gap of each measured op: the time from the moment the op could start to the moment it did,
// which no op's own time holds (thread wake-ups and event waits on the CPU backend, launch latency on a GPU).
// `trainsim calibrate` fits the device's efficiency.dispatch_s to them (schedules/calibration.h).
//
// For an op on a rank, in program order: it could start at its ready time, the latest of the end of the
// previous op on its thread (stream) and the ends of the earlier ops of the rank that wrote a tensor it
// reads; its gap is its start minus that. A recv waits inside itself for its message: it could end at the
// later of its start and the end of its matched send (the k-th send from the peer to this rank for the k-th
// recv from that peer, in the same step), and its gap is its end minus that (its own work, a copy, is in the
// gap: the hardware cost model gives a recv no time but the gap). Gaps are clamped at 0 (the trace's
// microsecond rounding).
#pragma once

#include <vector>

#include "schedules/measured_trace.h"

namespace trainsim {

/// gaps[rank][i]: the gap of step.ranks[rank][i] in seconds; NaN where no ready time is known (a rank's first
/// op with nothing earlier it waits for, a recv without a matched send in the step).
std::vector<std::vector<double>> dispatch_gaps(const MeasuredStep& step);

}  // namespace trainsim
