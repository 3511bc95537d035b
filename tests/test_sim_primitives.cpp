// Timing and memory of each primitive on small hand-computed cases (puzzle cost model).
#include <doctest/doctest.h>

#include <algorithm>

#include <fmt/format.h>

#include "sim_helpers.h"

using namespace trainsim;
using trainsim::testing::compute_op;
using trainsim::testing::run_world;
using trainsim::testing::act;
using trainsim::testing::wgrad;
using trainsim::testing::wshard;

namespace {
// doctest's CHECK cannot be used inside a coroutine body (g++ 12 rejects the expansion), so programs note
// what they saw here and the test checks it afterwards.
std::vector<std::string> seen;
void note(std::string s) { seen.push_back(std::move(s)); }

double start_of(const Trace& t, int rank, int i) { return to_seconds(t.ranks.at(rank).at(i).start); }
double end_of(const Trace& t, int rank, int i) { return to_seconds(t.ranks.at(rank).at(i).end); }
}  // namespace

TEST_CASE("compute ops take the puzzle's time: one step per batch, update 0.5, loss 0") {
  Trace t = run_world(1, [](Rank me) -> Task {
    me.execute(compute_op(OpKind::Forward, 0, {0, 1}));
    me.execute(compute_op(OpKind::Loss, 1, {0, 1}));
    me.execute(compute_op(OpKind::Backward, 0, {0, 1}));
    me.execute(compute_op(OpKind::Update, 0));
    co_return;
  });
  REQUIRE(t.ranks[0].size() == 4);
  CHECK(end_of(t, 0, 0) == 2.0);
  CHECK(start_of(t, 0, 1) == 2.0);
  CHECK(end_of(t, 0, 1) == 2.0);
  CHECK(end_of(t, 0, 2) == 4.0);
  CHECK(end_of(t, 0, 3) == 4.5);
  CHECK(to_seconds(t.timesteps()) == 4.0);
  CHECK(to_seconds(t.makespan()) == 4.5);
}

TEST_CASE("a pass costs 0.2 on the sender, the receiver starts at max(its time, the sender's time after its pass)") {
  SUBCASE("receiver waiting") {
    Trace t = run_world(2, [](Rank me) -> Task {
      if (me.id() == 0) {
        me.execute(compute_op(OpKind::Forward, 0, {0}));
        co_await me.send(1, act(1, 0));
      } else {
        Message m = co_await me.receive();
        note(fmt::format("{} {}", m.src, m.payload.str()));
      }
    });
    CHECK(seen.back() == "0 A1{0}");
    CHECK(start_of(t, 0, 1) == 1.0);
    CHECK(end_of(t, 0, 1) == doctest::Approx(1.2));
    CHECK(start_of(t, 1, 0) == doctest::Approx(1.2));
    CHECK(end_of(t, 1, 0) == doctest::Approx(1.4));
    CHECK(t.ranks[1][0].op.kind == OpKind::Recv);
    CHECK(t.ranks[1][0].op.peer == 0);
  }
  SUBCASE("receiver busy") {
    Trace t = run_world(2, [](Rank me) -> Task {
      if (me.id() == 0) {
        co_await me.send(1, act(1, 0));
      } else {
        me.execute(compute_op(OpKind::Forward, 0, {0, 1, 2}));
        co_await me.receive();
      }
    });
    CHECK(start_of(t, 1, 1) == 3.0);
    CHECK(end_of(t, 1, 1) == doctest::Approx(3.2));
  }
}

TEST_CASE("any-source receive takes messages in the order they were sent in virtual time") {
  Trace t = run_world(3, [](Rank me) -> Task {
    if (me.id() == 0) {
      Message a = co_await me.receive();
      Message b = co_await me.receive();
      note(fmt::format("{} {}", a.src, b.src));
    } else {
      me.execute(compute_op(OpKind::Forward, 0, me.id() == 1 ? IdSet{0, 1} : IdSet{0}));
      co_await me.send(0, act(1, me.id()));
    }
  });
  CHECK(seen.back() == "2 1");
  CHECK(t.ranks[0][0].op.peer == 2);
  CHECK(start_of(t, 0, 0) == doctest::Approx(1.2));
  CHECK(t.ranks[0][1].op.peer == 1);
  CHECK(start_of(t, 0, 1) == doctest::Approx(2.2));
  CHECK(end_of(t, 0, 1) == doctest::Approx(2.4));
}

TEST_CASE("receive from a given source") {
  auto program = [](Rank me) -> Task {
    if (me.id() == 0) {
      Message a = co_await me.receive(1);
      Message b = co_await me.receive(2);
      note(fmt::format("{} {}", a.src, b.src));
    } else {
      me.execute(compute_op(OpKind::Forward, 0, me.id() == 1 ? IdSet{0, 1} : IdSet{0}));
      co_await me.send(0, act(1, me.id()));
    }
  };
  SUBCASE("NCCL rule: one channel per (source, destination) pair") {
    WorldOptions o;
    o.p2p = P2PMode::PerPairChannel;
    Trace t = run_world(3, program, o);
    CHECK(seen.back() == "1 2");
    CHECK(start_of(t, 0, 0) == doctest::Approx(2.2));
    CHECK(start_of(t, 0, 1) == doctest::Approx(2.4));  // rank 2's message was ready at 1.2
  }
  SUBCASE("puzzle rule: one slot per destination, held by the other sender's message") {
    CHECK_THROWS_WITH_AS(run_world(3, program), doctest::Contains("its slot holds one from rank 2"), DeadlockError);
  }
}

TEST_CASE("a sender blocked on a full slot does not advance its clock") {
  Trace t = run_world(2, [](Rank me) -> Task {
    if (me.id() == 0) {
      co_await me.send(1, act(1, 0));
      co_await me.send(1, act(1, 1));  // slot full until rank 1 takes the first at t=5
      me.execute(compute_op(OpKind::Forward, 0, {2}));
    } else {
      me.execute(compute_op(OpKind::Forward, 0, {0, 1, 2, 3, 4}));
      co_await me.receive();
      co_await me.receive();
    }
  });
  CHECK(start_of(t, 0, 1) == doctest::Approx(0.2));
  CHECK(start_of(t, 0, 2) == doctest::Approx(0.4));
  CHECK(start_of(t, 1, 1) == doctest::Approx(5.0));
  CHECK(start_of(t, 1, 2) == doctest::Approx(5.2));
}

TEST_CASE("collectives start at the latest arrival and take 0.3") {
  Trace t = run_world(3, [](Rank me) -> Task {
    int r = me.id();
    me.memory().add(weight_grad_tensor(0, {r}));
    me.execute(compute_op(OpKind::Forward, 0, IdSet::range(0, r + 1)));  // arrive at 1, 2, 3
    Tensor sum = co_await me.all_reduce(wgrad(0, r), 0);
    Tensor gathered = co_await me.all_gather(wshard(1, r, 3), 1);
    Tensor mine = co_await me.reduce_scatter(wgrad(2, r), 2);
    co_await me.barrier();
    note(fmt::format("{} {} {} {}", r, sum.str(), gathered.str(), mine.str()));
  });
  REQUIRE(seen.size() >= 3);
  std::vector<std::string> last(seen.end() - 3, seen.end());
  std::sort(last.begin(), last.end());
  CHECK(last[0] == "0 dW0{0-2} W1[0-2/3] dW2{0-2}[0/3]");
  CHECK(last[1] == "1 dW0{0-2} W1[0-2/3] dW2{0-2}[1/3]");
  CHECK(last[2] == "2 dW0{0-2} W1[0-2/3] dW2{0-2}[2/3]");
  for (int r = 0; r < 3; ++r) {
    CHECK(start_of(t, r, 1) == 3.0);
    CHECK(end_of(t, r, 1) == doctest::Approx(3.3));
    CHECK(t.ranks[r][1].memory == 512.0 * 512.0);
    CHECK(start_of(t, r, 2) == doctest::Approx(3.3));
    CHECK(start_of(t, r, 3) == doctest::Approx(3.6));
    CHECK(end_of(t, r, 4) == doctest::Approx(4.2));
  }
}

TEST_CASE("memory is sampled at the start of every op") {
  Trace t = run_world(1, [](Rank me) -> Task {
    me.memory().add(weight_tensor(0));
    me.memory().add(activation_tensor(0, IdSet::range(0, 2)));
    me.execute(compute_op(OpKind::Forward, 0, {0, 1}));
    me.memory().add(activation_tensor(1, IdSet::range(0, 2)));
    me.memory().remove(activation_tensor(0, IdSet::range(0, 2)));
    me.memory().add(weight_tensor(1, {0}, 4));
    me.execute(compute_op(OpKind::Loss, 1, {0, 1}));
    co_return;
  });
  CHECK(t.ranks[0][0].memory == 512.0 * 512 + 2 * 512.0 * 256);
  CHECK(t.ranks[0][1].memory == 512.0 * 512 + 2 * 512.0 * 256 + 512.0 * 512 / 4);
  CHECK(t.peak().memory == t.ranks[0][1].memory);
  CHECK(t.peak().time == seconds(2));
}

TEST_CASE("two ranks that both receive from any rank first deadlock: no rank can send, no cycle is made up") {
  CHECK_THROWS_WITH_AS(run_world(2, [](Rank me) -> Task {
                         co_await me.receive();
                         co_await me.send(1 - me.id(), act(1, 0));
                       }),
                       doctest::Contains("no rank can send: every blocked rank waits to receive from any rank"),
                       DeadlockError);
  // Named sources: a real cycle, reported as one.
  CHECK_THROWS_WITH_AS(run_world(2, [](Rank me) -> Task {
                         co_await me.receive(1 - me.id());
                         co_await me.send(1 - me.id(), act(1, 0));
                       }),
                       doctest::Contains("wait-for cycle: rank 0 -> rank 1 -> rank 0"), DeadlockError);
  try {
    run_world(2, [](Rank me) -> Task { co_await me.receive(); });
    FAIL("no deadlock reported");
  } catch (const DeadlockError& e) {
    std::string msg = e.what();
    CHECK(msg.find("ranks 0, 1 are blocked") != std::string::npos);
    CHECK(msg.find("rank 0 at t=0: recv from any rank") != std::string::npos);
    CHECK(msg.find("rank 1 at t=0: recv from any rank") != std::string::npos);
  }
}

TEST_CASE("a collective called by only some ranks is reported with the ranks that never came") {
  CHECK_THROWS_WITH_AS(run_world(3, [](Rank me) -> Task {
                         if (me.id() < 2) co_await me.all_reduce(wgrad(0, me.id()), 0);
                       }),
                       doctest::Contains("waiting for rank 2 (rank 2 finished without it)"), DeadlockError);
}

TEST_CASE("members calling different collectives is an error naming both ranks and both ops") {
  CHECK_THROWS_WITH_AS(run_world(2, [](Rank me) -> Task {
                         if (me.id() == 0) co_await me.all_reduce(wgrad(0, 0), 0);
                         else co_await me.all_gather(wshard(0, 1, 2), 0);
                       }),
                       doctest::Contains("rank 1 calls all-gather layer 0 but rank 0 called all-reduce layer 0"),
                       CollectiveMismatchError);
}

TEST_CASE("collective inputs that do not combine are reported") {
  CHECK_THROWS_WITH_AS(run_world(2, [](Rank me) -> Task {
                         co_await me.all_reduce(wgrad(0, 0), 0);  // both hold batch 0
                       }),
                       doctest::Contains("both hold batches {0}"), SimError);
}

TEST_CASE("memory over the limit names the rank, time, op and resident tensors") {
  WorldOptions o;
  o.memory_limit = 100000;
  CHECK_THROWS_WITH_AS(run_world(1,
                                 [](Rank me) -> Task {
                                   me.memory().add(weight_tensor(0));
                                   me.execute(compute_op(OpKind::Forward, 0, {0}));
                                   co_return;
                                 },
                                 o),
                       doctest::Contains("rank 0: memory limit exceeded at t=0: forward layer 0 batches {0} starts "
                                         "with 262144 units resident (limit 100000); resident: W0"),
                       MemoryLimitError);
}

TEST_CASE("an exception in a rank program ends the run with the rank named") {
  CHECK_THROWS_WITH_AS(run_world(2, [](Rank me) -> Task {
                         if (me.id() == 1) throw std::runtime_error("boom");
                         co_return;
                       }),
                       "rank 1: boom", SimError);
}

TEST_CASE("sending to a rank that does not exist is an error, not a crash") {
  CHECK_THROWS_WITH_AS(run_world(2, [](Rank me) -> Task { co_await me.send(7, act(0, 0)); }),
                       doctest::Contains("names rank 7, but the world has ranks 0..1"), SimError);
}

TEST_CASE("the same program gives the same trace") {
  auto program = [](Rank me) -> Task {
    int r = me.id();
    for (int i = 0; i < 3; ++i) {
      me.execute(compute_op(OpKind::Forward, i, IdSet::range(0, 1 + (r * 7 + i) % 3)));
      co_await me.send((r + 1) % 4, act(i, r));
      co_await me.receive();
      co_await me.all_reduce(wgrad(i, r), i);
    }
  };
  Trace a = run_world(4, program), b = run_world(4, program);
  REQUIRE(a.op_count() == b.op_count());
  for (int r = 0; r < 4; ++r)
    for (std::size_t i = 0; i < a.ranks[r].size(); ++i) {
      CHECK(a.ranks[r][i].start == b.ranks[r][i].start);
      CHECK(a.ranks[r][i].memory == b.ranks[r][i].memory);
      CHECK(a.ranks[r][i].op.describe() == b.ranks[r][i].op.describe());
    }
}
