#include "apps/schedule_input.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

#include <fmt/format.h>

#include "puzzles/runner.h"
#include "schedules/input.h"
#include "schedules/limits.h"
#include "interop/pytorch_csv.h"
#include "interop/pytorch_csv_cells.h"
#include "schedules/text_format.h"

namespace trainsim::apps {

std::string extension(const std::string& path) {
  std::string e = std::filesystem::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e;
}

std::vector<int> parse_stage_map(const std::string& spec, int world, int stages) {
  std::string lower = spec;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  std::vector<int> map;
  if (lower == "loop") {
    for (int s = 0; s < stages; ++s) map.push_back(s % world);
    return map;
  }
  if (lower == "v") {  // down the ranks and back up, as often as the stages need (interop/pytorch_csv.h)
    for (int s = 0; s < stages; ++s) map.push_back(v_style_rank(s, world));
    return map;
  }
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty() || part.size() > 9 || !std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isdigit(c); }))
      throw std::invalid_argument(fmt::format("--stage-map takes ranks like 0,1,2,3 or 'loop' or 'v', got '{}'", spec));
    int r = std::stoi(part);
    if (r >= world)
      throw std::invalid_argument(fmt::format("--stage-map puts a stage on rank {}, but there are {} ranks", r, world));
    map.push_back(r);
  }
  if (static_cast<int>(map.size()) != stages)
    throw std::invalid_argument(fmt::format("--stage-map gives {} stages, but there are {}", map.size(), stages));
  return map;
}

CLI::Validator stage_map_check() {
  return CLI::Validator(
      [](std::string& spec) -> std::string {
        std::string lower = spec;
        std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
        if (lower == "loop" || lower == "v") return {};
        std::stringstream ss(spec);
        std::string part;
        bool any = false;
        while (std::getline(ss, part, ',')) {
          any = true;
          if (part.empty() || part.size() > 9 ||
              !std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isdigit(c); }))
            return fmt::format("takes ranks like 0,1,2,3 or 'loop' or 'v', got '{}'", spec);
        }
        if (!any || spec.back() == ',') return fmt::format("takes ranks like 0,1,2,3 or 'loop' or 'v', got '{}'", spec);
        return {};
      },
      "0,1,..|loop|v");
}

void csv_shape(const std::string& csv, int& world, int& stages) {
  // Row by row over the text, keeping nothing per row: the import that follows checks the limits and the cells.
  const std::size_t end = csv::content_size(csv);
  world = 0;
  stages = 0;
  std::size_t start = 0;
  while (start < end) {
    std::size_t nl = std::min(csv.find('\n', start), end);
    if (world < kMaxWorldSize) ++world;
    std::string_view row(csv.data() + start, nl - start);
    std::size_t cell = 0;
    while (cell <= row.size()) {
      std::size_t comma = std::min(row.find(',', cell), row.size());
      std::string_view c = row.substr(cell, comma - cell);
      std::size_t i = c.find_first_not_of(" \t\"");
      std::size_t j = i;
      while (i != std::string_view::npos && j < c.size() && std::isdigit(static_cast<unsigned char>(c[j]))) ++j;
      int stage = 0;
      if (i != std::string_view::npos && j > i && j - i <= 9 &&
          std::from_chars(c.data() + i, c.data() + j, stage).ec == std::errc() && stage < kMaxCount)
        stages = std::max(stages, stage + 1);
      cell = comma + 1;
    }
    start = nl + 1;
  }
}

void check_readable(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    throw UnreadableInput(fmt::format("cannot read '{}': {}", path, ec ? ec.message() : std::strerror(ENOENT)));
  if (std::filesystem::is_directory(st)) throw UnreadableInput(fmt::format("cannot read '{}': it is a directory", path));
  if (access(path.c_str(), R_OK) != 0) throw UnreadableInput(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
}

Schedule load_schedule_input(const std::string& what, const ScheduleInputOptions& o) {
  std::error_code ec;
  const bool looks_like_a_file = what.find('/') != std::string::npos || !extension(what).empty();
  // A file of any kind but a directory: a pipe or process substitution is read as a .sched file.
  if (looks_like_a_file || std::filesystem::exists(what, ec)) {
    check_readable(what);
    if (extension(what) != ".csv") return read_schedule_file(what);
    std::string csv = read_input_file(what);
    std::vector<int> map;
    if (!o.stage_map.empty()) {
      int world = 0, stages = 0;
      csv_shape(csv, world, stages);
      if (world == 0 || stages == 0) throw std::invalid_argument(fmt::format("{}: the CSV has no actions", what));
      try {
        map = parse_stage_map(o.stage_map, world, stages);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("{}: {}", what, e.what()));
      }
    }
    return import_pytorch_csv(csv, o.microbatches, map, what);
  }
  if (const puzzles::Puzzle* p = puzzles::find_puzzle(what)) {
    puzzles::PuzzleResult r = puzzles::run_puzzle(*p, false, true);
    if (!r.correct || !r.schedule) throw std::invalid_argument(fmt::format("puzzle {} failed: {}", what, r.error));
    return *r.schedule;
  }
  std::string names;
  for (const auto& p : puzzles::catalog()) names += (names.empty() ? "" : ", ") + p.name;
  throw UnreadableInput(fmt::format("'{}' is neither a schedule file (.sched, .csv) nor a puzzle ({})", what, names));
}

}  // namespace trainsim::apps
