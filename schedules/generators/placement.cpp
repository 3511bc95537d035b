// Where a pipeline schedule's stage chunks sit (schedules/generators.h): looped or V. The one place that knows
// which schedules are V-shaped; the generators, the framework readers and writers and the planner ask here.
#include "schedules/generators.h"

#include <algorithm>

namespace trainsim {

bool v_shaped_schedule(const std::string& schedule) { return schedule == "zbv" || schedule == "dualpipev"; }

bool interleaved_schedule(const std::string& schedule) {
  return schedule == "interleaved-1f1b" || schedule == "interleaved-zb" || schedule == "looped-bfs";
}

bool interleaved_rounds_fit(const std::string& schedule, int p, int m) {
  const bool rounds = schedule == "interleaved-zb" || (schedule == "interleaved-1f1b" && p > 0 && m % p != 0);
  return !rounds || p < 1 || m < 1 || m % std::max(1, m / p) == 0;
}

int chunks_per_rank(const std::string& schedule, int chunks) { return v_shaped_schedule(schedule) ? 2 : chunks; }

int rank_of_chunk(const std::string& schedule, int p, int chunk) {
  if (v_shaped_schedule(schedule)) return chunk < p ? chunk : 2 * p - 1 - chunk;
  return chunk % p;
}

}  // namespace trainsim
