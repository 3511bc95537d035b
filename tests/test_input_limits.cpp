// Hardened input (issue 7 §3): numbers past the limits, huge declared sizes, overflowing time, inputs whose
// cost used to grow faster than their size. Each case was found by fuzzing or by hand; each used to crash,
// hang, eat memory or pass an invalid schedule.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "schedules/generators.h"
#include "schedules/limits.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"
#include "sim/world.h"
#include "visualize/timeline_svg.h"

using namespace trainsim;

namespace {

// Two ranks of data parallelism (puzzle costs); `{OP0}` is rank 0's forward line.
const char* kDdp = R"(trainsim-schedule 1
world_size 2
layers 1
microbatches 2
cost_model puzzle

rank 0
  load -> W0 O0 A0{0}
  {OP0}
  loss {0}
  backward L0 {0}
  all-reduce L0 : {AR0} -> dW0{0-1}
  update L0
rank 1
  load -> W0 O0 A0{1}
  forward L0 {1}
  loss {1}
  backward L0 {1}
  all-reduce L0 : dW0{1} -> dW0{0-1}
  update L0
)";

std::string ddp(const std::string& op0 = "forward L0 {0}", const std::string& ar0 = "dW0{0}") {
  std::string s = kDdp;
  s.replace(s.find("{OP0}"), 5, op0);
  s.replace(s.find("{AR0}"), 5, ar0);
  return s;
}

std::string parse_error(const std::string& text) {
  try {
    parse_schedule(text, "t.sched");
  } catch (const ParseError& e) {
    return e.what();
  }
  return "(parsed)";
}

std::string header(int world, int layers, int microbatches, const char* cost = "puzzle") {
  return fmt::format("trainsim-schedule 1\nworld_size {}\nlayers {}\nmicrobatches {}\ncost_model {}\n", world, layers,
                     microbatches, cost);
}

}  // namespace

TEST_CASE("numbers of 2^31 and more anywhere in a .sched are parse errors naming file:line:col, not aborts") {
  CHECK(parse_error(ddp()) == "(parsed)");
  CHECK(parse_error(ddp("forward L99999999999 {0}")) == "t.sched:9:11: 99999999999 is too large for a layer (at most 1048576)");
  CHECK(parse_error(ddp("forward L0 {99999999999}")) == "t.sched:9:14: batch 99999999999 is too large (at most 1048575)");
  CHECK(parse_error(ddp("forward L0 {0} : A0{0} W0[99999999999/2]")).starts_with("t.sched:9:26: shard 99999999999 is too large"));
  CHECK(parse_error(ddp("forward L0 {0} : A0{0} W0[0/99999999999]")).starts_with("t.sched:9:26: shard count 99999999999 is too large"));
  CHECK(parse_error(ddp("forward L0 {0} : A0{0} W0@99999999999")).starts_with("t.sched:9:26: expected a step (0 to 999999999)"));
  CHECK(parse_error(ddp("forward L0 {0} : A99999999999{0} W0")).starts_with("t.sched:9:20: layer 99999999999 is too large"));
  CHECK(parse_error(ddp("forward L0 {0} stream 99999999999")) ==
        "t.sched:9:25: 99999999999 is too large for a stream (at most 999999999)");
  CHECK(parse_error(ddp("forward L0 {0-99999999999999999999999}")).starts_with("t.sched:9:14: batch 99999999999999999999999 is too large"));
}

TEST_CASE("a batch id of 2147483647 no longer overflows into an empty set that passes validation") {
  // It was read as range(2^31 - 1, 2^31): empty, so the all-reduce below validated and the file exited 0.
  CHECK(parse_error(ddp("forward L0 {0}", "dW0{0,2147483647}")) == "t.sched:12:19: batch 2147483647 is too large (at most 1048575)");
}

TEST_CASE("the header's sizes are limited, and ranks cost nothing until the file lists them") {
  CHECK(parse_error(header(999999999, 1, 1) + "rank 0\n") == "t.sched:2:12: 999999999 is too large for world_size (at most 131072)");
  CHECK(parse_error(header(1, 100000000, 1)) == "t.sched:3:8: 100000000 is too large for layers (at most 1048576)");
  CHECK(parse_error(header(1, 1, 2000000)) == "t.sched:4:14: 2000000 is too large for microbatches (at most 1048576)");
  // At the limit, a world size the file does not list is reported at the end (not allocated up front).
  CHECK(parse_error(header(kMaxWorldSize, 1, 1) + "rank 0\n") ==
        "t.sched:6:1: expected 'rank 1': world_size is 131072 but the file lists ops for ranks 0..0");
}

TEST_CASE("a million declared layers cost time and memory in proportion to the ops, not the layers") {
  // (layers 100000000 used to allocate 8 GB in the final update check and abort in the timeline.)
  Schedule s = parse_schedule(header(1, kMaxCount, 1) + "rank 0\n  load -> W0 O0 A0{0}\n  forward L0 {0}\n", "t.sched");
  SimResult r = simulate(s);
  CHECK_FALSE(r.ok);
  CHECK(r.error == "layer 0 is never updated");
  CHECK(visualize::timeline_svg(r.trace).find("<svg") != std::string::npos);
}

TEST_CASE("the missing batches and shards of an update are found by set difference, not a loop to the limit") {
  std::string ops = "rank 0\n  load -> W0 O0 A0{0}\n  forward L0 {0}\n  loss {0}\n  backward L0 {0}\n";
  SimResult batches = simulate(parse_schedule(header(1, 1, kMaxCount) + ops + "  update L0 : dW0{0} W0 O0\n", "t.sched"));
  CHECK(batches.error.find("the weight grad dW0{0} is missing batches {1-1048575}") != std::string::npos);

  const std::string sharded = fmt::format("[0/{}]", kMaxCount);
  ops.replace(ops.find("load -> W0 O0"), 13, "load -> W0 O0" + sharded + " W0" + sharded);
  SimResult shards = simulate(parse_schedule(
      header(1, 1, 1) + ops + fmt::format("  update L0 : dW0{{0}} W0{0} O0{0}\n", sharded), "t.sched"));
  CHECK(shards.error == "layer 0: shards 1-1048575 of 1048576 are never updated");
}

TEST_CASE("simulated time past 2^63 ns is an error naming the op, not negative times and exit 0") {
  std::string text = header(1, 1, kMaxCount) + fmt::format("rank 0\n  load -> W0 O0 A0{{0-{}}}\n", kMaxCount - 1);
  for (int i = 0; i < 9000; ++i) text += fmt::format("  forward L0 {{0-{}}}\n", kMaxCount - 1);  // 2^20 s each
  SimResult r = simulate(parse_schedule(text, "t.sched"));
  CHECK_FALSE(r.ok);
  CHECK(r.error.starts_with("rank 0: forward layer 0 batches {0-1048575} (t.sched:8804) starts at t=9223274496"));
  CHECK(r.error.find("simulated time would pass its limit of 9223372036.854775807 s") != std::string::npos);
  for (const OpRun& run : r.trace.ranks[0]) CHECK(run.end >= run.start);
  CHECK(r.trace.makespan() > 0);
  CHECK(format_time(kMaxTime) == "9223372036.854775807");
  CHECK(format_time(seconds(2.3)) == "2.3");
  CHECK(format_time(0) == "0");
}

TEST_CASE("seconds(): durations beyond 2^63 ns saturate instead of wrapping to negative times") {
  // Issue 38: an op costed at 1e12 s printed "takes -9223372036.854775808 s" (std::llround out of range).
  CHECK(seconds(1e12) == kMaxTime);
  CHECK(seconds(9.3e9) == kMaxTime);
  CHECK(seconds(std::numeric_limits<double>::infinity()) == kMaxTime);
  CHECK(seconds(std::numeric_limits<double>::quiet_NaN()) == kMaxTime);
  CHECK(seconds(-1e12) == -kMaxTime);
  CHECK(seconds(9.2e9) == 9'200'000'000'000'000'000);  // below the limit: exact
  CHECK(format_time(seconds(1e300)) == "9223372036.854775807");
}

TEST_CASE("ranks without ops, and a schedule without any, simulate to an error, not undefined behaviour") {
  // Found by fuzz_sched_sim (UBSan: a reference into an empty node list while sampling memory).
  for (const char* model : {"unit", "puzzle"}) {
    CAPTURE(model);
    const std::string head = fmt::format("trainsim-schedule 1\nworld_size 2\nlayers 2\nmicrobatches 2\ncost_model {}\n", model);
    SimResult none = simulate(parse_schedule(head + "rank 0\n # load -> W0\nrank 1\n", "t.sched"));
    CHECK_FALSE(none.ok);
    CHECK(none.error == "layer 0 is never updated");
    CHECK(none.trace.ranks.size() == 2);
    CHECK(none.summary.makespan == 0);
    SimResult one = simulate(parse_schedule(head + "rank 0\n  load -> W0 O0 W1 O1\nrank 1\n", "t.sched"));
    CHECK(one.error == "layer 0 is never updated");
  }
}

TEST_CASE("a memory limit that is NaN, infinite or negative is refused, not silently turned off") {
  Schedule s = parse_schedule(ddp(), "t.sched");
  Schedule streams = s;  // (the stream engine's cost models)
  streams.header.cost_model = "unit";
  auto limited = [](double limit, bool capacity) {
    SimOptions o;
    (capacity ? o.memory_capacity : o.memory_limit) = limit;
    return o;
  };
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(simulate(s, limited(bad, false)), std::invalid_argument);
    CHECK_THROWS_AS(simulate(streams, limited(bad, false)), std::invalid_argument);
    CHECK_THROWS_AS(simulate(streams, limited(bad, true)), std::invalid_argument);
  }
  CHECK(simulate(s, limited(0.0, false)).error.find("memory limit exceeded") != std::string::npos);
  CHECK(simulate(streams, limited(0.0, false)).error.find("memory limit exceeded") != std::string::npos);
  const SimResult noted = simulate(streams, limited(0.0, true));
  CHECK(noted.ok);
  CHECK(noted.over_capacity.find("memory limit exceeded") != std::string::npos);
}

TEST_CASE("a deadlock cycle over 50,000 ranks is found without recursion and reported in a few lines") {
  const int n = 50000;
  std::string text = header(n, 1, 1, "unit") + "p2p per-pair\n";
  for (int r = 0; r < n; ++r) text += fmt::format("rank {}\n  recv from {} -> A0{{0}}\n", r, (r + 1) % n);
  SimResult r = simulate(parse_schedule(text, "ring.sched"));
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("ranks 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, ... and 49984 more are blocked") !=
        std::string::npos);
  CHECK(r.error.find("\n  ... and 49984 more blocked ranks") != std::string::npos);
  CHECK(r.error.find("wait-for cycle: rank 0 -> rank 1 -> rank 2") != std::string::npos);
  CHECK(r.error.find("-> ... (49984 more ranks) -> rank 0 (50000 ranks in the cycle)") != std::string::npos);
  CHECK(r.error.size() < 4000);
}

TEST_CASE("ranks blocked in collectives waiting for thousands of others: a report linear in size, a cycle") {
  // Even ranks wait in a barrier of group 2, odd ranks in one of group 1: each waits for half the world.
  const int n = 20000;
  std::string members;
  for (int r = 0; r < n; ++r) members += fmt::format(" {}", r);
  std::string text = header(n, 1, 1, "unit") + "group 1" + members + "\ngroup 2" + members + "\n";
  for (int r = 0; r < n; ++r) text += fmt::format("rank {}\n  barrier group {}\n", r, r % 2 ? 1 : 2);
  SimResult r = simulate(parse_schedule(text, "barrier.sched"));
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("rank 0 at t=0: barrier in group 2 (barrier.sched:9): collective #0 of group 2, waiting for "
                     "ranks 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, ... and 9984 more") !=
        std::string::npos);
  CHECK(r.error.find("wait-for cycle: rank 0 -> rank 1 -> rank 0") != std::string::npos);
  CHECK(r.error.size() < 8000);
}

TEST_CASE("receives from any source: the wait-for cycle without listing every rank per blocked rank") {
  std::string text = header(3, 1, 1, "unit") + "p2p per-pair\nrank 0\n  recv from any -> A0{0}\nrank 1\n"
                     "  recv from 2 -> A0{0}\nrank 2\n  recv from any -> A0{0}\n";
  SimResult r = simulate(parse_schedule(text, "any.sched"));
  CHECK(r.error.find("rank 0 at t=0: recv from any rank (any.sched:8): waiting for a message from any rank") !=
        std::string::npos);
  CHECK(r.error.find("wait-for cycle: rank 1 -> rank 2 -> rank 1") != std::string::npos);
}

TEST_CASE("every blocked rank receives from any source: the stream engine says no rank can send, not a cycle") {
  std::string text = header(3, 1, 1, "unit") + "p2p per-pair\nrank 0\n  recv from any -> A0{0}\nrank 1\n"
                     "  recv from any -> A0{0}\nrank 2\n  recv from any -> A0{0}\n";
  SimResult r = simulate(parse_schedule(text, "any.sched"));
  CHECK(r.error.find("deadlock: no event is left") == 0);
  CHECK(r.error.find("no rank can send: every blocked rank waits to receive from any rank") != std::string::npos);
  CHECK(r.error.find("wait-for cycle") == std::string::npos);
}

TEST_CASE("a batch set of 125,000 ids parses into the same set as one id at a time") {
  std::string ids;
  for (int i = 0; i < 125000; ++i) ids += fmt::format("{}{}", i ? "," : "", 2 * (124999 - i));  // descending
  Schedule s = parse_schedule(header(1, 1, 250000) + "rank 0\n  load -> A0{" + ids + ",7,0-3}\n", "t.sched");
  const IdSet& b = s.ranks[0][0].writes[0].batches;
  CHECK(b.size() == 125000 + 3);  // 1, 3 and 7 join the even ids
  CHECK(b.runs().front() == std::pair{0, 5});
  CHECK(b.contains(7));
  CHECK_FALSE(b.contains(9));
  CHECK(b.runs().back() == std::pair{249998, 249999});
}

TEST_CASE("error messages cut long tokens and escape control bytes") {
  std::string e = parse_error(ddp("forward L0 {0} : " + std::string(10'000'000, 'A')));
  CHECK(e.size() < 400);
  CHECK(e.find("AAAA... (10000000 bytes in all)") != std::string::npos);
  std::string esc = parse_error(ddp("\x1b[31mred"));
  CHECK(esc.starts_with("t.sched:9:3: unknown op '\\x1b[31mred'"));
  CHECK(esc.find('\x1b') == std::string::npos);
}

TEST_CASE("data-parallel kinds: an op's batch sets stay a few runs however many ranks (memory linear in dp)") {
  // Issue 38's class (unbounded memory): with rank r's microbatches numbered r*m .. r*m+m-1, a reduce-scatter summed
  // microbatch i of every rank, a set of dp separate ids, and its accumulations grew with it: gen fsdp --dp 2000
  // --layers 32 --sim went past 24 GB. Numbered i*dp + r, what the ranks run together is one run of ids.
  for (const char* kind : {"ddp", "zero1", "zero2", "fsdp"}) {
    CAPTURE(kind);
    GenOptions o;
    o.dp = 256;
    o.layers = 2;
    o.microbatches = 4;
    const Schedule s = generate(kind, o);
    std::size_t most = 0;
    for (const auto& ops : s.ranks)
      for (const Op& op : ops) {
        most = std::max(most, op.batches.runs().size());
        for (const auto* list : {&op.reads, &op.writes})
          for (const Tensor& t : *list) most = std::max(most, t.batches.runs().size());
      }
    CHECK(most <= static_cast<std::size_t>(o.microbatches));  // a rank's own microbatches at most, not dp
    CHECK(simulate(s).ok);
  }
}
