// Issue 18: one replay meets four memory figures (docs/executor.md §4, "Memory: which figure is which"). The
// figures the docs say are equal are equal, the inequality they state holds, and each is worded as what it is.
#include <doctest/doctest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "visualize/timeline_units.h"

using namespace trainsim::testing;
using trainsim::visualize::memory_text;

namespace {
std::string data() { return std::string(" --data ") + TRAINSIM_SOURCE_DIR + "/tests/data/corpus.txt"; }
}  // namespace

TEST_CASE("memory figures: the SVG names the allocator's peak the report prints, and its lanes never pass it") {
  auto dir = fresh_dir("memory-figures");
  auto at = [&](const char* n) { return (dir / n).string(); };
  REQUIRE(run_trainsim("gen 1f1b --stages 2 --microbatches 4 -o " + at("p.sched")).exit_code == 0);
  CommandResult r = run_trainsim("replay " + at("p.sched") + " --model tiny --steps 2 --json --svg " + at("m.svg") +
                                 " --trace " + at("m.json") + data());
  REQUIRE(r.exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(r.out);
  const auto peaks = j["peak_bytes"].get<std::vector<double>>();
  REQUIRE(peaks.size() == 2);
  const auto most = std::max_element(peaks.begin(), peaks.end());
  // "measured" (the report, --json's peak_bytes) and the SVG heading's allocator peak: the same number.
  const std::string svg = slurp(dir / "m.svg");
  CHECK(svg.find(fmt::format("the peak of the device allocator over the run, with the buffers ops free within "
                             "themselves: {} on rank {}",
                             memory_text(*most, "bytes"), most - peaks.begin())) != std::string::npos);
  // The lanes sample the allocator as each op starts: at most its peak, on every rank.
  nlohmann::json trace = nlohmann::json::parse(slurp(dir / "m.json"));
  std::vector<double> lane_peak(2, 0);
  for (const auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "C" && e.value("name", "") == "memory") {
      const int rank = e["pid"].get<int>() - 1;
      REQUIRE(rank >= 0);
      REQUIRE(rank < 2);
      lane_peak[rank] = std::max(lane_peak[rank], e["args"]["bytes"].get<double>());
    }
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(lane_peak[rank] > 0);
    CHECK(lane_peak[rank] <= peaks[rank]);
  }
  // The heading says what the lanes are, in MiB/KiB, and the step time in s, ms or µs; no puzzle "Timesteps".
  CHECK(svg.find("memory lanes: bytes allocated as each op started (where the simulator samples too)") !=
        std::string::npos);
  CHECK(svg.find("Timesteps") == std::string::npos);
  // (a measured step: under 1 ms on a fast idle machine it is written in µs)
  CHECK(std::regex_search(svg, std::regex(">step time [0-9.]+ (s|ms|µs)  ")));
  CHECK(svg.find(" bytes on rank") == std::string::npos);

  // The text report names both of its figures.
  CommandResult text = run_trainsim("replay " + at("p.sched") + " --model tiny --steps 1" + data());
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("memory per rank: measured = the device allocator's peak over the run") != std::string::npos);
  CHECK(std::regex_search(text.out, std::regex("\n  rank   1  measured [0-9.]+ MiB  schedule tensors [0-9.]+ MiB\n")));
}

TEST_CASE("memory figures: a calibrated device changes the hardware model's times, not its bytes") {
  // What `trainsim calibrate` writes: the device's efficiency table and dispatch time (docs/calibration.md).
  auto dir = fresh_dir("memory-figures-calibrated");
  const std::string sched = (dir / "1f1b.sched").string();
  REQUIRE(run_trainsim("gen 1f1b --stages 4 --microbatches 8 -o " + sched).exit_code == 0);
  const std::string args = "sim " + sched + " --model small --device cpu --network cpu --microbatch-size 8 --json";
  nlohmann::json preset = nlohmann::json::parse(run_trainsim(args).out);
  nlohmann::json fitted = nlohmann::json::parse(
      run_trainsim(args + " --set device.efficiency.forward=0.21 --set device.efficiency.backward_input=0.17 "
                          "--set device.efficiency.backward_weight=0.19 --set device.efficiency.dispatch_s=0.0004")
          .out);
  REQUIRE(preset["ok"] == true);
  REQUIRE(fitted["ok"] == true);
  CHECK(fitted["step_time_s"].get<double>() != preset["step_time_s"].get<double>());
  CHECK(fitted["peak_memory_bytes"] == preset["peak_memory_bytes"]);
  REQUIRE(preset["ranks"].size() == 4);
  for (std::size_t r = 0; r < 4; ++r)
    CHECK(fitted["ranks"][r]["peak_memory_bytes"] == preset["ranks"][r]["peak_memory_bytes"]);
}
