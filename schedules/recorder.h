// Recording the Schedule of a coroutine program (DESIGN §1): the simulator reports every timed op, the
// program's stores report every change of what a rank holds, and the recorder turns both into one op list
// per rank, with the load, accumulate and free ops that make memory match sample for sample. Simulating
// the recorded schedule reproduces the program's run: same op times, same memory samples.
#pragma once

#include <map>
#include <vector>

#include "schedules/schedule.h"

namespace trainsim {

/// Builds a Schedule from a running program. Feed it every timed op (World::set_op_observer) and every
/// store change; call finish() after the run.
class ScheduleRecorder {
 public:
  explicit ScheduleRecorder(ScheduleHeader header);

  /// A timed op just started on op.rank (its outputs are now pending until stored or dropped).
  void on_op(const Op& op);
  /// Rank `rank` changed a store entry from `before` to `after` (either may be null).
  /// Throws SimError when a stored tensor cannot be expressed as an op (a local copy of a non-grad tensor,
  /// a locally combined or sharded tensor).
  void on_store(int rank, const Tensor* before, const Tensor* after);
  /// The schedule, with outputs never stored freed at the end of each rank.
  Schedule finish();

 private:
  struct RankLog {
    std::map<Tensor, int> resident;  // what the schedule holds (stores + pending outputs)
    std::map<Tensor, int> pending;   // outputs of the last timed op not yet stored
  };
  void flush_pending(int rank);
  void emit(int rank, Op op);
  void add(int rank, const Tensor& t);
  void remove(int rank, const Tensor& t);

  Schedule schedule_;
  std::vector<RankLog> logs_;
};

}  // namespace trainsim
