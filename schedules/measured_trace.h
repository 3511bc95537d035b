// A measured replay trace read back (the Chrome/Perfetto JSON of `trainsim replay FILE --trace T
// [--trace-steps K]`, visualize/perfetto.h): per traced step, per rank, the timed ops in program order with
// their start and end and what calibration needs of them (kind, layer, batches, tensors, peer, group).
//
// Steps: an op event's args.step names its training step and otherData.steps each step's makespan. A trace
// without them (one step, as replays wrote before --trace-steps, or a simulated trace) is one step (step 0)
// whose makespan is otherData.makespan_us. Ranks are pid - 1. Events other than complete ("X") events whose
// name starts with an op kind (load and free are instants, "i") are skipped.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/op.h"

namespace trainsim {

/// One timed op as measured.
struct MeasuredOp {
  OpKind kind = OpKind::Forward;
  int layer = -1;            ///< the " L<n>" of the event name; -1 without one
  long long tid = 0;         ///< the event's thread (rank and stream)
  std::string batches;       ///< args.batches (id set text, "" when none)
  std::vector<std::string> reads, writes;  ///< args.reads, args.writes (tensor names)
  int peer = -1;             ///< args.peer (send, recv)
  int group = -1;            ///< args.group (collectives)
  double start_s = 0;        ///< on the trace's timeline, seconds
  double end_s = 0;
  double seconds() const { return end_s - start_s; }
};

/// One traced step.
struct MeasuredStep {
  int step = 0;           ///< 0-based training step
  double makespan_s = 0;  ///< its makespan: first start to last end over the ranks
  std::vector<std::vector<MeasuredOp>> ranks;  ///< per rank, in program order
};

/// A whole trace file.
struct MeasuredTrace {
  std::string path;
  int layers = 0;                   ///< otherData.layers: the schedule's layers
  /// otherData.model, where the replay recorded it: the executor's model (exec::to_json: preset, vocab, dim,
  /// heads, blocks, ffn, seq, ...); null in traces written before it was recorded.
  nlohmann::json model;
  std::vector<MeasuredStep> steps;  ///< in step order
};

/// Reads `path`. Throws std::invalid_argument naming the file and the problem: unreadable, not JSON, not a
/// trainsim trace (no traceEvents and otherData), no integer otherData.layers, a malformed field.
MeasuredTrace read_measured_trace(const std::string& path);

/// The JSON of a trace file (a replay's, or a PyTorch profiler's: interop/kineto_trace.h). Throws
/// std::invalid_argument naming the file: unreadable, larger than kMaxInputBytes, not JSON.
nlohmann::json read_trace_json(const std::string& path);

/// The middle value of `v` (the mean of the two middle ones for an even count); NaN when empty.
double median(std::vector<double> v);

}  // namespace trainsim
