// A schedule read one rank at a time (DESIGN §3): its header, and each rank's op list on demand. A Schedule
// holds every rank's list at once; a generator can instead make a rank's list when it is asked for, so that the
// stream engine (schedules/stream_sim.h) simulates a 16,384-rank schedule with one rank's ops in memory at a
// time (issue 19's scale goal: bench/README.md, "3D parallelism").
#pragma once

#include <cstddef>
#include <vector>

#include "schedules/schedule.h"

namespace trainsim {

/// The header and the per-rank op lists of one schedule.
class RankSource {
 public:
  explicit RankSource(ScheduleHeader header) : header_(std::move(header)) {}
  virtual ~RankSource() = default;
  RankSource(const RankSource&) = delete;
  RankSource& operator=(const RankSource&) = delete;

  const ScheduleHeader& header() const { return header_; }
  /// The header, to change before simulating (e.g. its cost model: apps/hardware_options.h).
  ScheduleHeader& header() { return header_; }
  int world_size() const { return header_.world_size; }

  /// Rank `rank`'s ops in program order (0 <= rank < world_size()), the same ops at every call. The reference is
  /// valid until the next call of ops() on this source, or for the source's life when holds_all().
  virtual const std::vector<Op>& ops(int rank) const = 0;
  /// True when every rank's list is held at once (a Schedule): references from ops() never go stale, and
  /// asking again costs nothing. False for a source that makes each rank's list when asked.
  virtual bool holds_all() const = 0;
  /// An upper estimate of the ops of all ranks together (capacity to reserve), or 0 when unknown.
  virtual std::size_t op_estimate() const { return 0; }
  /// Every rank's list in one Schedule; the source may be left empty (a held schedule is moved out).
  virtual Schedule take() { return collect(*this); }
  /// Every rank's list of `source` in one Schedule, copied.
  static Schedule collect(const RankSource& source);

 protected:
  ScheduleHeader header_;
};

/// A Schedule's lists, not owned (the schedule must outlive the view). Its header is copied. A rank the schedule
/// has no list for (fewer lists than world_size: a malformed schedule, which the simulator refuses) reads as a
/// rank without ops.
class ScheduleView final : public RankSource {
 public:
  explicit ScheduleView(const Schedule& s) : RankSource(s.header), s_(s) {}
  const std::vector<Op>& ops(int rank) const override {
    static const std::vector<Op> none;
    return rank >= 0 && rank < static_cast<int>(s_.ranks.size()) ? s_.ranks[rank] : none;
  }
  bool holds_all() const override { return true; }
  std::size_t op_estimate() const override { return s_.op_count(); }

 private:
  const Schedule& s_;
};

/// A Schedule's lists, owned: a generator that builds the whole schedule at once.
class HeldSchedule final : public RankSource {
 public:
  explicit HeldSchedule(Schedule s) : RankSource(s.header), ranks_(std::move(s.ranks)) {}
  const std::vector<Op>& ops(int rank) const override { return ranks_.at(rank); }
  bool holds_all() const override { return true; }
  std::size_t op_estimate() const override;
  Schedule take() override;

 private:
  std::vector<std::vector<Op>> ranks_;
};

}  // namespace trainsim
