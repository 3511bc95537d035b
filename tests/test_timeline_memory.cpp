// Timeline SVG memory lanes (issue 10 §4c): lanes start at t=0, the peak is marked where it is held longest,
// and above a threshold of rows memory is drawn as heatmap strips.
#include <doctest/doctest.h>

#include <string>

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
