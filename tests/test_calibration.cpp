// Calibration from measured traces (schedules/calibration.h), on synthetic traces whose truth is known: a
// schedule simulated on a known device and network, each op's dispatch time moved out of the op into the
// gap before it, as the executor shows it. The fit recovers the device; per-op medians over the steps ignore
// an outlier step; the gaps come back as set. Multi-step traces written by visualize/perfetto.h round-trip
// through schedules/measured_trace.h, and a trace in the single-step form of earlier replays still reads.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "schedules/calibration.h"
#include "schedules/generators.h"
#include "schedules/measured_trace.h"
#include "schedules/op_gaps.h"
#include "schedules/replay.h"
#include "visualize/perfetto.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// What calibrate starts from: the executor's `small` model as `trainsim calibrate --model small` sets it up.
hw::HardwareSetting base_setting() {
  hw::HardwareSetting s;
  s.model = hw::model_preset("small");
  s.device = hw::device_preset("cpu");
  s.network = hw::network_preset("cpu");
  s.microbatch_size = 8;
  return s;
}

// The truth the synthetic traces are measured on. attention = forward and backward_input = backward_weight:
// what one model shape and an unsplit backward can tell apart (calibration.h). No latency: every message of
// the schedule has the same size, so latency and bandwidth cannot be told apart either.
hw::HardwareSetting truth(double slow = 1) {
  hw::HardwareSetting s = base_setting();
  hw::EfficiencyTable& e = s.device.efficiency;
  e.forward = e.attention = 0.3 / slow;
  e.backward_input = e.backward_weight = 0.2 / slow;
  e.memory = 0.4 / slow;
  e.op_overhead_s = 1e-3 * slow;
  e.dispatch_s = 250e-6 * slow * slow;
  s.network.intra_latency_s = s.network.inter_latency_s = 0;
  s.network.intra_bandwidth = s.network.inter_bandwidth = 2e9 / slow;
  return s;
}

Schedule gpipe_on(const hw::HardwareSetting& setting) {
  GenOptions o;
  o.stages = 2, o.microbatches = 4;
  Schedule s = generate("gpipe", o);
  s.header.cost_model = "hardware";
  s.header.hardware = setting;
  return s;
}

// One measured step of `setting`: the simulated step with every timed op's dispatch moved out of the op: a
// recv starts when its rank reaches it and ends when the simulator ends it; any other op starts dispatch_s
// later and ends when the simulator ends it.
StepTrace measured_step(const hw::HardwareSetting& setting, int step, Time start) {
  SimResult r = simulate(gpipe_on(setting));
  REQUIRE(r.ok);
  const Time dispatch = seconds(setting.device.efficiency.dispatch_s);
  for (auto& rank : r.trace.ranks) {
    Time reached = 0;
    for (OpRun& run : rank) {
      if (!is_timed(run.op.kind)) continue;
      if (run.op.kind == OpKind::Recv) run.start = reached;
      else run.start += dispatch;
      REQUIRE(run.start <= run.end);
      reached = run.end;
    }
  }
  r.trace.cost_model = "synthetic";
  return StepTrace{step, start, r.trace};
}

std::string write_trace(const std::filesystem::path& dir, const char* name, const std::vector<StepTrace>& steps) {
  const std::string path = (dir / name).string();
  std::ofstream(path) << visualize::perfetto_steps_json(steps);
  return path;
}

void check_recovers(const Calibration& c, const hw::HardwareSetting& want) {
  const hw::EfficiencyTable &e = c.device.efficiency, &w = want.device.efficiency;
  CHECK(e.forward == doctest::Approx(w.forward).epsilon(1e-4));
  CHECK(e.attention == doctest::Approx(w.attention).epsilon(1e-4));
  CHECK(e.backward_input == doctest::Approx(w.backward_input).epsilon(1e-4));
  CHECK(e.backward_weight == doctest::Approx(w.backward_weight).epsilon(1e-4));
  CHECK(e.memory == doctest::Approx(w.memory).epsilon(1e-4));
  CHECK(e.op_overhead_s == doctest::Approx(w.op_overhead_s).epsilon(1e-4));
  CHECK(std::fabs(e.dispatch_s - w.dispatch_s) < 1e-8);  // nanosecond trace times: 10 ns is generous
  REQUIRE(c.network_fitted);
  CHECK(c.network.intra_bandwidth == doctest::Approx(want.network.intra_bandwidth).epsilon(1e-4));
}

}  // namespace

TEST_CASE("calibrate recovers the device a synthetic trace was measured on") {
  auto dir = fresh_dir("calibration-truth");
  const std::string one = write_trace(dir, "one.json", {measured_step(truth(), 3, 0)});
  Calibration c = calibrate({one}, base_setting());
  CHECK(c.steps == 1);
  check_recovers(c, truth());
}

TEST_CASE("calibrate fits per-op medians over the traced steps: an outlier step does not move the fit") {
  auto dir = fresh_dir("calibration-outlier");
  // Three steps, the middle one twice as slow in everything (another process took the core).
  StepTrace a = measured_step(truth(), 1, 0);
  const Time gap = seconds(1e-3);
  StepTrace slow = measured_step(truth(2), 2, a.trace.makespan() + gap);
  StepTrace b = measured_step(truth(), 3, slow.start + slow.trace.makespan() + gap);
  const std::string three = write_trace(dir, "three.json", {a, slow, b});
  Calibration c = calibrate({three}, base_setting());
  CHECK(c.steps == 3);
  check_recovers(c, truth());
  // Traces of the same schedule pool their steps: (a, slow) and (b) in two files give the median of three.
  const std::string first_two = write_trace(dir, "a-slow.json", {a, slow});
  check_recovers(calibrate({first_two, write_trace(dir, "b.json", {b})}, base_setting()), truth());
  // (a, slow) alone: the median of two is their mean, off by half the outlier.
  CHECK(calibrate({first_two}, base_setting()).device.efficiency.dispatch_s > 1.5 * truth().device.efficiency.dispatch_s);
  // The outlier alone gives its own, slower device: the check above can tell the two apart.
  Calibration only_slow = calibrate({write_trace(dir, "slow.json", {slow})}, base_setting());
  CHECK(only_slow.device.efficiency.forward == doctest::Approx(truth(2).device.efficiency.forward).epsilon(1e-4));
  CHECK(only_slow.device.efficiency.forward < 0.6 * c.device.efficiency.forward);
  CHECK(only_slow.device.efficiency.dispatch_s > 3 * c.device.efficiency.dispatch_s);
}

TEST_CASE("dispatch gaps: every op whose ready time is known shows the gap that was set") {
  auto dir = fresh_dir("calibration-gaps");
  const std::string path = write_trace(dir, "gaps.json", {measured_step(truth(), 1, 0)});
  MeasuredTrace t = read_measured_trace(path);
  REQUIRE(t.steps.size() == 1);
  const auto gaps = dispatch_gaps(t.steps[0]);
  REQUIRE(gaps.size() == 2);
  int known = 0, ops = 0;
  for (std::size_t r = 0; r < gaps.size(); ++r) {
    REQUIRE(gaps[r].size() == t.steps[0].ranks[r].size());
    for (std::size_t i = 0; i < gaps[r].size(); ++i) {
      ++ops;
      if (std::isnan(gaps[r][i])) continue;
      ++known;
      CAPTURE(r);
      CAPTURE(i);
      CHECK(std::fabs(gaps[r][i] - 250e-6) < 1e-9);
    }
  }
  // Unknown: rank 0's first forward (it waits only for loads, which the trace does not time).
  CHECK(known == ops - 1);
  // The rule by hand: a recv's gap is from its message's send to its end; an op's from the latest of its
  // thread's previous op and the writers of what it reads.
  MeasuredStep s;
  s.ranks.resize(2);
  s.ranks[0].push_back({OpKind::Send, -1, 1, "0", {"A1{0}"}, {}, 1, -1, 1.0, 1.5});
  s.ranks[1].push_back({OpKind::Recv, -1, 2, "0", {}, {"A1{0}"}, 0, -1, 0.0, 1.7});
  s.ranks[1].push_back({OpKind::Forward, 1, 2, "0", {"A1{0}", "W1"}, {"A2{0}"}, -1, -1, 1.75, 3.0});
  s.ranks[1].push_back({OpKind::Forward, 1, 3, "1", {"A2{0}"}, {"A2{1}"}, -1, -1, 3.5, 4.0});
  const auto g = dispatch_gaps(s);
  CHECK(std::isnan(g[0][0]));
  CHECK(g[1][0] == doctest::Approx(0.2));   // 1.7 - max(0.0, 1.5)
  CHECK(g[1][1] == doctest::Approx(0.05));  // 1.75 - 1.7 (the recv wrote A1{0})
  CHECK(g[1][2] == doctest::Approx(0.5));   // another thread: 3.5 - 3.0 (its input's writer)
}

TEST_CASE("perfetto_steps_json: one timeline of several steps, each op with its step, deterministic") {
  StepTrace a = measured_step(truth(), 4, 0), b = measured_step(truth(), 5, seconds(2.0));
  const std::string text = visualize::perfetto_steps_json({a, b});
  CHECK(text == visualize::perfetto_steps_json({a, b}));
  nlohmann::json j = nlohmann::json::parse(text);
  const auto& other = j["otherData"];
  REQUIRE(other["steps"].size() == 2);
  CHECK(other["steps"][0]["step"] == 4);
  CHECK(other["steps"][1]["start_us"].get<double>() == doctest::Approx(2e6));
  const double ms_a = static_cast<double>(a.trace.makespan()) / 1e3, ms_b = static_cast<double>(b.trace.makespan()) / 1e3;
  CHECK(other["steps"][1]["makespan_us"].get<double>() == doctest::Approx(ms_b));
  CHECK(other["step_makespan_median_us"].get<double>() == doctest::Approx((ms_a + ms_b) / 2));
  CHECK(other["makespan_us"].get<double>() == doctest::Approx(2e6 + ms_b));
  int in_a = 0, in_b = 0;
  auto is_op = [](const nlohmann::json& e) {  // an op's complete event (not, e.g., an exposed-communication slice)
    const std::string cat = e.value("cat", "");
    return e["ph"] == "X" && (cat == "compute" || cat == "p2p" || cat == "collective");
  };
  for (const auto& e : j["traceEvents"]) {
    if (!is_op(e)) continue;
    REQUIRE(e["args"].contains("step"));
    (e["args"]["step"] == 4 ? in_a : in_b)++;
    if (e["args"]["step"] == 5) CHECK(e["ts"].get<double>() >= 2e6);
  }
  int timed = 0;
  for (const auto& rank : a.trace.ranks)
    for (const OpRun& run : rank) timed += is_timed(run.op.kind);
  CHECK(in_a == timed);
  CHECK(in_a == in_b);
  // Read back: two steps with their makespans, every rank's ops in program order.
  auto dir = fresh_dir("calibration-steps");
  MeasuredTrace t = read_measured_trace(write_trace(dir, "two.json", {a, b}));
  REQUIRE(t.steps.size() == 2);
  CHECK(t.steps[1].step == 5);
  CHECK(t.steps[1].makespan_s == doctest::Approx(ms_b / 1e6));
  CHECK(t.steps[0].ranks[1].front().kind == OpKind::Recv);
}

TEST_CASE("trainsim replay: each step starts on every rank once the step before has ended on every rank") {
  // Rank 1 only receives one activation early in the step; rank 0 trains on. Unaligned, rank 1 would post
  // the next step's recv while rank 0 still runs this step's backwards, and the trace's next step would
  // start (and its makespan count from) there.
  auto dir = fresh_dir("calibration-aligned");
  std::ofstream(dir / "l.sched") << R"(trainsim-schedule 1
world_size 2
layers 1
microbatches 4
cost_model unit
p2p per-pair

rank 0
  load -> W0 O0
  load -> A0{0}
  forward L0 {0}
  send to 1 : A1{0}
  loss {0}
  free : A1{0}
  load -> A0{1-3}
  forward L0 {1-3}
  loss {1-3}
  free : A1{1-3}
  backward L0 {0}
  free : A0{0} dA1{0} dA0{0}
  backward L0 {1-3}
  free : A0{1-3} dA1{1-3} dA0{1-3}
  accumulate : dW0{0} dW0{1-3} -> dW0{0-3}
  free : dW0{0} dW0{1-3}
  update L0
  free : W0 O0 dW0{0-3}

rank 1
  recv from 0 -> A1{0}
  free : A1{0}
)";
  const std::string trace = (dir / "l.json").string();
  REQUIRE(run_trainsim("replay " + (dir / "l.sched").string() + " --model tiny --steps 4 --trace-steps 3 --trace " +
                       trace + " --data " + TRAINSIM_SOURCE_DIR + "/tests/data/corpus.txt").exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(slurp(trace));
  std::map<int, double> first_start, last_end;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X" || !e.contains("args") || !e["args"].contains("step")) continue;  // ops only
    const int s = e["args"]["step"].get<int>();
    const double ts = e["ts"].get<double>(), end = ts + e["dur"].get<double>();
    first_start[s] = first_start.count(s) ? std::min(first_start[s], ts) : ts;
    last_end[s] = std::max(last_end[s], end);
  }
  REQUIRE(first_start.size() == 3);
  CHECK(first_start[2] >= last_end[1]);
  CHECK(first_start[3] >= last_end[2]);
}

TEST_CASE("trainsim replay --trace-steps and calibrate: the loop end to end on multi-step traces") {
  auto dir = fresh_dir("calibration-loop");
  auto at = [&](const char* n) { return (dir / n).string(); };
  const std::string data = std::string(" --data ") + TRAINSIM_SOURCE_DIR + "/tests/data/corpus.txt";
  REQUIRE(run_trainsim("gen 1f1b --stages 2 --microbatches 4 -o " + at("p.sched")).exit_code == 0);
  REQUIRE(run_trainsim("gen ddp --dp 2 --layers 2 --microbatches 4 -o " + at("d.sched")).exit_code == 0);
  REQUIRE(run_trainsim("replay " + at("p.sched") + " --model tiny --steps 4 --trace-steps 3 --trace " + at("p.json") +
                       data).exit_code == 0);
  // More steps asked than a run has after its first: the steps after the first.
  REQUIRE(run_trainsim("replay " + at("d.sched") + " --model tiny --steps 3 --trace-steps 9 --grad-clip 0 --trace " +
                       at("d.json") + data).exit_code == 0);
  nlohmann::json p = nlohmann::json::parse(slurp(at("p.json")));
  REQUIRE(p["otherData"]["steps"].size() == 3);
  CHECK(p["otherData"]["steps"][0]["step"] == 1);  // steps 1, 2, 3 (0-based) of 4: the first warms up
  CHECK(nlohmann::json::parse(slurp(at("d.json")))["otherData"]["steps"].size() == 2);
  CommandResult r = run_trainsim("calibrate " + at("p.json") + " " + at("d.json") + " --model tiny -o " + at("dev.json") +
                                 " --network-output " + at("net.json"), true);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("over 5 steps") != std::string::npos);
  nlohmann::json dev = nlohmann::json::parse(slurp(at("dev.json")));
  CHECK(dev["calibration"]["steps"] == 5);
  CHECK(dev["calibration"]["gap_ops"].get<int>() > 0);
  CHECK(dev["efficiency"]["dispatch_s"].get<double>() >= 0);
  r = run_trainsim("sim " + at("p.sched") + " --model tiny --microbatch-size 2 --device " + at("dev.json") +
                   " --network " + at("net.json") + " --json");
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["step_time_s"].get<double>() > 0);
  // A trace in the single-step form of earlier replays (no steps, no args.step) still reads: one step.
  nlohmann::json old = p;
  old["otherData"].erase("steps");
  old["otherData"].erase("step_makespan_median_us");
  nlohmann::json kept = nlohmann::json::array();
  for (auto e : old["traceEvents"]) {
    if (e.contains("args") && e["args"].contains("step")) {
      if (e["args"]["step"] != 3) continue;
      e["args"].erase("step");
    }
    kept.push_back(e);
  }
  old["traceEvents"] = kept;
  std::ofstream(at("old.json")) << old.dump();
  r = run_trainsim("calibrate " + at("old.json") + " --model tiny -o " + at("old-dev.json"), true);
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(slurp(at("old-dev.json")))["calibration"]["steps"] == 1);
  CHECK(run_trainsim("replay " + at("p.sched") + " --model tiny --trace-steps 0" + data, true).exit_code == 2);
}
