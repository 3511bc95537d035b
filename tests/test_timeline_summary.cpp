// Timeline SVG (issue 10 §4a, §4b): summarised rows draw mixed bins as stacked shares in the detailed view's
// colours; collectives have their own colours and every box's label names its layer.
#include <doctest/doctest.h>

#include <string>

#include <fmt/format.h>

#include "sim/world.h"
#include "text_helpers.h"
#include "visualize/palette.h"
#include "visualize/timeline_svg.h"

using namespace trainsim;
using trainsim::testing::count;
using trainsim::visualize::timeline_svg;

namespace {

OpRun op_run(OpKind kind, int rank, int layer, double start, double end) {
  OpRun r;
  r.op.kind = kind;
  r.op.rank = rank;
  r.op.layer = layer;
  if (kind == OpKind::Forward || kind == OpKind::Backward) r.op.batches = IdSet::range(0, 2);
  r.start = seconds(start);
  r.end = seconds(end);
  r.memory = 1;
  return r;
}

}  // namespace

TEST_CASE("summarised rows stack forward and backward shares of a mixed bin, in the detailed colours") {
  // 100 ranks in rows of 2: in every row one rank runs forwards and the other backwards, all the time (a
  // steady state in which each bin is half forward, half backward).
  Trace t;
  t.world_size = 100;
  t.layers = 4;
  t.batches = 2;
  t.ranks.resize(100);
  for (int r = 0; r < 100; ++r)
    for (int i = 0; i < 20; ++i)
      t.ranks[r].push_back(op_run(r % 2 ? OpKind::Backward : OpKind::Forward, r, 1, i, i + 1));
  std::string svg = timeline_svg(t);
  REQUIRE(svg.find("Summarised: 100 ranks in 50 rows of 2") != std::string::npos);
  const std::string fwd = visualize::summary_forward_colour(4), bwd = visualize::summary_backward_colour(4);
  CHECK(fwd == visualize::layer_colour(0, 4));
  CHECK(bwd == visualize::backward_colour(0, 4));
  CHECK(fwd != visualize::kUpdateColour);
  CHECK(count(svg, fmt::format("class=\"share\" d=\"M")) == 100);  // both kinds in each of the 50 rows
  CHECK(count(svg, fmt::format("fill=\"{}\"><title>ranks", fwd)) == 50);
  CHECK(count(svg, fmt::format("fill=\"{}\"><title>ranks", bwd)) == 50);
  // Each share is half the row's height: rows are 13 px, 11 px inside, so 5.5 px each, stacked.
  std::size_t p = svg.find(fmt::format("class=\"share\" d=\"M"));
  std::string d = svg.substr(p, svg.find('"', p + 18) - p);
  CHECK(d.find("v5.5h") != std::string::npos);
  // The legend says what the stacks mean.
  CHECK(svg.find("each time bin stacks the shares of the row&apos;s rank-time") != std::string::npos);
}

TEST_CASE("collectives have their own colours, and their labels name the layer") {
  Trace t;
  t.world_size = 1;
  t.layers = 2;
  t.batches = 2;
  t.ranks.resize(1);
  t.ranks[0] = {op_run(OpKind::Forward, 0, 1, 0, 4), op_run(OpKind::AllReduce, 0, 1, 4, 8),
                op_run(OpKind::Update, 0, 1, 8, 12)};
  std::string svg = timeline_svg(t);
  CHECK(svg.find(">L1 0 1</text>") != std::string::npos);
  CHECK(svg.find(">L1 AR</text>") != std::string::npos);
  CHECK(svg.find(">L1 U</text>") != std::string::npos);
  CHECK(svg.find(fmt::format("fill=\"{}\"><title>rank 0: all-reduce", visualize::kAllReduceColour)) !=
        std::string::npos);
  // Not the layer's colour, and not half transparent.
  CHECK(std::string(visualize::kAllReduceColour) != visualize::layer_colour(1, 2));
  CHECK(std::string(visualize::kAllReduceColour) != visualize::backward_colour(1, 2));
  CHECK(svg.find("fill-opacity=\"0.5\"") == std::string::npos);
}
