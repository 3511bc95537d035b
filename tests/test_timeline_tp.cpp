// Tensor parallelism in the timeline (issue 19, visuals): TP collectives are a category of their own in
// summarised rows (more than 64 ranks).
#include <doctest/doctest.h>

#include <string>

#include <fmt/format.h>

#include "cli_helpers.h"
#include "sim/world.h"
#include "text_helpers.h"
#include "visualize/palette.h"
#include "visualize/timeline_svg.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

OpRun op_run(OpKind kind, int rank, double start, double end) {
  OpRun r;
  r.op.kind = kind;
  r.op.rank = rank;
  r.op.layer = 1;
  if (kind == OpKind::Forward) r.op.batches = IdSet::range(0, 2);
  r.start = seconds(start);
  r.end = seconds(end);
  r.memory = 1;
  return r;
}

// A collective over a TP group (it reads a partial sum: sim/tp_ops.h) or a data-parallel one (a weight grad).
OpRun all_reduce(int rank, double start, double end, bool tp) {
  OpRun r = op_run(OpKind::AllReduce, rank, start, end);
  Tensor t;
  t.kind = tp ? TensorKind::Activation : TensorKind::WeightGrad;
  t.layer = 1;
  if (tp) t.partial = true, t.tp_size = 2, t.tp_slices = 1;
  r.op.reads.push_back(t);
  return r;
}

Trace trace_of(int ranks) {
  Trace t;
  t.world_size = ranks;
  t.layers = 4;
  t.batches = 2;
  t.cost_model = "hardware";
  t.memory_unit = "bytes";
  t.ranks.resize(ranks);
  return t;
}

}  // namespace

TEST_CASE("summarised rows stack TP collectives in their own colour, apart from the data-parallel collectives") {
  // 100 ranks in rows of 2: in each row one rank forwards then all-reduces over its TP group, the other
  // forwards then all-reduces a weight grad; in [1, 2) each row is half TP, half data-parallel collective.
  Trace t = trace_of(100);
  for (int r = 0; r < 100; ++r) t.ranks[r] = {op_run(OpKind::Forward, r, 0, 1), all_reduce(r, 1, 2, r % 2 == 0)};
  const std::string svg = visualize::timeline_svg(t);
  REQUIRE(has(svg, "Summarised: 100 ranks in 50 rows of 2"));
  CHECK(has(svg, "kind (forward, backward, update, collective, TP collective, send/recv)"));
  const std::string tp = fmt::format("fill=\"{}\"><title>ranks ", visualize::kTpCollectiveColour);
  CHECK(count(svg, tp) == 50);
  CHECK(count(svg, fmt::format("fill=\"{}\"><title>ranks ", visualize::kAllReduceColour)) == 50);
  CHECK(has(svg, "<title>ranks 0-1: TP collective; height = its share of the row&apos;s rank-time"));
  // Half the row's 11 px inside: 5.5 px each, the TP segment stacked on the data-parallel one.
  const std::size_t p = svg.find(tp);
  const std::size_t d = svg.rfind("d=\"M", p);
  CHECK(svg.substr(d, p - d).find("v5.5h") != std::string::npos);
  CHECK(has(svg, ">TP collective (over a TP group)</text>"));  // the legend entry
  // TP collectives that take no time (the unit cost model's collectives) stack nothing: no legend entry.
  for (int r = 0; r < 100; r += 2) t.ranks[r][1] = all_reduce(r, 1, 1, true);
  const std::string instant = visualize::timeline_svg(t);
  CHECK(!has(instant, "TP collective"));
  CHECK(!has(instant, visualize::kTpCollectiveColour));
  // Without TP: no TP category, no legend entry, and the heading as before.
  for (int r = 0; r < 100; ++r) t.ranks[r][1] = all_reduce(r, 1, 2, false);
  const std::string plain = visualize::timeline_svg(t);
  CHECK(!has(plain, "TP collective"));
  CHECK(has(plain, "kind (forward, backward, update, collective, send/recv)"));
  CHECK(!has(plain, visualize::kTpCollectiveColour));
}

