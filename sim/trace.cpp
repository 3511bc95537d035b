#include "sim/trace.h"

#include <algorithm>

namespace trainsim {

Time Trace::timesteps() const {
  Time t = 0;
  for (const auto& runs : ranks)
    for (const auto& r : runs)
      if (is_timed(r.op.kind)) t = std::max(t, r.start);
  return t;
}

Time Trace::makespan() const {
  Time t = 0;
  for (const auto& runs : ranks)
    for (const auto& r : runs) t = std::max(t, r.end);
  return t;
}

MemoryPeak Trace::peak() const {
  // As the puzzles' drawing: ranks in order, ops in order, first strictly higher sample wins.
  MemoryPeak p;
  for (int rank = 0; rank < static_cast<int>(ranks.size()); ++rank)
    for (const auto& r : ranks[rank])
      if (is_timed(r.op.kind) && r.memory > p.memory) p = MemoryPeak{r.memory, rank, r.start};
  return p;
}

double Trace::bubble_fraction() const {
  Time span = makespan();
  if (span == 0 || ranks.empty()) return 0;
  // Summed per rank in Time (a rank's busy time is at most its clock), then over ranks in double: the
  // total over many ranks can pass the range of Time.
  double busy = 0;
  for (const auto& runs : ranks) {
    Time rank_busy = 0;
    for (const auto& r : runs)
      if (is_compute(r.op.kind)) rank_busy += r.end - r.start;
    busy += static_cast<double>(rank_busy);
  }
  return 1.0 - busy / (static_cast<double>(span) * static_cast<double>(ranks.size()));
}

std::size_t Trace::op_count() const {
  std::size_t n = 0;
  for (const auto& runs : ranks) n += runs.size();
  return n;
}

RunSummary Trace::summary() const {
  return RunSummary{timesteps(), makespan(), peak(), bubble_fraction(), op_count()};
}

}  // namespace trainsim
