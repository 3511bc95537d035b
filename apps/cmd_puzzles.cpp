// `trainsim puzzles`: check the eight LLM Training Puzzles and draw their timelines.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/json_text.h"
#include "apps/text_file.h"
#include "puzzles/runner.h"
#include "schedules/text_format.h"
#include "visualize/timeline_svg.h"

namespace trainsim::apps {

namespace {

struct PuzzlesArgs {
  std::string only;
  bool exercises = false;
  std::string out = "out";
  bool json = false;
  std::string save_schedules;
};

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
    if ((n - 1 - i) % 3 == 0 && i != n - 1) out += ',';
  }
  return out + frac;
}

nlohmann::ordered_json to_json(const puzzles::PuzzleResult& r) {
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
  j["time_ok"] = r.time_ok;
  j["memory_ok"] = r.memory_ok;
  return j;
}

void print_table(const std::vector<puzzles::PuzzleResult>& results) {
  fmt::print("{:<14} {:<7} {:>9} {:>9} {:>11} {:>15} {:>10} {:>13}\n", "puzzle", "correct", "timesteps", "makespan",
             "peak memory", "at rank @ time", "time goal", "memory goal");
  for (const auto& r : results) {
    std::string at = fmt::format("{} @ {}", r.peak.rank, format_time(r.peak.time));
    fmt::print("{:<14} {:<7} {:>9} {:>9} {:>11} {:>15} {:>10} {:>13}\n", r.name, r.correct ? "yes" : "NO",
               format_time(r.timesteps), format_time(r.makespan), grouped(r.peak.memory), at,
               fmt::format("{} {}", format_memory(r.target_time), r.time_ok ? "ok" : "MISS"),
               fmt::format("{} {}", grouped(r.target_memory), r.memory_ok ? "ok" : "MISS"));
  }
  for (const auto& r : results)
    if (!r.error.empty()) fmt::print("\n{}: {}\n", r.name, r.error);
}

int run(const PuzzlesArgs& args) {
  std::vector<const puzzles::Puzzle*> chosen;
  if (!args.only.empty()) {
    const puzzles::Puzzle* p = puzzles::find_puzzle(args.only);
    if (!p) {
      std::string names;
      for (const auto& q : puzzles::catalog()) names += (names.empty() ? "" : ", ") + q.name;
      fmt::print(stderr, "trainsim puzzles: no puzzle called '{}' (the puzzles are: {})\n", args.only, names);
      return 2;
    }
    chosen.push_back(p);
  } else {
    for (const auto& p : puzzles::catalog()) chosen.push_back(&p);
  }

  for (const std::string& dir : {args.out, args.save_schedules}) {
    if (dir.empty()) continue;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      fmt::print(stderr, "trainsim puzzles: cannot create directory '{}': {}\n", dir, ec.message());
      return 2;
    }
  }

  std::vector<puzzles::PuzzleResult> results;
  bool all_ok = true;
  std::FILE* notes = args.json ? stderr : stdout;
  for (const puzzles::Puzzle* p : chosen) {
    bool record = !args.save_schedules.empty();
    puzzles::PuzzleResult r = puzzles::run_puzzle(*p, args.exercises, record);
    if (record && r.schedule) {
      std::filesystem::path f = std::filesystem::path(args.save_schedules) / (p->name + ".sched");
      if (!write_output("trainsim puzzles", f.string(), print_schedule(*r.schedule))) {
        return 2;
      }
    }
    visualize::TimelineOptions opt;
    opt.title = fmt::format("{} - {}{}", p->name, p->title, args.exercises ? " (your solution)" : "");
    opt.target_time = p->target_time;
    opt.target_memory = p->target_memory;
    std::filesystem::path svg = std::filesystem::path(args.out) / (p->name + ".svg");
    if (!write_output("trainsim puzzles", svg.string(), visualize::timeline_svg(r.trace, opt))) {
      return 2;
    }
    all_ok = all_ok && r.passed();
    results.push_back(std::move(r));
  }

  if (args.json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const auto& r : results) arr.push_back(to_json(r));
    std::cout << json_text(arr) << "\n";
  } else {
    print_table(results);
  }
  int passed = 0;
  for (const auto& r : results) passed += r.passed();
  fmt::print(notes, "\n{} of {} puzzle{} correct and within targets; timelines in {}/\n", passed, results.size(),
             results.size() == 1 ? "" : "s", args.out);
  return all_ok ? 0 : 1;
}

}  // namespace

void add_puzzles_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PuzzlesArgs>();
  CLI::App* cmd = app.add_subcommand(
      "puzzles",
      "Check the eight LLM Training Puzzles (reference solutions, or yours with --exercises): correctness, "
      "Timesteps and peak memory against each puzzle's targets. Writes a timeline SVG per puzzle. Exits 0 only "
      "when every puzzle run is correct and within its targets.");
  cmd->add_option("--only", args->only, "Run only this puzzle (basic, grad_accum, ddp, wsdp, fsdp, pipeline, gpipe, pipeline_fsdp)");
  cmd->add_flag("--exercises", args->exercises, "Run your solutions in puzzles/exercises/ instead of the reference ones");
  cmd->add_option("--out", args->out, "Directory for the timeline SVGs")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print a JSON array of results instead of the table");
  cmd->add_option("--save-schedules", args->save_schedules,
                  "Also record each correct run's schedule and write it to DIR/NAME.sched");
  cmd->callback([args, exit_code] { *exit_code = run(*args); });
}

}  // namespace trainsim::apps
