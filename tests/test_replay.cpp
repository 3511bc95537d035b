// Simulating schedules: recorded puzzle schedules reproduce their programs; broken schedules are caught
// with a message naming the file:line, rank and op.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "puzzles/runner.h"
#include "schedules/generators.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;

namespace {
std::string two_ranks(const std::string& rank0, const std::string& rank1, const std::string& extra_header = "") {
  return "trainsim-schedule 1\nworld_size 2\nlayers 1\nmicrobatches 2\ncost_model unit\np2p per-pair\n" + extra_header +
         "rank 0\n" + rank0 + "rank 1\n" + rank1;
}
// A valid data-parallel step on two ranks, batch r on rank r.
std::string ddp_rank(int r) {
  std::string b = std::to_string(r);
  return "  load -> W0 O0 A0{" + b + "}\n  forward L0 {" + b + "}\n  loss {" + b + "} : A1{" + b + "}\n" +
         "  backward L0 {" + b + "}\n  all-reduce L0 : dW0{" + b + "} -> dW0{0-1}\n  update L0\n";
}
std::string sim_error(const std::string& text, std::optional<double> limit = std::nullopt) {
  Schedule s = parse_schedule(text, "t.sched");
  SimOptions o;
  o.memory_limit = limit;
  SimResult r = simulate(s, o);
  return r.ok ? "ok" : r.error;
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("simulating a recorded puzzle schedule reproduces the program's run exactly") {
  for (const auto& p : puzzles::catalog()) {
    CAPTURE(p.name);
    auto run = puzzles::run_puzzle(p, false, true);
    REQUIRE(run.schedule);
    Schedule s = parse_schedule(print_schedule(*run.schedule), p.name + ".sched");
    SimResult sim = simulate(s);
    CHECK(sim.error == "");
    REQUIRE(sim.ok);
    CHECK(sim.trace.timesteps() == run.trace.timesteps());
    CHECK(sim.trace.makespan() == run.trace.makespan());
    CHECK(sim.trace.peak().memory == run.trace.peak().memory);
    CHECK(sim.trace.peak().rank == run.trace.peak().rank);
    CHECK(sim.trace.peak().time == run.trace.peak().time);
    for (int r = 0; r < p.ranks; ++r) {
      const auto& a = run.trace.ranks[r];
      const auto& b = sim.trace.ranks[r];
      REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        CHECK(a[i].op.kind == b[i].op.kind);
        CHECK(a[i].op.layer == b[i].op.layer);
        CHECK(a[i].op.batches == b[i].op.batches);
        CHECK(a[i].start == b[i].start);
        CHECK(a[i].end == b[i].end);
        CHECK(a[i].memory == b[i].memory);
      }
    }
  }
}

TEST_CASE("a valid hand-written schedule passes") { CHECK(sim_error(two_ranks(ddp_rank(0), ddp_rank(1))) == "ok"); }

TEST_CASE("the tensor algebra is checked op by op") {
  SUBCASE("an input that is not resident") {
    std::string e = sim_error(two_ranks("  load -> W0 O0\n  forward L0 {0}\n", ddp_rank(1)));
    CHECK(has(e, "rank 0: forward layer 0 batches {0} (t.sched:9): it reads A0{0} (activation), which is not resident; resident: W0, O0"));
  }
  SUBCASE("an incomplete weight") {
    std::string e = sim_error(two_ranks("  load -> W0[0/2] A0{0}\n  forward L0 {0} : A0{0} W0[0/2]\n", ddp_rank(1)));
    CHECK(has(e, "(t.sched:9): the weight W0[0/2] is not complete (holds shards 0 of 2); all-gather it first"));
  }
  SUBCASE("an update without every batch's grad") {
    std::string r0 = "  load -> W0 O0 A0{0}\n  forward L0 {0}\n  loss {0} : A1{0}\n  backward L0 {0}\n"
                     "  update L0 : dW0{0} W0 O0\n";
    CHECK(has(sim_error(two_ranks(r0, ddp_rank(1))), "(t.sched:12): the weight grad dW0{0} is missing batches {1}"));
  }
  SUBCASE("a double update") {
    std::string r0 = ddp_rank(0) + "  update L0 : dW0{0-1} W0@1 O0@1\n";
    CHECK(has(sim_error(two_ranks(r0, ddp_rank(1))), "(t.sched:14): layer 0 is updated again (to step 2)"));
  }
  SUBCASE("a layer never updated over all its shards") {
    std::string r = "  load -> W0[0/2] O0[0/2] dW0{0-1}[0/2]\n  update L0 : dW0{0-1}[0/2] W0[0/2] O0[0/2]\n";
    std::string e = sim_error(two_ranks(r, "  load -> A0{1}\n"));
    CHECK(has(e, "cannot load dW0{0-1}[0/2]"));
  }
  SUBCASE("a layer with a shard never updated") {
    std::string r0 = ddp_rank(0);
    std::string r1 = "  load -> W0 O0 A0{1}\n  forward L0 {1}\n  loss {1} : A1{1}\n  backward L0 {1}\n"
                     "  all-reduce L0 : dW0{1} -> dW0{0-1}\n";
    CHECK(sim_error(two_ranks(r0, r1)) == "ok");  // rank 0's update covers every shard of the unsharded layer
    std::string sharded = [](int r) {
      std::string b = std::to_string(r);
      return "  load -> W0[" + b + "/2] O0[" + b + "/2] A0{" + b + "}\n  all-gather L0 : W0[" + b +
             "/2] -> W0[0-1/2]\n  forward L0 {" + b + "} : A0{" + b + "} W0[0-1/2]\n  loss {" + b + "} : A1{" + b +
             "}\n  backward L0 {" + b + "} : A0{" + b + "} dA1{" + b + "} W0[0-1/2]\n  reduce-scatter L0 : dW0{" + b +
             "} -> dW0{0-1}[" + b + "/2]\n";
    }(0);
    std::string rank1 = "  load -> W0[1/2] O0[1/2] A0{1}\n  all-gather L0 : W0[1/2] -> W0[0-1/2]\n"
                        "  forward L0 {1} : A0{1} W0[0-1/2]\n  loss {1} : A1{1}\n"
                        "  backward L0 {1} : A0{1} dA1{1} W0[0-1/2]\n  reduce-scatter L0 : dW0{1} -> dW0{0-1}[1/2]\n";
    std::string e = sim_error(two_ranks(sharded + "  update L0 : dW0{0-1}[0/2] W0[0/2] O0[0/2]\n", rank1));
    CHECK(e == "layer 0: shards 1 of 2 are never updated");
  }
}

TEST_CASE("point-to-point: each send is matched by a receive of the same tensor, in order per pair") {
  SUBCASE("never received") {
    std::string e = sim_error(two_ranks("  load -> A0{0}\n  send to 1 : A0{0}\n", ""));
    CHECK(has(e, "rank 0: send of A0{0} to rank 1 (t.sched:9) was never received"));
  }
  SUBCASE("a different tensor") {
    std::string e = sim_error(two_ranks("  load -> A0{0}\n  send to 1 : A0{0}\n", "  recv from 0 -> A0{1}\n"));
    CHECK(has(e, "rank 1: recv from rank 0 (t.sched:11): expected A0{1} but rank 0 sent A0{0} (t.sched:9)"));
  }
  SUBCASE("out of order") {
    std::string e = sim_error(two_ranks("  load -> A0{0} A0{1}\n  send to 1 : A0{0}\n  send to 1 : A0{1}\n",
                                        "  recv from 0 -> A0{1}\n  recv from 0 -> A0{0}\n"));
    CHECK(has(e, "expected A0{1} but rank 0 sent A0{0}"));
  }
}

TEST_CASE("collectives: the same sequence in every member, agreeing on the tensor") {
  SUBCASE("different collectives") {
    std::string e = sim_error(two_ranks("  load -> dW0{}\n  all-reduce L0 : dW0{} -> dW0{}\n",
                                        "  load -> W0\n  all-gather L0 : W0 -> W0\n"));
    CHECK(has(e, "collective mismatch in group 0 at call #0: rank 1 calls all-gather layer 0 (t.sched:12) but rank 0 "
                 "called all-reduce layer 0 (t.sched:9)"));
  }
  SUBCASE("disagreeing tensors") {
    std::string e = sim_error(two_ranks("  load -> W0[0/2]\n  all-gather L0 : W0[0/2] -> W0[0-1/2]\n",
                                        "  load -> O0[1/2]\n  all-gather L0 : O0[1/2] -> O0[0-1/2]\n"));
    CHECK(has(e, "combining shards of different tensors: W0[0/2] and O0[1/2]"));
  }
  SUBCASE("a wrong expected result") {
    std::string e = sim_error(two_ranks("  load -> W0[0/2]\n  all-gather L0 : W0[0/2] -> W0[0/2]\n",
                                        "  load -> W0[1/2]\n  all-gather L0 : W0[1/2] -> W0[0-1/2]\n"));
    CHECK(has(e, "rank 0: all-gather layer 0 (t.sched:9): it expects W0[0/2] but the all-gather gives W0[0-1/2]"));
  }
}

TEST_CASE("collective problems are reported in call order, whichever member shows them") {
  // Three ranks; the stream engine forms a group's calls member by member and, on any problem, again call
  // by call: the message must be the first problem in call order, and name the member that shows it.
  auto three_ranks = [](const std::string& r0, const std::string& r1, const std::string& r2) {
    return "trainsim-schedule 1\nworld_size 3\nlayers 2\nmicrobatches 3\ncost_model unit\np2p per-pair\nrank 0\n" +
           r0 + "rank 1\n" + r1 + "rank 2\n" + r2;
  };
  auto gather = [](int r, const std::string& out) {
    const std::string w = "W0[" + std::to_string(r) + "/3]";
    return "  load -> " + w + " W1[" + std::to_string(r) + "/3]\n  all-gather L0 : " + w + " -> " + out + "\n";
  };
  SUBCASE("a wrong output in call #0 comes before a mismatch in call #1") {
    const std::string good = "W0[0-2/3]";
    std::string e = sim_error(three_ranks(gather(0, good) + "  all-gather L1 : W1[0/3] -> W1[0-2/3]\n",
                                          gather(1, good) + "  barrier\n",
                                          gather(2, "W0[2/3]") + "  all-gather L1 : W1[2/3] -> W1[0-2/3]\n"));
    CHECK(has(e, "rank 2: all-gather layer 0 (t.sched:17): it expects W0[2/3] but the all-gather gives W0[0-2/3]"));
  }
  SUBCASE("a mismatch in call #0 comes before a wrong output in call #1") {
    std::string e = sim_error(three_ranks(gather(0, "W0[0-2/3]") + "  all-gather L1 : W1[0/3] -> W1[0/3]\n",
                                          gather(1, "W0[0-2/3]") + "  all-gather L1 : W1[1/3] -> W1[0-2/3]\n",
                                          "  load -> W0[2/3] W1[2/3]\n  barrier\n  all-gather L1 : W1[2/3] -> W1[0-2/3]\n"));
    CHECK(has(e, "collective mismatch in group 0 at call #0: rank 2 calls barrier"));
  }
  SUBCASE("a reduce-scatter shard expected by the wrong member") {
    auto rs = [](int shard) {  // (empty grads: the only weight grads a load may bring)
      return "  load -> dW0{}\n  reduce-scatter L0 : dW0{} -> dW0{}[" + std::to_string(shard) + "/3]\n";
    };
    std::string e = sim_error(three_ranks(rs(0), rs(2), rs(2)));
    CHECK(has(e, "rank 1: reduce-scatter layer 0 (t.sched:12): it expects dW0{}[2/3] but the reduce-scatter gives "
                 "dW0{}[1/3]"));
  }
  SUBCASE("inputs that do not combine, in a call one member never makes: a deadlock, not a combine error") {
    std::string e = sim_error(three_ranks("  load -> W0[0/3]\n  all-gather L0 : W0[0/3] -> W0[0-2/3]\n",
                                          "  load -> O0[1/3]\n  all-gather L0 : O0[1/3] -> O0[0-2/3]\n", ""));
    CHECK(has(e, "deadlock"));
    CHECK_FALSE(has(e, "combining"));
  }
}

TEST_CASE("a group listed out of rank order combines in its member order, and reports in call order") {
  // Group 1 lists ranks 2, 0, 1: member m gets shard m of a reduce-scatter. (Such a group is formed after
  // issue, member by member; a group in rank order while the ranks are issued.)
  auto group_of_three = [](const std::string& shard0, const std::string& shard1, const std::string& shard2,
                           const std::string& then0, const std::string& then1, const std::string& then2) {
    auto rank = [](int r, const std::string& shard, const std::string& then) {
      return "rank " + std::to_string(r) + "\n  load -> dW0{} W1[0/3]\n  reduce-scatter L0 group 1 : dW0{} -> dW0{}[" +
             shard + "/3]\n" + then;
    };
    return "trainsim-schedule 1\nworld_size 3\nlayers 2\nmicrobatches 3\ncost_model unit\np2p per-pair\ngroup 1 2 0 1\n" +
           rank(0, shard0, then0) + rank(1, shard1, then1) + rank(2, shard2, then2);
  };
  const std::string barrier = "  barrier group 1\n";
  // Shards by member: rank 2 is member 0, rank 0 member 1, rank 1 member 2. The collectives agree; the
  // schedule then fails only for the layer it never updates.
  CHECK(sim_error(group_of_three("1", "2", "0", barrier, barrier, barrier)) == "layer 0 is never updated");
  std::string e = sim_error(group_of_three("1", "0", "0", barrier, barrier, barrier));
  CHECK(has(e, "rank 1: reduce-scatter layer 0 in group 1 (t.sched:14): it expects dW0{}[0/3] but the reduce-scatter "
               "gives dW0{}[2/3]"));
  // A wrong output in call #0 comes before a mismatch in call #1.
  const std::string gather = "  all-gather L1 group 1 : W1[0/3] -> W1[0/3]\n";
  e = sim_error(group_of_three("1", "0", "0", gather, barrier, gather));
  CHECK(has(e, "it expects dW0{}[0/3] but the reduce-scatter gives dW0{}[2/3]"));
  e = sim_error(group_of_three("1", "2", "0", gather, barrier, gather));
  CHECK(has(e, "collective mismatch in group 1 at call #1"));
}

TEST_CASE("a deadlocked schedule is reported with the wait-for cycle") {
  std::string e = sim_error(two_ranks("  recv from 1 -> A0{1}\n", "  recv from 0 -> A0{0}\n"));
  CHECK(has(e, "deadlock: no event is left at t=0 and ranks 0, 1 are blocked"));
  CHECK(has(e, "rank 0 at t=0: recv from rank 1 (t.sched:8): waiting for a message from rank 1"));
  CHECK(has(e, "wait-for cycle: rank 0 -> rank 1 -> rank 0"));
}

TEST_CASE("a deadlock gives the blocked ranks as data too, with both engines") {
  for (const std::string model : {"unit", "puzzle"}) {
    CAPTURE(model);
    std::string text = two_ranks("  load -> W0 O0\n  recv from 1 -> A0{1}\n", "  load -> W0 O0\n  recv from 0 -> A0{0}\n");
    text.replace(text.find("cost_model unit"), 15, "cost_model " + model);
    SimResult r = simulate(parse_schedule(text, "t.sched"));
    REQUIRE(!r.ok);
    REQUIRE(r.blocked.size() == 2);
    CHECK(r.blocked[0].rank == 0);
    CHECK(r.blocked[1].rank == 1);
    CHECK(r.blocked[0].since == 0);
    CHECK(r.blocked[0].op.find("t.sched:9") != std::string::npos);
    CHECK(r.blocked[0].detail == "waiting for a message from rank 1");
    CHECK(r.blocked[1].detail == "waiting for a message from rank 0");
  }
  // Any other problem lists no blocked rank.
  SimResult r = simulate(parse_schedule(two_ranks("  load -> W0 O0\n  forward L0 {0}\n", ddp_rank(1)), "t.sched"));
  REQUIRE(!r.ok);
  CHECK(r.blocked.empty());
}

TEST_CASE("after a memory-limit error, a rank's ops from the first over the limit on carry no memory sample") {
  // GPipe: the ranks hold different amounts, so each rank stops sampling at a different op (a rank's samples
  // must not come from another rank's). One stream per rank: program order is start order.
  GenOptions g;
  g.stages = 4, g.microbatches = 8;
  const Schedule s = generate("gpipe", g);
  // A limit under the second-highest rank's peak: at least two ranks go over it.
  std::vector<double> peaks;
  for (const auto& runs : simulate(s).trace.ranks) {
    double p = 0;
    for (const OpRun& run : runs) p = std::max(p, run.memory);
    peaks.push_back(p);
  }
  std::sort(peaks.rbegin(), peaks.rend());
  REQUIRE(peaks.size() >= 2);
  REQUIRE(peaks[1] > 0);
  SimOptions o;
  o.memory_limit = 0.9 * peaks[1];
  const SimResult r = simulate(s, o);
  REQUIRE_FALSE(r.ok);
  CHECK(has(r.error, "memory limit exceeded"));
  int stopped = 0;
  for (std::size_t rank = 0; rank < r.trace.ranks.size(); ++rank) {
    CAPTURE(rank);
    bool over = false;
    for (const OpRun& run : r.trace.ranks[rank]) {
      if (over) {
        CHECK(run.memory == 0);
      } else if (run.memory > *o.memory_limit) {
        over = true;
        ++stopped;
      }
    }
  }
  CHECK(stopped >= 2);  // several ranks over the limit, at different ops
}

TEST_CASE("memory over the limit names the rank, time, op and what is resident") {
  std::string e = sim_error(two_ranks(ddp_rank(0), ddp_rank(1)), 700000);
  CHECK(has(e, "rank 0: memory limit exceeded at t=1: loss batches {0} (t.sched:10) starts with 786432 units resident "
               "(limit 700000); resident: W0, O0, A0{0}, A1{0}"));
}
