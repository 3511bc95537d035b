// Tensor parallelism in the timeline and the Perfetto trace (issue 19, visuals): TP collectives are a category
// of their own in summarised rows (more than 64 ranks), and the TP communication a compute op runs inside
// itself under the hardware cost model (CostModel::inner_comm) is a magenta band in its box, a line of its
// tooltip, a heading line, TP collective time in summary rows, and a nested slice in the Perfetto trace.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "sim/world.h"
#include "text_helpers.h"
#include "visualize/palette.h"
#include "visualize/perfetto.h"
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

// A cost model whose compute ops run `inside` seconds of TP communication inside themselves (as the hardware
// model's inner_comm); nothing else of it is used by the drawings.
class InsideCost final : public CostModel {
 public:
  explicit InsideCost(double inside) : inside_(inside) {}
  std::string name() const override { return "inside"; }
  Time duration(const Op&, int) const override { return 0; }
  double memory(const Tensor&) const override { return 0; }
  std::string memory_unit() const override { return "bytes"; }
  Time inner_comm(const Op& op) const override { return is_compute(op.kind) ? seconds(inside_) : 0; }

 private:
  double inside_;
};

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

TEST_CASE("summarised rows count the TP communication inside compute ops as TP collective time") {
  Trace t = trace_of(100);
  for (int r = 0; r < 100; ++r) t.ranks[r] = {op_run(OpKind::Forward, r, 0, 4)};
  const InsideCost cost(1);  // the last second of each forward
  visualize::TimelineOptions o;
  o.cost = &cost;
  const std::string svg = visualize::timeline_svg(t, o);
  REQUIRE(has(svg, "Summarised: 100 ranks in 50 rows of 2"));
  const std::string tp = fmt::format("fill=\"{}\"><title>ranks ", visualize::kTpCollectiveColour);
  CHECK(count(svg, tp) == 50);
  // The whole row is TP communication in the op's last quarter: full height (11 px) from x = 126 + 900 * 3/4
  // (summary rows' labels take 110 px).
  const std::size_t p = svg.find(tp);
  const std::size_t d = svg.rfind("d=\"M", p);
  CHECK(svg.substr(d, p - d).find("M801.0,") != std::string::npos);
  CHECK(svg.substr(d, p - d).find("v11.0h") != std::string::npos);
  CHECK(has(svg, ">TP collective (over a TP group, and inside compute ops)</text>"));
  CHECK(has(svg, "TP communication inside compute ops"));
  // A cost model whose ops run no TP communication inside changes nothing.
  const InsideCost none(0);
  o.cost = &none;
  CHECK(visualize::timeline_svg(t, o) == visualize::timeline_svg(t));
}

TEST_CASE("the TP communication inside a compute op is a band in its box, its seconds in the tooltip and heading") {
  // Two ranks, a forward of 4 s each, 1 s of it TP communication (the hardware model's inner_comm).
  Trace t = trace_of(2);
  for (int r = 0; r < 2; ++r) t.ranks[r] = {op_run(OpKind::Forward, r, 0, 4), all_reduce(r, 4, 5, true)};
  const InsideCost cost(1);
  visualize::TimelineOptions o;
  o.cost = &cost;
  const std::string svg = visualize::timeline_svg(t, o);
  // Time area 900 px from x = 100 over 5 s: the box [100, 820]; the band its last quarter, 180 px, at its
  // bottom (sub-rows of 30 px: the band 10 px high, 2 px from the row's top plus 20).
  CHECK(count(svg, "<rect class=\"tp-inside\"") == 3);  // the two ops' bands and the legend's swatch
  CHECK(has(svg, "<rect class=\"tp-inside\" x=\"640.0\" y=\""));
  CHECK(has(svg, "width=\"180.0\" height=\"10.0\" fill=\"#c8379b\" stroke=\"none\" pointer-events=\"none\"/>"));
  // The forwards' tooltips say how long (the all-reduces, no compute, have no such line and no band).
  CHECK(count(svg, "memory at start 1 B\nTP communication inside: 1 s (25% of the op; magenta band)</title>") == 2);
  CHECK(count(svg, "TP communication inside: ") == 2);
  CHECK(has(svg, "TP communication inside compute ops (magenta band at the end of each op; exposed: the rank&apos;s "
                 "compute waits on it): mean 1 s per rank (20.0% of the step time), most 1 s on rank 0"));
  CHECK(has(svg, ">TP communication inside a compute op (band: its length is the time"));
  // Without the cost model, or with one without TP communication inside ops: as before, byte for byte.
  const std::string plain = visualize::timeline_svg(t);
  CHECK(!has(plain, "tp-inside"));
  CHECK(!has(plain, "TP communication inside"));
  const InsideCost none(0);
  o.cost = &none;
  CHECK(visualize::timeline_svg(t, o) == plain);
}

TEST_CASE("Perfetto: the TP communication inside a compute op is an arg and a nested slice at its end") {
  Trace t = trace_of(1);
  t.ranks[0] = {op_run(OpKind::Forward, 0, 0, 4), all_reduce(0, 4, 5, true)};
  const InsideCost cost(1);
  const std::string json = visualize::perfetto_trace_json(t, &cost);
  CHECK(has(json, "\"tp_comm_inside_us\":1000000"));
  CHECK(count(json, "\"tp_comm_inside_us\"") == 1);  // the forward's; the all-reduce has none
  CHECK(has(json, "{\"ph\":\"X\",\"name\":\"TP comm inside\",\"cat\":\"tp-collective\",\"pid\":1,\"tid\":1,"
                  "\"ts\":3000000,\"dur\":1000000}"));
  // Right after its op's event, so that it nests in it.
  CHECK(json.find("TP comm inside") > json.find("\"name\":\"forward L1\""));
  CHECK(json.find("TP comm inside") < json.find("\"name\":\"all-reduce L1\""));
  CHECK(nlohmann::json::parse(json)["traceEvents"].is_array());
  const std::string plain = visualize::perfetto_trace_json(t);
  CHECK(!has(plain, "TP comm inside"));
  const InsideCost none(0);
  CHECK(visualize::perfetto_trace_json(t, &none) == plain);
}

TEST_CASE("trainsim sim on the hardware model: the TP communication inside ops drawn adds up to the report's") {
  auto dir = fresh_dir("timeline-tp-band");
  const std::string sched = (dir / "x.sched").string(), svg = (dir / "x.svg").string(),
                    trace = (dir / "x.json").string();
  REQUIRE(run_trainsim("gen 3d --tp 2 --pp 2 --dp 2 --microbatches 4 -o " + sched).exit_code == 0);
  const std::string hw = " --model gpt2-124m --device h100-sxm --network nvlink8-ib400";
  CommandResult r = run_trainsim("sim " + sched + hw + " --json --svg " + svg + " --trace " + trace);
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  const auto report = nlohmann::json::parse(r.out);
  const double inside = report["tp_comm_inside_s"].get<double>();  // the mean over ranks
  REQUIRE(inside > 0);
  // The trace's nested slices: every compute op of the 8 ranks with its inner_comm; their sum over the ranks is
  // the report's mean times 8 (the report sums tp_comm_seconds in double, the trace rounds each op to 1 ns).
  const auto events = nlohmann::json::parse(slurp(trace))["traceEvents"];
  double sum_us = 0, args_us = 0;
  int slices = 0;
  for (const auto& e : events) {
    if (e.value("name", "") == "TP comm inside") sum_us += e["dur"].get<double>(), ++slices;
    if (e.contains("args") && e["args"].contains("tp_comm_inside_us")) args_us += e["args"]["tp_comm_inside_us"].get<double>();
  }
  CHECK(slices > 0);
  CHECK(std::abs(sum_us - inside * 8 * 1e6) <= 0.001 * slices);  // within 1 ns a slice
  CHECK(args_us == doctest::Approx(sum_us));
  const std::string drawn = slurp(svg);
  CHECK(has(drawn, "<rect class=\"tp-inside\""));
  CHECK(has(drawn, "TP communication inside compute ops"));
  CHECK(has(drawn, "\nTP communication inside: "));
  // The same schedule on the puzzle's unit model has no TP communication inside ops: nothing of it drawn.
  REQUIRE(run_trainsim("sim " + sched + " --svg " + svg + " --trace " + trace).exit_code == 0);
  CHECK(!has(slurp(svg), "class=\"tp-inside\""));
  CHECK(!has(slurp(trace), "TP comm inside"));
  std::filesystem::remove_all(dir);
}
