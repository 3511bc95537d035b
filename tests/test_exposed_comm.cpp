// Exposed communication (sim/exposed_comm.h): the intervals on hand-built traces (hidden, partly hidden, two
// streams counted once), the hardware report's totals from the same intervals, the timeline's strips (exact
// places and tooltips; none when hidden or under the puzzle model) and the Perfetto track's slices.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text_helpers.h"
#include "hardware/report.h"
#include "puzzles/runner.h"
#include "schedules/generators.h"
#include "schedules/hardware_sim.h"
#include "sim/exposed_comm.h"
#include "visualize/perfetto.h"
#include "visualize/timeline_exposed.h"
#include "visualize/timeline_units.h"
#include "visualize/timeline_svg.h"

using namespace trainsim;
using trainsim::testing::count;

namespace {

constexpr Time kS = kTicksPerSecond;

OpRun run(OpKind kind, Time start, Time end, int stream = 0, int peer = -1) {
  OpRun r;
  r.op.kind = kind;
  r.op.layer = 0;
  r.op.stream = stream;
  r.op.peer = peer;
  r.start = start;
  r.end = end;
  return r;
}

using Iv = std::vector<TimeInterval>;

/// Three ranks: rank 0's send runs wholly under its forward (hidden); rank 1's all-reduce outlasts its forward
/// (exposed [10, 14]); rank 2 receives on stream 2 and sends on stream 1 at overlapping times, partly under
/// two forwards (comm [2, 13] counted once, exposed [4, 12]), then sends on the compute stream ([20, 25]).
Trace three_ranks(const std::string& cost_model) {
  Trace t;
  t.world_size = 3;
  t.layers = 1;
  t.batches = 1;
  t.cost_model = cost_model;
  t.memory_unit = "bytes";
  t.ranks.resize(3);
  t.ranks[0] = {run(OpKind::Forward, 0, 10 * kS), run(OpKind::Send, 2 * kS, 8 * kS, 1, 1)};
  t.ranks[1] = {run(OpKind::Forward, 0, 10 * kS), run(OpKind::AllReduce, 6 * kS, 14 * kS, 1)};
  t.ranks[2] = {run(OpKind::Forward, 0, 4 * kS),         run(OpKind::Recv, 2 * kS, 9 * kS, 2, 0),
                run(OpKind::Send, 5 * kS, 13 * kS, 1, 1), run(OpKind::Forward, 12 * kS, 20 * kS),
                run(OpKind::Send, 20 * kS, 25 * kS, 0, 1), run(OpKind::Loss, 25 * kS, 25 * kS)};
  return t;
}

const puzzles::PuzzleResult& puzzle_run(const char* name) {
  static std::map<std::string, puzzles::PuzzleResult> runs;
  auto it = runs.find(name);
  if (it == runs.end()) {
    const puzzles::Puzzle* p = puzzles::find_puzzle(name);
    REQUIRE(p != nullptr);
    it = runs.emplace(name, puzzles::run_puzzle(*p, false, /*record=*/true)).first;
  }
  return it->second;
}

hw::HardwareSetting a_setting() {
  hw::HardwareSetting s;
  s.model = hw::model_preset("llama3-8b");
  s.device = hw::device_preset("h100-sxm");
  s.network = hw::network_preset("nvlink8-ib400");
  return s;
}

/// The exposed strips of an SVG: (x, width) of each <rect class="exposed">, in document order.
std::vector<std::pair<double, double>> strips_in(const std::string& svg) {
  static const std::regex re(R"re(<rect class="exposed" x="([0-9.]+)" y="[0-9.]+" width="([0-9.]+)")re");
  std::vector<std::pair<double, double>> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it)
    out.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  return out;
}

/// Options with a fixed time scale: `width` pixels for the whole run, starting at x = 100.
visualize::TimelineOptions fixed_scale(double width) {
  visualize::TimelineOptions o;
  o.min_time_width = o.max_time_width = width;
  return o;
}

}  // namespace

TEST_CASE("interval helpers: merge sorts, joins touching and overlapping, drops empty, subtract is exact") {
  CHECK(merge_intervals({{5, 7}, {0, 2}, {2, 3}, {6, 9}, {4, 4}, {8, 1}}) == Iv{{0, 3}, {5, 9}});
  CHECK(merge_intervals({}).empty());
  CHECK(subtract_intervals({{0, 10}}, {{2, 3}, {5, 12}}) == Iv{{0, 2}, {3, 5}});
  CHECK(subtract_intervals({{0, 10}, {20, 30}}, {{-5, 0}, {10, 20}, {25, 26}}) == Iv{{0, 10}, {20, 25}, {26, 30}});
  CHECK(subtract_intervals({{2, 8}}, {{0, 10}}).empty());
  CHECK(subtract_intervals({{2, 8}}, {}) == Iv{{2, 8}});
  CHECK(total_length({{0, 3}, {5, 9}}) == 7);
}

TEST_CASE("exposed communication: hidden none, partly hidden exact, two streams counted once, any stream") {
  const Trace t = three_ranks("hardware");
  const auto e = exposed_comm(t);
  REQUIRE(e.size() == 3);
  CHECK(e[0].empty());                                   // the send runs wholly under the forward
  CHECK(e[1] == Iv{{10 * kS, 14 * kS}});                 // the all-reduce outlasts the forward
  CHECK(e[2] == Iv{{4 * kS, 12 * kS}, {20 * kS, 25 * kS}});  // recv and send overlap: [4, 12] once; then stream 0
  CHECK(total_length(e[2]) == 13 * kS);
  CHECK(comm_intervals(t.ranks[2]) == Iv{{2 * kS, 13 * kS}, {20 * kS, 25 * kS}});
  CHECK(compute_intervals(t.ranks[2]) == Iv{{0, 4 * kS}, {12 * kS, 20 * kS}});  // the zero-time loss adds nothing
  CHECK(exposed_comm_intervals(t.ranks[1]) == e[1]);

  // The hardware report totals the same intervals.
  const hw::StepReport r = hw::make_report(t, a_setting(), 1);
  REQUIRE(r.ranks.size() == 3);
  for (int rank = 0; rank < 3; ++rank) CHECK(r.ranks[rank].exposed_comm_s == to_seconds(total_length(e[rank])));
  CHECK(r.ranks[2].comm_s == 16.0);
  CHECK(r.exposed_comm_s == doctest::Approx((0 + 4 + 13) / 3.0));
}

TEST_CASE("marks_exposed_comm: only when communication takes time and the model is not the puzzles'") {
  CHECK(marks_exposed_comm(three_ranks("hardware")));
  CHECK(marks_exposed_comm(three_ranks("measured (cpu)")));
  CHECK_FALSE(marks_exposed_comm(three_ranks("puzzle")));
  Trace zero = three_ranks("unit");
  for (auto& runs : zero.ranks)
    for (auto& r : runs)
      if (is_p2p(r.op.kind) || is_collective(r.op.kind)) r.end = r.start;
  CHECK_FALSE(marks_exposed_comm(zero));
  const auto& gpipe = puzzle_run("gpipe");
  REQUIRE(gpipe.correct);
  CHECK_FALSE(marks_exposed_comm(gpipe.trace));
}

TEST_CASE("exposed strips: narrow gaps join, titles give span and length") {
  using visualize::ExposedStrip;
  // 1 px per second: the gap of 0.5 s joins, the gap of 2 s does not.
  auto s = visualize::exposed_strips({{0, 1 * kS}, {kS + kS / 2, 3 * kS}, {5 * kS, 6 * kS}}, 1.0);
  REQUIRE(s.size() == 2);
  CHECK(s[0].start == 0);
  CHECK(s[0].end == 3 * kS);
  CHECK(s[0].length == 2 * kS + kS / 2);
  CHECK(s[0].count == 2);
  CHECK(s[1].count == 1);
  CHECK(visualize::exposed_strip_title(4, s[1]) == "rank 4: exposed communication from 5 s to 6 s, 1 s");
  CHECK(visualize::exposed_strip_title(4, s[0]).find("2 intervals from 0 s to 3 s, 2.5 s in all") != std::string::npos);
}

TEST_CASE("timeline svg: exposed strips at their exact places, totals per rank, none when hidden") {
  const Trace t = three_ranks("hardware");
  // 25 s over 1000 px: 40 px per second from x = 100.
  const std::string svg = visualize::timeline_svg(t, fixed_scale(1000));
  const auto strips = strips_in(svg);
  REQUIRE(strips.size() == 3);
  CHECK(strips[0].first == doctest::Approx(100 + 10 * 40).epsilon(1e-6));  // rank 1: [10, 14]
  CHECK(strips[0].second == doctest::Approx(4 * 40));
  CHECK(strips[1].first == doctest::Approx(100 + 4 * 40));  // rank 2: [4, 12]
  CHECK(strips[1].second == doctest::Approx(8 * 40));
  CHECK(strips[2].first == doctest::Approx(100 + 20 * 40));  // rank 2: [20, 25]
  CHECK(strips[2].second == doctest::Approx(5 * 40));
  CHECK(count(svg, "<title>rank 2: exposed communication from 4 s to 12 s, 8 s</title>") == 1);
  CHECK(count(svg, ">exposed 0 s</text>") == 1);
  CHECK(count(svg, ">exposed 4 s</text>") == 1);
  CHECK(count(svg, ">exposed 13 s</text>") == 1);
  CHECK(count(svg, "most 13 s on rank 2") == 1);
  CHECK(count(svg, "exposed communication (under the rank") == 1);  // the legend
  CHECK(visualize::timeline_svg(t, fixed_scale(1000)) == svg);        // deterministic

  // Every send hidden under compute: no strip, the heading says so, the totals are 0.
  Trace hidden = t;
  hidden.ranks[1].pop_back();
  hidden.ranks[2] = {run(OpKind::Forward, 0, 25 * kS), run(OpKind::Recv, 2 * kS, 9 * kS, 2, 0)};
  const std::string h = visualize::timeline_svg(hidden, fixed_scale(1000));
  CHECK(strips_in(h).empty());
  CHECK(count(h, "class=\"exposed\"") == 0);
  CHECK(count(h, "exposed communication: none, all hidden under compute") == 1);
  CHECK(count(h, ">exposed 0 s</text>") == 3);

  // Under the puzzle model nothing about it is drawn.
  const std::string p = visualize::timeline_svg(three_ranks("puzzle"), fixed_scale(1000));
  CHECK(count(p, "exposed") == 0);
  const auto& gpipe = puzzle_run("gpipe");
  CHECK(count(visualize::timeline_svg(gpipe.trace), "exposed") == 0);
}

TEST_CASE("timeline svg: a 1f1b step on hardware marks its sends and receives as exposed") {
  GenOptions o;
  o.stages = 4, o.microbatches = 4;
  Schedule s = generate("1f1b", o);
  s.header.cost_model = "hardware";
  s.header.hardware = a_setting();
  HardwareRun hr = simulate_hardware(s);
  REQUIRE(hr.result.ok);
  const Trace& t = hr.result.trace;
  const auto e = exposed_comm(t);
  // Generated schedules put their sends and receives on the compute stream: each is exposed whole.
  for (int rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    CHECK(e[rank] == comm_intervals(t.ranks[rank]));
    CHECK_FALSE(e[rank].empty());
    CHECK(hr.report->ranks[rank].exposed_comm_s == to_seconds(total_length(e[rank])));
  }
  const double width = 2000;
  const std::string svg = visualize::timeline_svg(t, fixed_scale(width));
  const double pps = width / to_seconds(t.makespan());
  std::vector<std::pair<double, double>> want;
  std::size_t titled = 0;
  for (int rank = 0; rank < 4; ++rank)
    for (const auto& st : visualize::exposed_strips(e[rank], pps)) {
      want.emplace_back(100 + to_seconds(st.start) * pps, std::max(to_seconds(st.end - st.start) * pps, 1.0));
      titled += count(svg, visualize::exposed_strip_title(rank, st) + "</title>") == 1;
    }
  const auto got = strips_in(svg);
  REQUIRE(got.size() == want.size());
  CHECK(titled == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].first == doctest::Approx(want[i].first).epsilon(0.06 / want[i].first));
    CHECK(got[i].second == doctest::Approx(want[i].second).epsilon(0.1 / want[i].second));
  }
  for (int rank = 0; rank < 4; ++rank)
    CHECK(count(svg, ">exposed " + visualize::time_text(total_length(e[rank]), true) + "</text>") >= 1);
}

TEST_CASE("perfetto trace json: an exposed comm thread per rank with a slice per exposed interval") {
  using nlohmann::json;
  const Trace t = three_ranks("hardware");
  const json doc = json::parse(visualize::perfetto_trace_json(t));
  std::map<long long, long long> exposed_tid;  // pid -> tid of its "exposed comm" thread
  std::set<long long> tids;
  std::map<long long, std::vector<std::pair<double, double>>> slices;  // pid -> (ts, dur)
  for (const auto& ev : doc.at("traceEvents")) {
    if (ev.at("ph") == "M" && ev.at("name") == "thread_name") {
      CHECK(tids.insert(ev.at("tid").get<long long>()).second);  // unique over the trace
      if (ev.at("args").at("name") == "exposed comm") exposed_tid[ev.at("pid")] = ev.at("tid");
    }
    if (ev.at("ph") == "X" && ev.at("cat") == "exposed-comm") {
      CHECK(ev.at("name") == "exposed comm");
      CHECK(ev.at("tid") == exposed_tid.at(ev.at("pid")));
      slices[ev.at("pid")].emplace_back(ev.at("ts").get<double>(), ev.at("dur").get<double>());
    }
  }
  CHECK(exposed_tid.size() == 3);
  CHECK(slices.count(1) == 0);  // rank 0: hidden
  CHECK(slices.at(2) == std::vector<std::pair<double, double>>{{10e6, 4e6}});
  CHECK(slices.at(3) == std::vector<std::pair<double, double>>{{4e6, 8e6}, {20e6, 5e6}});

  // Not under the puzzle model.
  const std::string p = visualize::perfetto_trace_json(three_ranks("puzzle"));
  CHECK(count(p, "exposed") == 0);
}
