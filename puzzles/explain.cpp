#include "puzzles/explain.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/world.h"

namespace trainsim::puzzles {

std::string grouped(double v) {
  std::string digits = format_memory(v);
  std::string frac;
  if (auto dot = digits.find('.'); dot != std::string::npos) {
    frac = digits.substr(dot);
    digits = digits.substr(0, dot);
  }
  std::string out;
  int n = static_cast<int>(digits.size());
  for (int i = 0; i < n; ++i) {
    out += digits[i];
    if ((n - 1 - i) % 3 == 0 && i != n - 1 && digits[i] != '-') out += ',';
  }
  return out + frac;
}

std::string memory_miss_text(const puzzles::PuzzleResult& r) {
  if (!r.completed() || r.memory_ok) return {};
  std::string s = fmt::format("{}: memory target {} missed: the peak is {} on rank {} at t={}, as {} started; "
                              "resident on rank {} then ({} tensors):\n",
                              r.name, grouped(r.target_memory), grouped(r.peak.memory), r.peak.rank,
                              format_time(r.peak.time), r.peak_op.empty() ? "an op" : r.peak_op, r.peak.rank,
                              r.peak_resident.size());
  std::size_t wide = 6;
  for (const auto& t : r.peak_resident) wide = std::max(wide, t.name.size());
  for (const auto& t : r.peak_resident) s += fmt::format("  {:<{}} {:>12}\n", t.name, wide, grouped(t.size));
  s += fmt::format("  {:<{}} {:>12}  (over the target by {})\n", "total", wide, grouped(r.peak.memory),
                   grouped(r.peak.memory - r.target_memory));
  return s;
}

std::string resident_lines(const PuzzleResult& r) {
  std::string s;
  for (const auto& t : r.peak_resident) s += fmt::format("{}{} {}", s.empty() ? "" : "\n", t.name, grouped(t.size));
  return s;
}

}  // namespace trainsim::puzzles
