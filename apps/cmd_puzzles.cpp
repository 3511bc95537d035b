// `trainsim puzzles`: check the LLM Training Puzzles (the original eight, and our tensor-parallel and expert-parallel ones) and draw
// their timelines.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/json_text.h"
#include "apps/puzzle_report.h"
#include "apps/text_file.h"
#include "puzzles/explain.h"
#include "puzzles/runner.h"
#include "puzzles/timeline_options.h"
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

// The saved .sched: a failed run's partial schedule starts with comment lines that say so and why.
std::string schedule_text(const puzzles::PuzzleResult& r) {
  std::string text = print_schedule(*r.schedule);
  if (r.correct) return text;
  std::string head = "# PARTIAL SCHEDULE: this run failed; only the ops executed before the error are here.\n";
  std::size_t at = 0;
  while (at <= r.error.size()) {
    std::size_t nl = r.error.find('\n', at);
    head += "# " + r.error.substr(at, nl == std::string::npos ? std::string::npos : nl - at) + "\n";
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return head + text;
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

  // Your solutions' timelines go to OUT/exercises/: the reference timelines in OUT/ stay as they are.
  const std::filesystem::path svg_dir =
      args.exercises ? std::filesystem::path(args.out) / "exercises" : std::filesystem::path(args.out);
  for (const std::string& dir : {svg_dir.string(), args.save_schedules}) {
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
      if (!write_output("trainsim puzzles", f.string(), schedule_text(r))) return 2;
    }
    std::filesystem::path svg = svg_dir / (p->name + ".svg");
    if (!write_output("trainsim puzzles", svg.string(),
                      visualize::timeline_svg(r.trace, puzzles::timeline_options(*p, r, args.exercises)))) {
      return 2;
    }
    all_ok = all_ok && r.passed();
    results.push_back(std::move(r));
  }

  if (args.json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const auto& r : results) arr.push_back(puzzle_json(r));
    std::cout << json_text(arr) << "\n";
  } else {
    print_table(results);
  }
  int passed = 0;
  for (const auto& r : results) passed += r.passed();
  fmt::print(notes, "\n{} of {} puzzle{} correct and within targets; timelines in {}/\n", passed, results.size(),
             results.size() == 1 ? "" : "s", svg_dir.string());
  return all_ok ? 0 : 1;
}

}  // namespace

void add_puzzles_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PuzzlesArgs>();
  CLI::App* cmd = app.add_subcommand(
      "puzzles",
      "Check the LLM Training Puzzles, the original eight and two of ours, tensor and expert parallelism (reference "
      "solutions, or yours with --exercises): correctness, "
      "Timesteps and peak memory against each puzzle's targets. Writes a timeline SVG per puzzle. Exit status: 0 "
      "every puzzle run is correct and within its targets; 1 one is not; 2 a bad option or an output that cannot be "
      "written.");
  cmd->add_option("--only", args->only, "Run only this puzzle (basic, grad_accum, ddp, wsdp, fsdp, pipeline, gpipe, pipeline_fsdp, "
                  "tensor_parallel)");
  cmd->add_flag("--exercises", args->exercises, "Run your solutions in puzzles/exercises/ instead of the reference ones");
  cmd->add_option("--out", args->out,
                  "Directory for the timeline SVGs (with --exercises, its exercises/ subdirectory)")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print a JSON array of results instead of the table");
  cmd->add_option("--save-schedules", args->save_schedules,
                  "Also record each run's schedule and write it to DIR/NAME.sched (a failed run's partial schedule, "
                  "marked by a comment at the top)");
  cmd->callback([args, exit_code] { *exit_code = run(*args); });
}

}  // namespace trainsim::apps
