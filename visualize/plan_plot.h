// The planner's picture (`trainsim plan --svg FILE`, issue 34): every simulated candidate as a point, throughput
// (tokens/s per GPU) against the heaviest rank's peak memory, the Pareto front (no other candidate is both faster
// and lighter) drawn as a line, the device's capacity and its usable memory (capacity less the reserve) as
// vertical lines, and the top rows labelled with their rank in the table.
#pragma once

#include <string>
#include <vector>

namespace trainsim::visualize {

/// One candidate.
struct PlanPoint {
  double peak_memory_bytes = 0;
  double tokens_per_s_per_gpu = 0;
  bool fits = true;  ///< within the usable memory (else drawn hollow, grey)
  int label = 0;     ///< its place in the table (1 = best) when labelled; 0: not labelled
};

/// The plot's text.
struct PlanPlotText {
  std::string title;     ///< first line (the model, GPUs, device, batch)
  std::string subtitle;  ///< second line (how many candidates)
  std::string note;      ///< third line (what was rejected), or ""

};

/// The SVG text of the scatter plot. `capacity_bytes` and `usable_bytes`: the device's memory and what a step may
/// use (0: not drawn). Deterministic: the same points give the same bytes.
std::string plan_plot_svg(const std::vector<PlanPoint>& points, double capacity_bytes, double usable_bytes,
                          const PlanPlotText& text);

/// The indices of the Pareto-optimal points among those that fit: sorted by memory, each faster than every
/// lighter one.
std::vector<std::size_t> pareto_front(const std::vector<PlanPoint>& points);

}  // namespace trainsim::visualize
