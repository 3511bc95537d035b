#include "apps/puzzle_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "puzzles/explain.h"
#include "sim/world.h"

namespace trainsim::apps {

using puzzles::grouped;
using puzzles::memory_miss_text;

nlohmann::ordered_json puzzle_json(const puzzles::PuzzleResult& r) {
  nlohmann::ordered_json j;
  j["name"] = r.name;
  j["correct"] = r.correct;
  j["error"] = r.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.error);
  j["timesteps"] = to_seconds(r.timesteps);
  j["makespan"] = to_seconds(r.makespan);
  j["max_memory"] = r.peak.memory;
  j["max_memory_rank"] = r.peak.rank;
  j["max_memory_time"] = to_seconds(r.peak.time);
  j["target_time"] = r.target_time;
  j["target_memory"] = r.target_memory;
  j["time_ok"] = r.completed() ? nlohmann::ordered_json(r.time_ok) : nlohmann::ordered_json(nullptr);
  j["memory_ok"] = r.completed() ? nlohmann::ordered_json(r.memory_ok) : nlohmann::ordered_json(nullptr);
  j["max_memory_op"] = r.peak_op;
  nlohmann::ordered_json resident = nlohmann::ordered_json::array();
  for (const auto& t : r.peak_resident) resident.push_back({{"tensor", t.name}, {"size", t.size}});
  j["max_memory_resident"] = resident;
  return j;
}

void print_table(const std::vector<puzzles::PuzzleResult>& results) {
  // The name column is 14 wide, as it always was, or as wide as the longest name run ("tensor_parallel").
  std::size_t wide = 14;
  for (const auto& r : results) wide = std::max(wide, r.name.size());
  fmt::print("{:<{}} {:<7} {:>9} {:>9} {:>11} {:>15} {:>10} {:>13}\n", "puzzle", wide, "correct", "timesteps",
             "makespan", "peak memory", "at rank @ time", "time goal", "memory goal");
  for (const auto& r : results) {
    std::string at = fmt::format("{} @ {}", r.peak.rank, format_time(r.peak.time));
    // A run that stopped early has no figures to judge: its targets show "-", not a misleading "ok".
    auto verdict = [&](bool ok) { return r.completed() ? (ok ? "ok" : "MISS") : "-"; };
    fmt::print("{:<{}} {:<7} {:>9} {:>9} {:>11} {:>15} {:>10} {:>13}\n", r.name, wide, r.correct ? "yes" : "NO",
               format_time(r.timesteps), format_time(r.makespan), grouped(r.peak.memory), at,
               fmt::format("{} {}", format_memory(r.target_time), verdict(r.time_ok)),
               fmt::format("{} {}", grouped(r.target_memory), verdict(r.memory_ok)));
  }
  for (const auto& r : results)
    if (!r.error.empty()) fmt::print("\n{}: {}\n", r.name, r.error);
  for (const auto& r : results)
    if (std::string why = memory_miss_text(r); !why.empty()) fmt::print("\n{}", why);
}

}  // namespace trainsim::apps
