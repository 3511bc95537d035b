// Timeline SVG memory lanes (issue 10 §4c): lanes start at t=0, the peak is marked where it is held longest,
// and above a threshold of rows memory is drawn as heatmap strips.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/world.h"
#include "text_helpers.h"
#include "visualize/timeline_svg.h"

using namespace trainsim;
using trainsim::testing::count;
using trainsim::visualize::TimelineOptions;
using trainsim::visualize::timeline_svg;

namespace {

OpRun op_run(OpKind kind, int rank, int layer, double start, double end, double memory) {
  OpRun r;
  r.op.kind = kind;
  r.op.rank = rank;
  r.op.layer = layer;
  r.op.batches = IdSet::range(0, 1);
  r.start = seconds(start);
  r.end = seconds(end);
  r.memory = memory;
  return r;
}

/// One rank whose first op starts at t=2; memory 30 is first reached by a zero-time loss at t=3 (a spike), and
/// held again from t=6 to t=10.
Trace spike_trace() {
  Trace t;
  t.world_size = 1;
  t.layers = 2;
  t.batches = 1;
  t.memory_unit = "MB";
  t.ranks.resize(1);
  t.ranks[0] = {op_run(OpKind::Forward, 0, 0, 2, 3, 10), op_run(OpKind::Loss, 0, 2, 3, 3, 30),
                op_run(OpKind::Backward, 0, 1, 3, 6, 20), op_run(OpKind::Update, 0, 1, 6, 10, 30)};
  return t;
}

}  // namespace

TEST_CASE("memory lanes start at t=0, not at the rank's first op") {
  Trace t = spike_trace();
  std::string svg = timeline_svg(t);
  // The time area starts at x=100 (16 + the 84 px label column); the lane's path starts there.
  std::size_t g = svg.find("fill-opacity=\"0.45\" stroke=");
  REQUIRE(g != std::string::npos);
  std::size_t path = svg.find("<path d=\"M", g);
  CHECK(svg.substr(path, 16) == "<path d=\"M100.0,");
}

TEST_CASE("the peak is marked where it is held longest, and says when it was first reached") {
  Trace t = spike_trace();
  MemoryPeak p = t.peak();
  CHECK(p.time == seconds(3));  // the figure the reports print is unchanged
  std::string svg = timeline_svg(t);
  CHECK(svg.find(">peak 30 at 6-10 (first at 3)</text>") != std::string::npos);
  CHECK(svg.find("<title>peak memory 30 MB on rank 0, first at t=3; marked where it is held longest, t=6 to 10") !=
        std::string::npos);
  // The held span is drawn along the peak's level, from t=6 to t=10.
  std::size_t g = svg.find("<g class=\"peak\">");
  CHECK(svg.find("stroke-width=\"2\"/>", g) != std::string::npos);
  // A peak that is not a spike keeps the plain label.
  t.ranks[0][1].memory = 20;
  t.ranks[0][3].memory = 40;
  CHECK(timeline_svg(t).find(">peak 40 at 6</text>") != std::string::npos);
}

TEST_CASE("above memory_heatmap_above rows, memory lanes are heatmap strips") {
  Trace t;
  t.world_size = 40;
  t.layers = 2;
  t.batches = 1;
  t.memory_unit = "MB";
  t.ranks.resize(40);
  for (int r = 0; r < 40; ++r)
    t.ranks[r] = {op_run(OpKind::Forward, r, 0, 0, 1, 10 + r), op_run(OpKind::Backward, r, 0, 1, 2, 50)};
  std::string heat = timeline_svg(t);
  CHECK(count(heat, "<g class=\"mem-heat\"") == 40);
  CHECK(heat.find("as a heatmap: darker = more, full colour = 50") != std::string::npos);
  CHECK(heat.find("memory (heatmap: darker = more)") != std::string::npos);
  // The strongest cell is full opacity: the value at the scale.
  CHECK(heat.find("fill-opacity=\"1.0\"") != std::string::npos);
  TimelineOptions plots;
  plots.memory_heatmap_above = 64;
  std::string plot = timeline_svg(t, plots);
  CHECK(count(plot, "class=\"mem-heat\"") == 0);
  CHECK(plot.find("each lane from 0 to 50") != std::string::npos);
}

namespace {

// y of the first `attr="` after `from` in `svg`.
double attr_after(const std::string& svg, std::size_t from, const std::string& attr) {
  std::size_t at = svg.find(attr + "=\"", from);
  REQUIRE(at != std::string::npos);
  at += attr.size() + 2;
  return std::stod(svg.substr(at, svg.find('"', at) - at));
}

// The lane backgrounds' top edges, in row order (each lane is a rect filled #fafafa).
std::vector<double> lane_tops(const std::string& svg) {
  std::vector<double> tops;
  const std::string lane = "fill=\"#fafafa\"";
  for (std::size_t at = svg.find(lane); at != std::string::npos; at = svg.find(lane, at + 1)) {
    const std::size_t rect = svg.rfind("<rect ", at);
    tops.push_back(attr_after(svg, rect, "y"));
  }
  return tops;
}

}  // namespace

TEST_CASE("the peak's label sits in a band above its lane, never over the curve (issue 18)") {
  for (int peak_rank : {0, 2}) {
    CAPTURE(peak_rank);
    Trace t;
    t.world_size = 3;
    t.layers = 2;
    t.batches = 1;
    t.memory_unit = "MB";
    t.ranks.resize(3);
    for (int r = 0; r < 3; ++r)
      t.ranks[r] = {op_run(OpKind::Forward, r, 0, 0, 1, 10),
                    op_run(OpKind::Backward, r, 0, 1, 4, r == peak_rank ? 50 : 20)};
    const std::string svg = timeline_svg(t);
    const auto tops = lane_tops(svg);
    REQUIRE(tops.size() == 3);
    const std::size_t g = svg.find("<g class=\"peak\">");
    REQUIRE(g != std::string::npos);
    // The label's white backing and its text end at or above the top of the peak's lane...
    const std::size_t backing = svg.find("fill=\"#ffffff\"", g);
    const std::size_t rect = svg.rfind("<rect ", backing);
    const double y = attr_after(svg, rect, "y"), h = attr_after(svg, rect, "height");
    CHECK(y + h <= tops[peak_rank] + 1e-9);
    CHECK(attr_after(svg, svg.find("<text ", g), "y") <= tops[peak_rank]);
    // ... in room of its own: the gap above the peak's lane is wider than between the other lanes.
    if (peak_rank > 0) CHECK(tops[peak_rank] - tops[peak_rank - 1] > tops[1] - tops[0] + 10);
    else CHECK(tops[2] - tops[1] == doctest::Approx(tops[1] - tops[0]));
  }
}

TEST_CASE("real seconds and bytes are worded as such, puzzle steps and units keep Timesteps (issue 18)") {
  Trace t = spike_trace();
  t.cost_model = "measured (cpu)";
  t.memory_unit = "bytes";
  for (auto& r : t.ranks[0]) r.memory = r.memory / 10 * 31'836'176;  // the peak: 95,508,528 bytes (91.08 MiB)
  const std::string svg = timeline_svg(t);
  CHECK(svg.find("Timesteps") == std::string::npos);
  CHECK(svg.find(">step time 10 s  \u00b7  peak memory 91.1 MiB on rank 0 at 3 s (as an op started)  \u00b7  measured "
                 "(cpu)</text>") != std::string::npos);
  CHECK(svg.find("memory per rank: bytes allocated as each op started; each lane from 0 to 91.1 MiB") !=
        std::string::npos);
  CHECK(svg.find(">peak 91.1 MiB from 6 s to 10 s (first at 3 s)</text>") != std::string::npos);
  CHECK(svg.find(">time (s)</text>") != std::string::npos);
  CHECK(svg.find("95508528") == std::string::npos);
  t.cost_model = "hardware";
  CHECK(timeline_svg(t).find(">step time 10 s  \u00b7  peak memory 91.1 MiB on rank 0 at 3 s  \u00b7  cost model "
                             "hardware</text>") != std::string::npos);
  // The puzzle model: as before.
  t.cost_model = "puzzle";
  t.memory_unit = "units";
  CHECK(timeline_svg(t).find(">Timesteps 6  \u00b7  makespan 10  \u00b7  peak memory 95508528 units") !=
        std::string::npos);
}
