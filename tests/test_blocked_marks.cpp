// Issue 18: a failed run's timeline marks only the ranks (and streams) that really wait, says whom and what
// they wait for, and never prints "blocked" over an op. Puzzle runs (the World) and schedules (the stream
// engine).
#include <doctest/doctest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "puzzles/runner.h"
#include "puzzles/timeline_options.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"
#include "text_helpers.h"
#include "visualize/timeline_svg.h"

using namespace trainsim;
using namespace trainsim::puzzles;
using namespace trainsim::testing;
using trainsim::visualize::BlockedMark;
using trainsim::visualize::TimelineOptions;
using trainsim::visualize::timeline_svg;

namespace {

const Puzzle& ddp_puzzle() { return *find_puzzle("ddp"); }

// DDP (puzzle 2, 4 ranks) in which rank 0 runs one forward more than the others first, so that it arrives last
// at the all-reduce of layer 0. With `fail_before`, rank 0 then calls a different collective, an error, instead
// of joining the all-reduce: ranks 1-3 really wait there for it. Otherwise rank 0 joins, which completes the call, and
// fails right after: ranks 1-3 were woken and wait for nothing when the run stops.
Task ddp_rank0_fails(Model& model, bool fail_before) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int L = model.layers();
  activations[0] = model.get_activation({model.rank()});
  for (int l = 0; l < L; ++l) std::tie(weights[l], opt_states[l]) = model.load_weights(l);
  if (model.rank() == 0) activations[1] = model.forward(0, activations[0], weights[0]);  // one step late
  for (int l = 0; l < L; ++l) activations[l + 1] = model.forward(l, activations[l], weights[l]);
  grad_activations[L] = model.loss(activations[L]);
  activations.erase(L);
  for (int l = L - 1; l >= 0; --l) {
    std::tie(grad_weights[l], grad_activations[l]) =
        model.backward(l, activations[l], grad_activations[l + 1], weights[l]);
    grad_activations.erase(l + 1);
    activations.erase(l);
  }
  // Rank 0 calls another collective than the others' (layer 1 for layer 0): it fails as it arrives, at its own
  // time (after the co_await's wait until then), when ranks 1-3 already wait.
  if (model.rank() == 0 && fail_before) grad_weights[1] = co_await model.allreduce(grad_weights[1], 1);
  grad_weights[0] = co_await model.allreduce(grad_weights[0], 0);
  if (model.rank() == 0) activations[1] = model.forward(0, activations[0], weights[0]);  // erased: the error
  for (int l = 1; l < L; ++l) grad_weights[l] = co_await model.allreduce(grad_weights[l], l);
}
Task fails_after_allreduce(Model& model) { return ddp_rank0_fails(model, false); }
Task fails_before_allreduce(Model& model) { return ddp_rank0_fails(model, true); }

// The op boxes of the SVG (x, y, width), and the blocked marks' bands (x, y, width).
struct Box {
  double x, y, w;
};
std::vector<Box> boxes(const std::string& svg, const std::string& after) {
  std::vector<Box> out;
  std::regex re("<rect x=\"([0-9.]+)\" y=\"([0-9.]+)\" width=\"([0-9.]+)\"[^>]*>" + after);
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back({std::stod((*it)[1]), std::stod((*it)[2]), std::stod((*it)[3])});
  return out;
}
std::vector<Box> op_boxes(const std::string& svg) { return boxes(svg, "<title>rank "); }
std::vector<Box> blocked_bands(const std::string& svg) {
  std::vector<Box> out;
  for (std::size_t at = svg.find("<g class=\"blocked\">"); at != std::string::npos;
       at = svg.find("<g class=\"blocked\">", at + 1)) {
    const std::size_t end = svg.find("</g>", at);
    for (const Box& b : boxes(svg.substr(at, end - at), "")) out.push_back(b);
  }
  return out;
}

}  // namespace

TEST_CASE("blocked marks: a rank woken by the all-reduce it waited in is not blocked when another rank fails") {
  PuzzleResult r = run_program(ddp_puzzle(), fails_after_allreduce);
  REQUIRE_FALSE(r.completed());
  CHECK(r.error.find("rank 0: ") == 0);
  // Every member arrived at the all-reduce of layer 0: it ran on all four ranks...
  int allreduces = 0;
  for (const auto& ops : r.trace.ranks)
    for (const OpRun& run : ops) allreduces += run.op.kind == OpKind::AllReduce;
  CHECK(allreduces == 4);
  // ... so nobody waits in it: no mark, no tooltip "waiting for ranks" with nobody listed.
  CHECK(r.blocked.empty());
  std::string svg = timeline_svg(r.trace, timeline_options(ddp_puzzle(), r, false));
  CHECK(count(svg, "<g class=\"blocked\">") == 0);
  CHECK(svg.find("waiting for ranks <") == std::string::npos);
}

TEST_CASE("blocked marks: ranks waiting in an all-reduce for a rank that failed name it and the collective") {
  PuzzleResult r = run_program(ddp_puzzle(), fails_before_allreduce);
  REQUIRE_FALSE(r.completed());
  REQUIRE(r.blocked.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(r.blocked[i].rank == i + 1);
    INFO(r.blocked[i].what);
    CHECK(r.blocked[i].what.find("all-reduce layer 0 (") == 0);
    CHECK(r.blocked[i].what.find("test_blocked_marks.cpp:") != std::string::npos);
    CHECK(r.blocked[i].what.find("collective #0 of group 0, waiting for rank 0 (rank 0 ended without it)") !=
          std::string::npos);
  }
  std::string svg = timeline_svg(r.trace, timeline_options(ddp_puzzle(), r, false));
  CHECK(count(svg, "<g class=\"blocked\">") == 3);
  // Nothing ran on a blocked rank after its mark begins: the band covers no op box (nor its label).
  const auto bands = blocked_bands(svg);
  REQUIRE(bands.size() == 3);
  for (const Box& b : bands)
    for (const Box& op : op_boxes(svg))
      if (op.y == b.y) CHECK(op.x + op.w <= b.x + 0.11);
}

TEST_CASE("blocked marks: the stream engine marks the blocked stream's sub-row and names what it waits for") {
  // Rank 0 posts a receive on stream 1 that rank 1 never sends, and computes on stream 0 meanwhile (its
  // backward never needs the message); rank 1 waits for a message rank 0 never sends. Rank 0's compute ran.
  const char* text = R"(trainsim-schedule 1
world_size 2
layers 2
microbatches 2
cost_model unit
p2p per-pair

rank 0
  load -> W0 O0 W1 O1
  load -> A0{0}
  recv from 1 stream 1 -> A1{1}
  forward L0 {0}
  forward L1 {0}
  loss {0}
  backward L1 {0}
  backward L0 {0}
  forward L1 {1}

rank 1
  load -> W0 O0 W1 O1
  load -> A0{1}
  forward L0 {1}
  recv from 0 -> A1{0}
)";
  Schedule s = parse_schedule(text, "blocked.sched");
  SimResult r = simulate(s);
  REQUIRE_FALSE(r.ok);
  // Rank 0: its receive on stream 1, and its last forward on stream 0, which needs the message.
  REQUIRE(r.blocked.size() == 3);
  CHECK(r.blocked[0].rank == 0);
  CHECK(r.blocked[0].stream == 1);
  CHECK(r.blocked[0].detail == "waiting for a message from rank 1");
  CHECK(r.blocked[1].rank == 0);
  CHECK(r.blocked[1].stream == 0);
  CHECK(r.blocked[1].since == seconds(4));  // when stream 0 reached it
  CHECK(r.blocked[1].op == "forward layer 1 batches {1} (blocked.sched:17)");
  CHECK(r.blocked[1].detail ==
        "waiting for recv from rank 1 (blocked.sched:11) (stream 1), which never ran: it is waiting for a message "
        "from rank 1");
  CHECK(r.blocked[2].rank == 1);
  CHECK(r.blocked[2].stream == 0);

  TimelineOptions o;
  o.error = r.error;
  for (const auto& b : r.blocked) o.blocked.push_back(BlockedMark{b.rank, b.since, b.what(), b.stream});
  std::string svg = timeline_svg(r.trace, o);
  CHECK(count(svg, "<g class=\"blocked\">") == 3);
  CHECK(svg.find("<title>rank 0 blocked from t=0 until the run stopped: recv from rank 1 (blocked.sched:11): waiting "
                 "for a message from rank 1</title>") != std::string::npos);
  // Each band lies on its own stream's sub-row, right of every op that ran there: no op or label under it.
  const auto bands = blocked_bands(svg);
  const auto ops = op_boxes(svg);
  REQUIRE(bands.size() == 3);
  CHECK(bands[0].y != bands[1].y);  // rank 0: the comm sub-row (stream 1) and the compute sub-row
  for (const Box& b : bands)
    for (const Box& op : ops)
      if (op.y == b.y) CHECK(op.x + op.w <= b.x + 0.11);
  // Rank 0's compute ran from t=0 to 4, left of its compute sub-row's mark (which starts at 4).
  int on_compute_row_before_4 = 0;
  for (const Box& op : ops)
    if (op.y == bands[1].y && op.x < bands[1].x) ++on_compute_row_before_4;
  CHECK(on_compute_row_before_4 == 4);  // two forwards, two backwards (the loss is a marker)
}
