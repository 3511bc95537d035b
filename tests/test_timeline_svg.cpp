// Timeline SVG (visualize/timeline_svg.h): structure, labels, tooltips, peak and target markers, escaping,
// determinism, summarised rows for many ranks, and size/speed on long runs.
#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "text_helpers.h"
#include "puzzles/runner.h"
#include "sim/world.h"
#include "visualize/palette.h"
#include "visualize/timeline_svg.h"

using namespace trainsim;
using trainsim::visualize::TimelineOptions;
using trainsim::visualize::timeline_svg;

using trainsim::testing::count;

namespace {

/// Checks that the document is one <svg> element whose tags nest and close, that attribute values are quoted,
/// and that every '&' starts an entity. Returns "" when fine, else what is wrong.
std::string check_well_formed(std::string_view s) {
  std::vector<std::string> stack;
  std::size_t i = 0;
  bool seen_root = false;
  while (i < s.size()) {
    if (s[i] == '&') {
      std::size_t semi = s.find(';', i);
      std::string_view ent = s.substr(i, semi == std::string_view::npos ? 0 : semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;")
        return fmt::format("bad entity at {}", i);
      i = semi + 1;
      continue;
    }
    if (s[i] == '>') return fmt::format("stray '>' at {}", i);
    if (s[i] != '<') {
      ++i;
      continue;
    }
    if (s.substr(i, 2) == "<?") {
      std::size_t e = s.find("?>", i);
      if (e == std::string_view::npos || i != 0) return "bad processing instruction";
      i = e + 2;
      continue;
    }
    std::size_t e = i + 1;
    bool in_quote = false;
    for (; e < s.size(); ++e) {
      if (s[e] == '"') in_quote = !in_quote;
      else if (!in_quote && s[e] == '>') break;
      else if (s[e] == '<') return fmt::format("'<' inside a tag at {}", e);
    }
    if (e >= s.size()) return fmt::format("unterminated tag at {}", i);
    std::string_view tag = s.substr(i + 1, e - i - 1);
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      std::string name(tag.substr(1));
      if (stack.empty() || stack.back() != name)
        return fmt::format("</{}> closes <{}>", name, stack.empty() ? std::string("nothing") : stack.back());
      stack.pop_back();
    } else {
      bool self_closing = tag.back() == '/';
      std::string name(tag.substr(0, tag.find_first_of(" \n/")));
      if (stack.empty()) {
        if (seen_root) return "content after the root element";
        if (name != "svg") return "root element is not <svg>";
        seen_root = true;
      }
      if (!self_closing) stack.push_back(name);
    }
    i = e + 1;
  }
  if (!seen_root) return "no <svg> element";
  if (!stack.empty()) return fmt::format("<{}> never closed", stack.back());
  return "";
}

OpRun run(OpKind kind, int rank, int layer, IdSet batches, double start, double end, double memory) {
  OpRun r;
  r.op.kind = kind;
  r.op.rank = rank;
  r.op.layer = layer;
  r.op.batches = std::move(batches);
  r.start = seconds(start);
  r.end = seconds(end);
  r.memory = memory;
  return r;
}

/// Two ranks, every drawable kind, plus load and free which are not drawn.
Trace hand_trace() {
  Trace t;
  t.world_size = 2;
  t.layers = 2;
  t.batches = 4;
  t.cost_model = "handmade";
  t.memory_unit = "MB";
  t.ranks.resize(2);
  auto& r0 = t.ranks[0];
  r0.push_back(run(OpKind::Load, 0, 0, {}, 0, 0, 0));
  r0.push_back(run(OpKind::Forward, 0, 0, IdSet::range(0, 4), 0, 4, 10));
  r0.push_back(run(OpKind::Loss, 0, 2, IdSet::range(0, 4), 4, 4, 20));
  r0.push_back(run(OpKind::Backward, 0, 1, IdSet::range(0, 4), 4, 8, 30));
  OpRun send = run(OpKind::Send, 0, -1, {}, 8, 8.2, 25);
  send.op.peer = 1;
  send.op.where = "file.cpp:42";
  r0.push_back(send);
  r0.push_back(run(OpKind::Free, 0, 1, {}, 8.2, 8.2, 25));
  r0.push_back(run(OpKind::Update, 0, 0, {}, 8.2, 8.7, 24));
  auto& r1 = t.ranks[1];
  r1.push_back(run(OpKind::AllGather, 1, 1, {}, 0, 0.3, 5));
  OpRun recv = run(OpKind::Recv, 1, -1, {}, 0.3, 8.2, 6);
  recv.op.peer = 0;
  r1.push_back(recv);
  r1.push_back(run(OpKind::BackwardInput, 1, 1, IdSet{1, 2}, 8.2, 9.2, 12));
  r1.push_back(run(OpKind::BackwardWeight, 1, 1, IdSet{1, 2}, 9.2, 10.2, 11));
  r1.push_back(run(OpKind::ReduceScatter, 1, 1, {}, 10.2, 10.5, 8));
  return t;
}

std::size_t timed_ops(const Trace& t) {
  std::size_t n = 0;
  for (const auto& rank : t.ranks)
    for (const auto& r : rank) n += is_timed(r.op.kind);
  return n;
}

/// `ranks` ranks of a repeating forward / send / backward / all-reduce / update pattern, `ops` timed ops each.
Trace synthetic(int ranks, int ops) {
  Trace t;
  t.world_size = ranks;
  t.layers = 8;
  t.batches = 16;
  t.cost_model = "synthetic";
  t.memory_unit = "bytes";
  t.ranks.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    double clock = 0.1 * (r % 8), mem = 1000 + r;
    for (int i = 0; i < ops; ++i) {
      int phase = i % 5, layer = (i / 5 + r) % 8;
      OpKind kind = phase == 0 ? OpKind::Forward
                    : phase == 1 ? OpKind::Send
                    : phase == 2 ? OpKind::Backward
                    : phase == 3 ? OpKind::AllReduce
                                 : OpKind::Update;
      double d = phase == 0 || phase == 2 ? 1.0 : phase == 4 ? 0.5 : 0.2;
      OpRun o = run(kind, r, layer, phase == 0 || phase == 2 ? IdSet::range(i % 4, i % 4 + 2) : IdSet{}, clock,
                    clock + d, mem);
      if (kind == OpKind::Send) o.op.peer = (r + 1) % ranks;
      t.ranks[r].push_back(o);
      clock += d + (i % 7 == 0 ? 0.3 : 0);
      mem += phase == 0 ? 300 : phase == 2 ? -250 : 0;
    }
  }
  return t;
}

TimelineOptions options(std::string title, int max_detailed_ranks = 64) {
  TimelineOptions opt;
  opt.title = std::move(title);
  opt.max_detailed_ranks = max_detailed_ranks;
  return opt;
}

std::string peak_label(const Trace& t) {
  MemoryPeak p = t.peak();
  return fmt::format("peak {} at {}", format_memory(p.memory), format_time(p.time));
}

}  // namespace

TEST_CASE("timeline svg: hand-built trace shows rows, boxes, tooltips and the peak") {
  Trace t = hand_trace();
  TimelineOptions opt;
  opt.title = "hand";
  std::string svg = timeline_svg(t, opt);
  INFO(svg.substr(0, 400));

  CHECK(check_well_formed(svg) == "");
  CHECK(svg.find("xmlns=\"http://www.w3.org/2000/svg\"") != std::string::npos);
  CHECK(svg.find("viewBox=\"0 0 ") != std::string::npos);
  CHECK(svg.find("font-family=\"sans-serif\"") != std::string::npos);
  CHECK(svg.find("fill=\"#ffffff\"") != std::string::npos);
  // Heading and summary.
  CHECK(svg.find(">hand</text>") != std::string::npos);
  CHECK(svg.find("Timesteps 10.2") != std::string::npos);
  CHECK(svg.find("makespan 10.5") != std::string::npos);
  CHECK(svg.find("peak memory 30 MB on rank 0 at t=4") != std::string::npos);
  CHECK(svg.find("cost model handmade, memory in MB") != std::string::npos);
  // One row label and one memory lane per rank.
  CHECK(count(svg, "class=\"row-label\"") == 2);
  CHECK(svg.find(">rank 0</text>") != std::string::npos);
  CHECK(svg.find(">rank 1</text>") != std::string::npos);
  CHECK(count(svg, "class=\"lane-label\"") == 2);
  CHECK(count(svg, "<path d=") == 2 + 1);  // two lanes and the legend's memory swatch
  // A tooltip per timed op (load and free are not drawn).
  CHECK(timed_ops(t) == 10);
  // and the peak marker's, and one per exposed-communication strip (rank 0's send; rank 1's all-gather and
  // receive, back to back, and its reduce-scatter)
  CHECK(count(svg, "class=\"exposed\"") == 3);
  CHECK(count(svg, "<title>") == timed_ops(t) + 1 + 3);
  CHECK(svg.find("rank 0: load") == std::string::npos);
  CHECK(svg.find("rank 0: free") == std::string::npos);
  CHECK(svg.find("<title>rank 0: forward layer 0 batches {0-3}\nstart 0, end 4\nmemory at start 10 MB</title>") !=
        std::string::npos);
  CHECK(svg.find("rank 0: send to rank 1\nstart 8, end 8.2\nmemory at start 25 MB\nfile.cpp:42</title>") !=
        std::string::npos);
  // Every label names its layer; batch numbers inside forward and backward, I/W halves, collective and update.
  CHECK(count(svg, ">L0 0 1 2 3</text>") == 1);
  CHECK(count(svg, ">L1 0 1 2 3</text>") == 1);
  CHECK(svg.find(">L1 1 2 I</text>") != std::string::npos);
  CHECK(svg.find(">L1 1 2 W</text>") != std::string::npos);
  CHECK(svg.find(">AG</text>") != std::string::npos);  // 0.3 s: too narrow for "L1 AG"
  CHECK(svg.find(">RS</text>") != std::string::npos);
  CHECK(svg.find(">L0 U</text>") != std::string::npos);
  // Collectives in their own colours (not the layer's at half opacity), backward-weight dashed, loss a marker.
  CHECK(count(svg, "fill-opacity=\"0.5\"><title>") == 0);
  CHECK(svg.find(fmt::format("fill=\"{}\"><title>rank 1: all-gather", visualize::kAllGatherColour)) != std::string::npos);
  CHECK(svg.find(fmt::format("fill=\"{}\"><title>rank 1: reduce-scatter", visualize::kReduceScatterColour)) !=
        std::string::npos);
  // The legend explains the labels.
  CHECK(svg.find(">labels: L2 = layer 2, then a forward&apos;s or backward&apos;s batches") != std::string::npos);
  CHECK(count(svg, "stroke-dasharray=\"3,2\"") == 1);
  CHECK(svg.find("width=\"2.4\"") != std::string::npos);
  // Forward in the layer colour, backward lighter, update yellow, pass grey.
  CHECK(svg.find(fmt::format("fill=\"{}\"><title>rank 0: forward", visualize::layer_colour(0, 2))) != std::string::npos);
  CHECK(svg.find(fmt::format("fill=\"{}\"><title>rank 0: backward", visualize::backward_colour(1, 2))) !=
        std::string::npos);
  CHECK(svg.find(fmt::format("fill=\"{}\"><title>rank 0: update", visualize::kUpdateColour)) != std::string::npos);
  CHECK(svg.find(fmt::format("fill=\"{}\"><title>rank 1: recv", visualize::kPassColour)) != std::string::npos);
  // The peak.
  CHECK(peak_label(t) == "peak 30 at 4");
  CHECK(count(svg, ">peak 30 at 4</text>") == 1);
  // No targets given: none drawn.
  CHECK(svg.find("target") == std::string::npos);
  // Legend.
  for (const char* entry : {"forward, layers 0 to 1", ">backward<", "backward input (I)", "backward weight (W)",
                            ">update<", "all-reduce (AR)", "send/recv", ">loss<", ">memory<", ">peak memory<"})
    CHECK_MESSAGE(svg.find(entry) != std::string::npos, entry);
}

TEST_CASE("timeline svg: targets are drawn only when given") {
  Trace t = hand_trace();
  TimelineOptions opt;
  std::string plain = timeline_svg(t, opt);
  CHECK(plain.find("target") == std::string::npos);

  opt.target_time = 9;
  std::string with_time = timeline_svg(t, opt);
  CHECK(check_well_formed(with_time) == "");
  CHECK(count(with_time, "class=\"target-time\"") == 1);
  CHECK(with_time.find(">target 9</text>") != std::string::npos);
  CHECK(count(with_time, "class=\"target-label\"") == 0);

  opt.target_time.reset();
  opt.target_memory = 40;
  std::string with_mem = timeline_svg(t, opt);
  CHECK(check_well_formed(with_mem) == "");
  CHECK(count(with_mem, "class=\"target-time\"") == 0);
  CHECK(count(with_mem, "class=\"target-label\"") == 2);  // one per lane
  // The lanes scale to the target when it is above the peak.
  CHECK(with_mem.find("each lane from 0 to 40") != std::string::npos);
  CHECK(plain.find("each lane from 0 to 30") != std::string::npos);

  // A target time past the end stretches the axis.
  opt.target_time = 40;
  std::string late = timeline_svg(t, opt);
  CHECK(late.find(">40</text>") != std::string::npos);
  CHECK(plain.find(">40</text>") == std::string::npos);
}

TEST_CASE("timeline svg: text is escaped") {
  Trace t = hand_trace();
  t.ranks[0][1].op.where = "a<b>&\"c\"";
  t.memory_unit = "<u>";
  TimelineOptions opt;
  opt.title = "pipeline <&> \"quoted\" 'x'";
  std::string svg = timeline_svg(t, opt);
  CHECK(check_well_formed(svg) == "");
  CHECK(svg.find("pipeline &lt;&amp;&gt; &quot;quoted&quot; &apos;x&apos;") != std::string::npos);
  CHECK(svg.find("<&>") == std::string::npos);
  CHECK(svg.find("a&lt;b&gt;&amp;&quot;c&quot;") != std::string::npos);
  CHECK(svg.find("<u>") == std::string::npos);
  CHECK(svg.find("&lt;u&gt;") != std::string::npos);
}

TEST_CASE("timeline svg: output is deterministic") {
  Trace t = hand_trace();
  TimelineOptions opt;
  opt.title = "same";
  opt.target_time = 9.5;
  opt.target_memory = 35;
  CHECK(timeline_svg(t, opt) == timeline_svg(t, opt));
  Trace big = synthetic(100, 50);
  CHECK(timeline_svg(big, opt) == timeline_svg(big, opt));
  // And different inputs give different output.
  Trace other = hand_trace();
  other.ranks[0][1].end = seconds(4.5);
  CHECK(timeline_svg(other, opt) != timeline_svg(t, opt));
}

TEST_CASE("timeline svg: an empty trace gives a small valid svg saying no ops") {
  Trace empty;
  std::string svg = timeline_svg(empty, options("nothing"));
  CHECK(check_well_formed(svg) == "");
  CHECK(svg.find("no ops") != std::string::npos);
  CHECK(svg.find(">nothing</text>") != std::string::npos);
  CHECK(svg.size() < 1000);

  Trace only_loads;
  only_loads.ranks.resize(3);
  only_loads.ranks[1].push_back(run(OpKind::Load, 1, 0, {}, 0, 0, 5));
  std::string svg2 = timeline_svg(only_loads);
  CHECK(check_well_formed(svg2) == "");
  CHECK(svg2.find("no ops") != std::string::npos);
  CHECK(svg2.find("<title>") == std::string::npos);
}

TEST_CASE("timeline svg: narrow boxes shorten or drop their labels, sub-pixel ops are merged") {
  Trace t;
  t.layers = 1;
  t.batches = 8;
  t.ranks.resize(1);
  // 100 s on at most 2400 px: 24 px per second.
  t.ranks[0].push_back(run(OpKind::Forward, 0, 0, IdSet::range(0, 8), 0, 1, 1));
  t.ranks[0].push_back(run(OpKind::Forward, 0, 0, IdSet::range(0, 8), 1, 1.1, 1));
  t.ranks[0].push_back(run(OpKind::Forward, 0, 0, IdSet::range(0, 8), 10, 20, 1));
  t.ranks[0].push_back(run(OpKind::Backward, 0, 0, IdSet::range(0, 8), 99, 100, 1));
  for (int i = 0; i < 10; ++i)  // 10 ops of 0.01 s (0.24 px) back to back
    t.ranks[0].push_back(run(OpKind::Send, 0, -1, {}, 50 + 0.01 * i, 50 + 0.01 * (i + 1), 2));
  std::string svg = timeline_svg(t);
  CHECK(check_well_formed(svg) == "");
  CHECK(count(svg, ">L0 0 1 2 3 4 5 6 7</text>") == 1);    // the 10 s box (240 px)
  CHECK(count(svg, ">0-7</text>") == 2);                   // the 1 s boxes (24 px) are shortened
  CHECK(count(svg, "<title>") == 4 + 1 + 1 + 1);  // the ten tiny sends are one box; the peak; their exposure
  CHECK(svg.find("10 ops from 50 to 50.1, too short to draw one by one: 10 send") != std::string::npos);
}

TEST_CASE("timeline svg: puzzle runs") {
  for (const char* name : {"basic", "gpipe", "pipeline_fsdp"}) {
    CAPTURE(name);
    const puzzles::Puzzle* p = puzzles::find_puzzle(name);
    REQUIRE(p != nullptr);
    puzzles::PuzzleResult r = puzzles::run_puzzle(*p);
    REQUIRE(r.correct);
    const Trace& t = r.trace;
    TimelineOptions opt;
    opt.title = fmt::format("{} - {}", p->name, p->title);
    opt.target_time = p->target_time;
    opt.target_memory = p->target_memory;
    std::string svg = timeline_svg(t, opt);
    CHECK(check_well_formed(svg) == "");
    CHECK(count(svg, "class=\"row-label\"") == static_cast<std::size_t>(t.world_size));
    for (int rank = 0; rank < t.world_size; ++rank)
      CHECK(count(svg, fmt::format(">rank {}</text>", rank)) == 1);
    CHECK(count(svg, "<title>") == timed_ops(t) + 1);  // and the peak marker's
    CHECK(count(svg, fmt::format(">{}</text>", peak_label(t))) == 1);
    CHECK(svg.find(fmt::format("Timesteps {}", format_time(t.timesteps()))) != std::string::npos);
    CHECK(svg.find("cost model puzzle, memory in units") != std::string::npos);
    CHECK(count(svg, "class=\"target-time\"") == 1);
    CHECK(count(svg, "class=\"target-label\"") == static_cast<std::size_t>(t.world_size));
    // Batch numbers of the first forward on rank 0.
    for (const auto& op : t.ranks[0])
      if (op.op.kind == OpKind::Forward) {
        CHECK(svg.find(fmt::format(">L{} {}</text>", op.op.layer, op.op.batches.spaced())) != std::string::npos);
        break;
      }
  }
  // Puzzle 0 runs all four batches at once.
  std::string basic = timeline_svg(puzzles::run_puzzle(*puzzles::find_puzzle("basic")).trace);
  CHECK(basic.find(">L0 0 1 2 3</text>") != std::string::npos);
}

TEST_CASE("timeline svg: more ranks than max_detailed_ranks are summarised") {
  Trace t = synthetic(100, 40);
  std::string svg = timeline_svg(t, options("hundred"));
  CHECK(check_well_formed(svg) == "");
  CHECK(svg.find(">rank 99<") == std::string::npos);
  CHECK(svg.find(">rank 0<") == std::string::npos);
  CHECK(svg.find(">ranks 0-1</text>") != std::string::npos);
  CHECK(svg.find(">ranks 98-99</text>") != std::string::npos);
  CHECK(count(svg, "class=\"row-label\"") == 50);
  CHECK(count(svg, "class=\"lane-label\"") == 50);
  CHECK(svg.find("Summarised: 100 ranks in 50 rows of 2") != std::string::npos);
  // The peak is still marked, naming its rank.
  MemoryPeak p = t.peak();
  CHECK(svg.find(fmt::format(">peak {} at ", format_memory(p.memory))) != std::string::npos);
  CHECK(svg.find(fmt::format(" (rank {})</text>", p.rank)) != std::string::npos);
  // No per-op boxes: a tooltip per row and per (op kind, opacity) drawn in it, none naming an op.
  CHECK(count(svg, "<title>") <= 50 * (1 + 5 * 10));
  CHECK(svg.find("<title>ranks 0-1: forward; height = its share of the row&apos;s rank-time in each bin") !=
        std::string::npos);
  CHECK(svg.find(": forward layer") == std::string::npos);

  // The threshold is an option: 16 ranks with max 8 detailed rows give 8 rows of 2.
  Trace sixteen = synthetic(16, 20);
  std::string s16 = timeline_svg(sixteen, options("", 8));
  CHECK(count(s16, "class=\"row-label\"") == 8);
  CHECK(s16.find(">ranks 14-15</text>") != std::string::npos);
  std::string d16 = timeline_svg(sixteen);
  CHECK(count(d16, "class=\"row-label\"") == 16);
  // and the peak marker's, and each exposed-communication strip's (every send and all-reduce: one stream)
  CHECK(count(d16, "class=\"exposed\"") == 16 * 8);
  CHECK(count(d16, "<title>") == timed_ops(sixteen) + 1 + 16 * 8);

  // 129 ranks: rows of 3, the last one short.
  std::string s129 = timeline_svg(synthetic(129, 10));
  CHECK(count(s129, "class=\"row-label\"") == 43);
  CHECK(s129.find(">ranks 126-128</text>") != std::string::npos);
}

// Speed is measured in bench/ (bench/README.md), not here: this checks size and shape only.
TEST_CASE("timeline svg: long runs stay of sensible size") {
  Trace t = synthetic(64, 1000);
  TimelineOptions opt = options("long");
  opt.target_time = 500;
  opt.target_memory = 200000;
  std::string svg = timeline_svg(t, opt);
  // About 220 bytes per op, and 160 per exposed-communication strip (every send and all-reduce here: 40% of
  // the ops, on one stream).
  const std::size_t strips = count(svg, "class=\"exposed\"");
  CHECK(strips == 64 * 400);
  CHECK(svg.size() < 64 * 1000 * 220 + strips * 160);
  CHECK(check_well_formed(svg) == "");
  CHECK(count(svg, "class=\"row-label\"") == 64);
  // Width capped: the time area is at most 2400 px.
  std::size_t w = svg.find("width=\"");
  REQUIRE(w != std::string::npos);
  CHECK(std::stod(svg.substr(w + 7, 8)) <= 2400 + 300);

  Trace wide = synthetic(200, 1000);
  std::string s200 = timeline_svg(wide);
  CHECK(s200.size() < 2'000'000);
  CHECK(check_well_formed(s200) == "");
}

TEST_CASE("timeline svg: ops on several streams of a rank share its row without overlapping") {
  Trace t;
  t.layers = 1;
  t.batches = 1;
  t.ranks.resize(1);
  t.ranks[0].push_back(run(OpKind::Forward, 0, 0, IdSet{0}, 0, 2, 1));
  OpRun ag = run(OpKind::AllGather, 0, 0, {}, 0.5, 1.5, 2);
  ag.op.stream = 1;
  t.ranks[0].push_back(ag);
  std::string one_stream = timeline_svg(hand_trace());
  std::string svg = timeline_svg(t);
  CHECK(check_well_formed(svg) == "");
  CHECK(count(svg, "<title>") == 2 + 1);  // two ops and the peak marker
  // Row of 34 px: one stream gets 30 px boxes; two streams get two of 14.5 px, one under the other.
  CHECK(one_stream.find("height=\"30.0\" fill=") != std::string::npos);
  CHECK(count(svg, "height=\"14.5\" fill=") == 2);
  CHECK(svg.find("height=\"30.0\" fill=") == std::string::npos);
}
