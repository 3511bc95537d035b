// `trainsim validate FILE` and `trainsim sim FILE`: check a schedule and time it; draw it.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/number_check.h"
#include "apps/json_text.h"
#include "apps/hardware_options.h"
#include "apps/output_names.h"
#include "apps/schedule_input.h"
#include "apps/stage_line.h"
#include "apps/text_file.h"
#include "hardware/cost_model.h"
#include "schedules/cost_models.h"
#include "schedules/hardware_sim.h"
#include "schedules/limits.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"
#include "visualize/graph.h"
#include "visualize/perfetto.h"
#include "visualize/timeline_marks.h"
#include "visualize/timeline_svg.h"

namespace trainsim::apps {

namespace {

struct SimArgs {
  std::string command;  // "trainsim sim" or "trainsim validate"
  std::string file;
  ScheduleInputOptions input;
  std::optional<double> memory_limit;
  std::string svg, trace, dot;
  bool json = false;
  bool allow_oom = false;  // --allow-oom: a step over the device's memory passes (a what-if)
  HardwareOptions hardware;
};

// --dot FILE: DOT text (.dot, .gv) or a Graphviz layout (.svg, .png, .pdf), refused above kMaxRenderedOps.
bool write_graph(const SimArgs& a, const Schedule& s) {
  std::string format;
  try {
    format = visualize::graph_format_for(a.dot);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "{}: --dot: {}\n", a.command, e.what());
    return false;
  }
  std::string dot = visualize::dependency_dot(s);
  if (format == "dot") return write_output(a.command, a.dot, dot);
  if (s.op_count() > visualize::kMaxRenderedOps) {
    fmt::print(stderr,
               "{}: not rendering {}: the schedule has {} ops and Graphviz lays out at most {} in seconds; "
               "write the DOT text with --dot {} and render a part of it, or simulate a smaller schedule\n",
               a.command, a.dot, s.op_count(), visualize::kMaxRenderedOps,
               std::filesystem::path(a.dot).replace_extension(".dot").string());
    return false;
  }
  try {
    return write_output(a.command, a.dot, visualize::render_dot(dot, format));
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: cannot render the graph: {}\n", a.command, e.what());
    return false;
  }
}

nlohmann::ordered_json summary_json(const std::string& file, const Schedule* s, const SimResult* r,
                                    const std::string& error) {
  nlohmann::ordered_json j;
  j["file"] = file;
  j["ok"] = error.empty();
  j["error"] = error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(error);
  if (s) {
    j["world_size"] = s->header.world_size;
    j["layers"] = s->header.layers;
    j["microbatches"] = s->header.microbatches;
    j["cost_model"] = s->header.cost_model;
    j["ops"] = s->op_count();
  }
  if (r) {
    const MemoryPeak& p = r->summary.peak;
    j["timesteps"] = to_seconds(r->summary.timesteps);
    j["makespan"] = to_seconds(r->summary.makespan);
    j["bubble_fraction"] = r->summary.bubble_fraction;
    j["max_memory"] = p.memory;
    j["max_memory_rank"] = p.rank;
    j["max_memory_time"] = to_seconds(p.time);
  }
  return j;
}

// Parses and simulates; prints the result. Returns the exit code.
int run(const SimArgs& a, bool outputs) {
  if (outputs && !a.dot.empty()) {
    try {
      visualize::graph_format_for(a.dot);  // refused before any work
    } catch (const std::invalid_argument& e) {
      fmt::print(stderr, "{}: --dot: {}\n", a.command, e.what());
      return 2;
    }
  }
  Schedule s;
  StageLine stage(a.command);
  stage.show(fmt::format("reading {}", a.file));
  // Exit status (README): 2 when the input cannot be read at all, 1 when it was read and is wrong.
  auto input_error = [&](const std::string& what, int code) {
    stage.clear();
    if (a.json) std::cout << json_text(summary_json(a.file, nullptr, nullptr, what)) << "\n";
    else fmt::print(stderr, "{}: {}\n", a.command, what);
    return code;
  };
  try {
    s = load_schedule_input(a.file, a.input);  // a .sched file, a PyTorch CSV (converted here) or a puzzle
  } catch (const UnreadableInput& e) {  // no such file or puzzle, a directory, no permission
    return input_error(e.what(), 2);
  } catch (const ParseError& e) {
    return input_error(e.what(), 1);
  } catch (const std::invalid_argument& e) {  // a CSV that does not import or fit the options, a failing puzzle
    return input_error(e.what(), 1);
  }
  stage.clear();
  if (a.hardware.any() || s.header.cost_model == "hardware") {
    try {
      apply_hardware(s.header, a.hardware);
    } catch (const hw::SpecError& e) {
      if (a.json) std::cout << json_text(summary_json(a.file, nullptr, nullptr, e.what())) << "\n";
      else fmt::print(stderr, "{}: {}\n", a.command, e.what());
      return 2;
    }
  }
  SimOptions opts;
  opts.memory_limit = a.memory_limit;
  // Per-op records only for what draws them (the figures printed come from the run's summary).
  opts.record_trace = s.header.cost_model == "hardware" || (outputs && (!a.svg.empty() || !a.trace.empty()));
  SimResult r;
  std::optional<hw::StepReport> report;
  std::unique_ptr<CostModel> cost;  // the hardware model that timed it: the timeline and trace draw its inner_comm
  std::string failure;  // why the run fails ("": it passes): its error, or running out of device memory
  stage.show(fmt::format("simulating {} ops on {} ranks", s.op_count(), s.header.world_size));
  if (s.header.cost_model == "hardware" && !a.memory_limit) {
    HardwareRun run = simulate_hardware(s);
    failure = step_failure(run, a.allow_oom);
    r = std::move(run.result);
    report = std::move(run.report);
    cost = std::move(run.cost);
  } else {
    try {
      r = simulate(s, opts);
    } catch (const std::invalid_argument& e) {  // a schedule the cost model cannot time (as simulate_hardware says)
      r = SimResult{};
      r.error = e.what();
    }
    if (r.ok && s.header.cost_model == "hardware") {
      cost = make_schedule_cost_model(s);  // for the report's TP communication figures and the drawings
      report = hw::make_report(r.trace, *s.header.hardware, s.header.microbatches, "",
                               dynamic_cast<const hw::HardwareCostModel*>(cost.get()));
    }
    failure = r.ok ? "" : r.error;
  }
  stage.clear();
  if (a.json) {
    auto j = summary_json(a.file, &s, &r, failure);
    if (report && outputs) j.update(hw::to_json(*report));
    std::cout << json_text(j) << "\n";
  } else if (r.ok) {  // the run completed: its figures, also when the step ran out of device memory
    const MemoryPeak& p = r.summary.peak;
    fmt::print("{}: {}: {} ops on {} rank{}, {} layers, {} microbatches ({} cost model)\n", a.file,
               failure.empty() ? "valid" : "out of device memory", s.op_count(), s.header.world_size,
               s.header.world_size == 1 ? "" : "s", s.header.layers, s.header.microbatches, s.header.cost_model);
    if (outputs)
      fmt::print("timesteps {}  makespan {}  bubble {:.1f}%  peak memory {} {} at rank {} t={}\n",
                 format_time(r.summary.timesteps), format_time(r.summary.makespan), 100 * r.summary.bubble_fraction,
                 format_memory(p.memory), r.trace.memory_unit, p.rank, format_time(p.time));
    if (outputs && report) fmt::print("{}", hw::format_report(*report, *s.header.hardware));
    if (!failure.empty()) fmt::print(stderr, "{}: {}: {}\n", a.command, a.file, failure);
  } else {
    fmt::print(stderr, "{}: {}: invalid: {}\n", a.command, a.file, r.error);
  }
  bool wrote = true;
  if (outputs) {
    if (!a.svg.empty()) {
      visualize::TimelineOptions o;
      o.title = std::filesystem::path(a.file).filename().string();
      o.cost = cost.get();
      if (!failure.empty()) o.error = failure;  // a failed run's timeline says so: a banner
      if (!r.ok)  // an invalid run's partial timeline: its blocked ranks marked
        for (const auto& b : r.blocked) o.blocked.push_back({b.rank, b.since, b.what(), b.stream});
      stage.show("drawing the timeline");
      std::string svg = visualize::timeline_svg(r.trace, o);
      stage.clear();
      wrote = write_output(a.command, a.svg, svg) && wrote;
    }
    if (!a.trace.empty()) {
      stage.show("writing the trace");
      std::string trace = visualize::perfetto_trace_json(r.trace, cost.get());
      stage.clear();
      wrote = write_output(a.command, a.trace, trace) && wrote;
    }
    if (!a.dot.empty()) wrote = write_graph(a, s) && wrote;
  }
  if (!wrote) return 2;
  return failure.empty() ? 0 : 1;
}

// Exit status of validate and sim (README, "Exit status").
constexpr const char* kExitStatus =
    "Exit status: 0 valid (on the hardware cost model: and within the device's memory); 1 the schedule does not "
    "parse, import or validate (or a CSV does not fit --stage-map or --microbatches), or on the hardware cost model "
    "runs out of device memory (its figures still reported; --allow-oom passes it); 2 a bad option, an input that "
    "cannot be read (no such file or puzzle) or an output that cannot be written.";

// --memory-limit: a finite number of at least 0 (NaN, inf or a negative limit would turn the check off or
// fail every op without saying why).
const CLI::Validator kMemoryLimit = finite_number(0, false, "in the cost model's unit", "LIMIT>=0");

// FILE and the options that say how to read a CSV, shared by validate and sim.
void add_input_options(CLI::App* cmd, SimArgs& a) {
  cmd->add_option("FILE", a.file, "Schedule: a .sched file, a PyTorch pipelining CSV (converted on the fly) or a "
                                  "puzzle name (its reference solution)")
      ->required();
  cmd->add_option("--microbatches", a.input.microbatches,
                  "Reading a CSV: the number of microbatches (default: 1 + the largest index in it)")
      ->check(integer_in(1, kMaxCount, "", "N>=1"));
  cmd->add_option("--stage-map", a.input.stage_map, "Reading a CSV: the rank of each stage: 0,1,2,3 or loop or v")
      ->check(stage_map_check());
}

// --allow-oom, shared by validate and sim.
void add_allow_oom(CLI::App* cmd, SimArgs& a) {
  cmd->add_flag("--allow-oom", a.allow_oom,
                "Hardware cost model: a step that runs out of device memory passes (exit 0, ok, the oom object still "
                "reported), for a what-if");
}

}  // namespace

void add_sim_commands(CLI::App& app, int* exit_code) {
  auto va = std::make_shared<SimArgs>();
  va->command = "trainsim validate";
  CLI::App* v = app.add_subcommand(
      "validate",
      "Check a schedule (.sched, a PyTorch pipelining CSV or a puzzle name): syntax, the tensor algebra of every op, send/receive matching, collective order, "
      "deadlock, memory limit, every layer updated exactly once. " + std::string(kExitStatus));
  add_input_options(v, *va);
  v->add_option("--memory-limit", va->memory_limit, "Per-rank memory limit, in the cost model's unit")->check(kMemoryLimit);
  v->add_flag("--json", va->json, "Print the result as JSON");
  add_allow_oom(v, *va);
  v->callback([va, exit_code] { *exit_code = run(*va, false); });

  auto sa = std::make_shared<SimArgs>();
  sa->command = "trainsim sim";
  CLI::App* s = app.add_subcommand(
      "sim",
      "Simulate a schedule (.sched, a PyTorch pipelining CSV or a puzzle name): validate it, time it with its cost model, and optionally write its timeline "
      "(SVG), Chrome/Perfetto trace (JSON) and dependency graph (DOT text, or SVG, PNG or PDF by the name's extension). A schedule "
      "with a 'cost_model hardware' block, or --model/--device/--network, is reported in seconds and bytes. " +
          std::string(kExitStatus));
  add_input_options(s, *sa);
  s->add_option("--memory-limit", sa->memory_limit, "Per-rank memory limit, in the cost model's unit")->check(kMemoryLimit);
  s->add_option("--svg", sa->svg, "Write the timeline SVG here (NAME.svg)")
      ->check(output_named({".svg"}, "SVG", "NAME.svg"));
  s->add_option("--trace", sa->trace, "Write the Chrome/Perfetto trace JSON here (NAME.json)")
      ->check(output_named({".json"}, "JSON", "NAME.json"));
  s->add_option("--dot", sa->dot,
                "Write the op dependency graph here: DOT text (.dot, .gv) or laid out by Graphviz (.svg, .png, .pdf; "
                "schedules of at most 600 ops)");
  s->add_flag("--json", sa->json,
              "Print the result as JSON (hardware cost model: also step_time_s, tokens_per_s, tokens_per_s_per_gpu, "
              "mfu, bubble_fraction, exposed_comm_s, peak_memory_bytes, oom, and per-rank figures)");
  add_hardware_options(s, sa->hardware);
  add_allow_oom(s, *sa);
  s->callback([sa, exit_code] { *exit_code = run(*sa, true); });
}

}  // namespace trainsim::apps
