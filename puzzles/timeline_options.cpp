#include "puzzles/timeline_options.h"

#include <fmt/format.h>

namespace trainsim::puzzles {

visualize::TimelineOptions timeline_options(const Puzzle& p, const PuzzleResult& r, bool exercise) {
  visualize::TimelineOptions opt;
  opt.title = fmt::format("{} - {}{}", p.name, p.title, exercise ? " (your solution)" : "");
  // Targets are judged, and drawn, only for runs that completed.
  if (r.completed()) {
    opt.target_time = p.target_time;
    opt.target_time_floor = true;
    opt.target_memory = p.target_memory;
  }
  opt.error = r.error;
  for (const auto& b : r.blocked) opt.blocked.push_back({b.rank, b.since, b.what});
  if (!r.peak_resident.empty() || !r.peak_op.empty()) {
    visualize::PeakExplanation why;
    why.op = r.peak_op;
    for (const auto& t : r.peak_resident) why.resident.emplace_back(t.name, t.size);
    opt.peak_explanation = std::move(why);
  }
  return opt;
}

}  // namespace trainsim::puzzles
