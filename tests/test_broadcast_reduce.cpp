// Broadcast and reduce (NCCL's ncclBroadcast / ncclReduce; docs/schedule-format.md, "Broadcast and reduce"):
// the .sched syntax (version 2 only) and its round trip; the rules both engines check (a root in the group,
// the same root on every member, the root's tensor to every member, the sum to the root only) with errors
// naming rank, op and file:line; the cost models; the puzzles' Rank API; the communicators; and
// `gen zero3-owner` (ZeRO-3 sharded between tensors), validated, simulated and replayed against one device.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "exec/cpu/cpu_device.h"
#include "exec/cpu/thread_comm.h"
#include "exec_helpers.h"
#include "hardware/comm.h"
#include "schedules/generators.h"
#include "interop/pytorch_csv.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"
#include "sim_helpers.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// A one-layer, two-microbatch header (7 lines) of format `version` and cost model `cost` on `world` ranks, with
// group 1 = every rank.
std::string head(const std::string& cost = "puzzle", int version = 2, int world = 2) {
  std::string ranks;
  for (int r = 0; r < world; ++r) ranks += " " + std::to_string(r);
  return "trainsim-schedule " + std::to_string(version) + "\nworld_size " + std::to_string(world) +
         "\nlayers 1\nmicrobatches 2\ncost_model " + cost + "\np2p per-pair\ngroup 1" + ranks + "\n";
}

std::string parse_error(const std::string& text) {
  try {
    parse_schedule(text, "bc.sched");
  } catch (const ParseError& e) {
    return e.what();
  }
  return "";
}

// The simulator's error for `text` (both engines: the puzzle model's World and the stream engine).
std::string sim_error(const std::string& text) {
  SimResult r = simulate(parse_schedule(text, "bc.sched"));
  return r.ok ? std::string() : r.error;
}

// One training step: rank 0 owns layer 0 and broadcasts it to rank 1; each trains on its batch and reduces its
// grad to rank 0, which updates.
std::string valid_body() {
  return "\nrank 0\n"
         "  load -> W0 O0 A0{0}\n"
         "  broadcast L0 group 1 root 0 : W0\n"
         "  forward L0 {0}\n"
         "  loss {0}\n"
         "  backward L0 {0}\n"
         "  free : A0{0} A1{0} dA1{0} dA0{0}\n"
         "  reduce L0 group 1 root 0 : dW0{0} -> dW0{0-1}\n"
         "  free : dW0{0}\n"
         "  update L0\n"
         "rank 1\n"
         "  load -> A0{1}\n"
         "  broadcast L0 group 1 root 0 -> W0\n"
         "  forward L0 {1}\n"
         "  loss {1}\n"
         "  backward L0 {1}\n"
         "  free : W0 A0{1} A1{1} dA1{1} dA0{1}\n"
         "  reduce L0 group 1 root 0 : dW0{1}\n"
         "  free : dW0{1}\n";
}

int count_kind(const Schedule& s, int rank, OpKind k) {
  int n = 0;
  for (const Op& op : s.ranks[rank]) n += op.kind == k;
  return n;
}

}  // namespace

TEST_CASE("broadcast, reduce: the syntax prints back byte for byte and names the root") {
  const std::string text = head() + valid_body();
  Schedule s = parse_schedule(text, "bc.sched");
  const Op& bc = s.ranks[1][1];
  CHECK(bc.kind == OpKind::Broadcast);
  CHECK(bc.peer == 0);
  CHECK(bc.group == 1);
  CHECK(bc.reads.empty());
  CHECK(bc.writes.size() == 1);
  CHECK(bc.describe() == "broadcast layer 0 in group 1 root 0");
  CHECK(print_op(bc, s.header) == "broadcast L0 group 1 root 0 -> W0");
  CHECK(print_op(s.ranks[0][6], s.header) == "reduce L0 group 1 root 0 : dW0{0} -> dW0{0-1}");
  CHECK(print_op(s.ranks[1][6], s.header) == "reduce L0 group 1 root 0 : dW0{1}");
  const std::string printed = print_schedule(s);
  CHECK(print_schedule(parse_schedule(printed, "again.sched")) == printed);
}

TEST_CASE("broadcast, reduce: version 1 refuses them, a root is required, and only there") {
  CHECK(parse_error(head("puzzle", 1) + "\nrank 0\n  broadcast L0 root 0 : W0\nrank 1\n") ==
        "bc.sched:10:3: broadcast needs format version 2 (write 'trainsim-schedule 2' on the first line)");
  CHECK(parse_error(head("puzzle", 1) + "\nrank 0\n  reduce L0 root 0 : dW0{}\nrank 1\n").find("reduce needs format version 2") !=
        std::string::npos);
  CHECK(parse_error(head() + "\nrank 0\n  broadcast L0 : W0\nrank 1\n") == "bc.sched:10:3: broadcast needs 'root RANK'");
  CHECK(parse_error(head() + "\nrank 0\n  all-reduce L0 root 0 : dW0{}\nrank 1\n") ==
        "bc.sched:10:17: 'root' belongs to broadcast and reduce");
  CHECK(parse_error(head() + "\nrank 0\n  broadcast L0 root 2 : W0\nrank 1\n") ==
        "bc.sched:10:21: rank 2 is out of range: world_size is 2");
}

TEST_CASE("op arguments: each at most once, a contradiction is refused at its second mention") {
  // Issue 38: the last one won. Columns point at the repeated word.
  CHECK(parse_error(head() + "\nrank 0\n  broadcast L0 root 1 root 0 : W0\nrank 1\n") ==
        "bc.sched:10:23: 'root' is given twice in one broadcast op");
  CHECK(parse_error(head() + "\nrank 0\n  all-reduce L0 L0 : dW0{0}\nrank 1\n") ==
        "bc.sched:10:17: the layer is given twice in one all-reduce op");
  CHECK(parse_error(head() + "\nrank 0\n  all-reduce L0 stream 5 stream 0 : dW0{0}\nrank 1\n") ==
        "bc.sched:10:26: 'stream' is given twice in one all-reduce op");
  CHECK(parse_error(head() + "\nrank 0\n  all-reduce L0 group 1 group 1 : dW0{0}\nrank 1\n") ==
        "bc.sched:10:25: 'group' is given twice in one all-reduce op");
  CHECK(parse_error(head() + "\nrank 0\n  forward L0 {0} {1}\nrank 1\n") ==
        "bc.sched:10:18: the batch set is given twice in one forward op");
  CHECK(parse_error(head() + "\nrank 0\n  send L0 {0} to 1 to 1\nrank 1\n") ==
        "bc.sched:10:20: 'to' is given twice in one send op");
  // A word that belongs elsewhere is still named as such, not as a repeat.
  CHECK(parse_error(head() + "\nrank 0\n  send L0 {0} to 1 root 0\nrank 1\n") ==
        "bc.sched:10:20: 'root' belongs to broadcast and reduce");
}

TEST_CASE("group lines: a rank listed twice is found in n log n and named at its second mention") {
  // Issue 38: the check was quadratic (a group of 131,072 ranks took seconds). Here the repeat is far apart.
  const std::string h = head();
  const std::size_t at = h.find("group 1 ");
  REQUIRE(at != std::string::npos);
  const std::size_t eol = h.find('\n', at);
  std::string bad = h.substr(0, at) + "group 1 0 1 0" + h.substr(eol);
  const std::string e = parse_error(bad + valid_body());
  CHECK(e.find("rank 0 is listed twice in group 1") != std::string::npos);
  CHECK(e.find(":13: ") != std::string::npos);  // the second 0: "group 1 0 1 0", column 13
}

TEST_CASE("broadcast, reduce: a valid exchange simulates under the puzzle and the stream engine") {
  for (const char* cost : {"puzzle", "unit"}) {
    CAPTURE(cost);
    SimResult r = simulate(parse_schedule(head(cost) + valid_body(), "bc.sched"));
    INFO(r.error);
    CHECK(r.ok);
    REQUIRE(r.trace.ranks.size() == 2);
  }
  // The puzzle model charges 0.3 per collective, as the others.
  SimResult r = simulate(parse_schedule(head() + valid_body(), "bc.sched"));
  REQUIRE(r.ok);
  for (const OpRun& run : r.trace.ranks[1])
    if (is_rooted(run.op.kind)) CHECK(run.end - run.start == seconds(0.3));
}

TEST_CASE("broadcast, reduce: wrong roots and wrong tensors are refused naming rank, op and line") {
  for (const char* cost : {"puzzle", "unit"}) {
    CAPTURE(cost);
    // A root outside the group.
    std::string e = sim_error(head(cost, 2, 3) + "group 2 0 1\n\nrank 0\n  broadcast L0 group 2 root 2 -> W0\n"
                                                 "rank 1\n  broadcast L0 group 2 root 2 -> W0\nrank 2\n");
    CHECK(e.find("rank 0: broadcast layer 0 in group 2 root 2 (bc.sched:11)") != std::string::npos);
    CHECK(e.find("the root, rank 2, is not a member of group 2") != std::string::npos);
    // Members naming different roots.
    e = sim_error(head(cost) + "\nrank 0\n  load -> W0\n  broadcast L0 root 0 : W0\n"
                               "rank 1\n  load -> W0\n  broadcast L0 root 1 : W0\n");
    CHECK(e.find("collective mismatch in group 0 at call #0") != std::string::npos);
    CHECK(e.find("root 0") != std::string::npos);
    CHECK(e.find("root 1") != std::string::npos);
    CHECK(e.find("bc.sched:11") != std::string::npos);
    CHECK(e.find("bc.sched:14") != std::string::npos);
    // A non-root that expects another tensor than the root's.
    e = sim_error(head(cost) + "\nrank 0\n  load -> W0\n  broadcast L0 root 0 : W0\n"
                               "rank 1\n  broadcast L0 root 0 -> W0@1\n");
    CHECK(e.find("rank 1: broadcast layer 0 root 0 (bc.sched:13): it expects W0@1 but the broadcast gives W0") == 0);
    // A non-root that lists a read; a root that lists a write.
    e = sim_error(head(cost) + "\nrank 0\n  load -> W0\n  broadcast L0 root 0 : W0\n"
                               "rank 1\n  load -> W0\n  broadcast L0 root 0 : W0\n");
    CHECK(e.find("rank 1: broadcast layer 0 root 0 (bc.sched:14): only the root (rank 0) sends in a broadcast") == 0);
    e = sim_error(head(cost) + "\nrank 0\n  load -> W0\n  broadcast L0 root 0 : W0 -> W0\n"
                               "rank 1\n  broadcast L0 root 0 -> W0\n");
    CHECK(e.find("rank 0: broadcast layer 0 root 0 (bc.sched:11): the root's W0 is the broadcast's output in place") == 0);
    // A reduce's sum written on a non-root, and read there later.
    e = sim_error(head(cost) + "\nrank 0\n  load -> dW0{}\n  reduce L0 root 0 : dW0{} -> dW0{}\n"
                               "rank 1\n  load -> dW0{}\n  reduce L0 root 0 : dW0{} -> dW0{}\n");
    CHECK(e.find("rank 1: reduce layer 0 root 0 (bc.sched:14): only the root (rank 0) gets the reduce's result") == 0);
    // Rank 0 computes batch 0's grad, rank 1 batch 1's; only the root (rank 1) holds their sum, so rank 0's
    // update of both batches reads a grad it does not hold.
    e = sim_error(head(cost) + "\nrank 0\n  load -> W0 O0\n  load -> A0{0}\n  forward L0 {0}\n  loss {0}\n"
                               "  backward L0 {0}\n  reduce L0 root 1 : dW0{0}\n  update L0\n"
                               "rank 1\n  load -> W0 O0\n  load -> A0{1}\n  forward L0 {1}\n  loss {1}\n"
                               "  backward L0 {1}\n  reduce L0 root 1 : dW0{1} -> dW0{0-1}\n  update L0\n");
    CHECK(e.find("rank 0: update layer 0 (bc.sched:16): it reads dW0{0-1} (weight grad), which is not resident") == 0);
  }
}

TEST_CASE("broadcast, reduce: the hardware model times NCCL's pipelined ring, (n-1)·alpha + S/B") {
  const hw::Link link{5e-6, 100e9};
  const double S = 1e9;
  for (int n : {2, 4, 8}) {
    CAPTURE(n);
    for (hw::Collective c : {hw::Collective::Broadcast, hw::Collective::Reduce}) {
      CHECK(hw::collective_seconds(c, n, S, link) == doctest::Approx((n - 1) * 5e-6 + S / 100e9));
      CHECK(hw::bus_bandwidth(c, n, S, 2.0) == doctest::Approx(S / 2.0));  // nccl-tests: busbw = algbw
    }
    // Less than an all-reduce (two ring passes), more than an all-gather's (n-1)/n share once n > 1.
    CHECK(hw::collective_seconds(hw::Collective::Broadcast, n, S, link) <
          hw::collective_seconds(hw::Collective::AllReduce, n, S, link));
  }
  CHECK(hw::collective_seconds(hw::Collective::Broadcast, 1, S, link) == 0);
}

TEST_CASE("broadcast, reduce: the puzzles' Rank API gives the root's tensor, and the sum to the root only") {
  Trace t = run_world(3, [](Rank me) -> Task {
    Tensor mine = me.id() == 1 ? weight_tensor(2) : Tensor{};
    Tensor got = co_await me.broadcast(mine, 1, 2);
    CHECK(got == weight_tensor(2));
    Tensor g = wgrad(2, me.id());
    Tensor sum = co_await me.reduce(g, 0, 2);
    CHECK(sum == (me.id() == 0 ? weight_grad_tensor(2, IdSet::range(0, 3)) : g));
  });
  REQUIRE(t.ranks.size() == 3);
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    REQUIRE(t.ranks[r].size() == 2);
    const Op& bc = t.ranks[r][0].op;
    CHECK(bc.kind == OpKind::Broadcast);
    CHECK(bc.reads.size() == (r == 1 ? 1u : 0u));
    CHECK(bc.writes.size() == (r == 1 ? 0u : 1u));
    const Op& rd = t.ranks[r][1].op;
    CHECK(rd.kind == OpKind::Reduce);
    CHECK(rd.writes.size() == (r == 0 ? 1u : 0u));
  }
  // A root outside the group, and roots that differ, are errors.
  auto outside = [](Rank me) -> Task {
    Tensor w = wshard(0, 0, 1);
    co_await me.broadcast(w, 5, 0);
  };
  auto two_roots = [](Rank me) -> Task {
    Tensor g = wgrad(0, me.id());
    co_await me.reduce(g, me.id(), 0);
  };
  CHECK_THROWS_WITH_AS(run_world(2, outside), doctest::Contains("the root, rank 5, is not a member of group 0"), SimError);
  CHECK_THROWS_AS(run_world(2, two_roots), CollectiveMismatchError);
}

TEST_CASE("broadcast, reduce: the threaded communicator gives the root's values and the member-order sum") {
  exec::ThreadHub hub(3, {{0, 1, 2}, {2, 0}}, 30);
  std::vector<std::vector<float>> got(3, std::vector<float>(2, -1)), sum(3, std::vector<float>(2, -1));
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      exec::CpuDevice dev(std::chrono::steady_clock::now());
      auto comm = hub.communicator(r);
      dev.submit(0, {}, [&](exec::StreamContext& s) {
        std::vector<float> mine = {float(r + 1), float(10 * (r + 1))};
        if (r == 1) got[r] = mine;
        comm->broadcast(s, r == 1 ? got[r].data() : nullptr, got[r].data(), 2, 1, 0);  // in place on the root
        if (r != 1) comm->reduce(s, mine.data(), r == 0 ? sum[r].data() : nullptr, 2, 0, 1);
      }, 0);
      try {
        dev.synchronize();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(got[r] == std::vector<float>{2, 20});
  }
  CHECK(sum[0] == std::vector<float>{4, 40});   // 3 + 1 (group 1 is ranks 2, 0), on the root only
  CHECK(sum[2] == std::vector<float>{-1, -1});  // untouched elsewhere
}

TEST_CASE("gen zero3-owner: validates, simulates and round-trips, owners load, broadcast, receive and update") {
  for (int dp = 1; dp <= 5; ++dp)
    for (int m = 1; m <= 3; ++m)
      for (int layers : {0, 1, 3, 6}) {
        GenOptions o;
        o.dp = dp, o.microbatches = m, o.layers = layers;
        CAPTURE(dp);
        CAPTURE(m);
        CAPTURE(layers);
        const int L = layers == 0 ? 4 : layers;
        Schedule s = generate("zero3-owner", o);
        CHECK(s.header.version == 2);
        CHECK(s.header.world_size == dp);
        CHECK(s.header.microbatches == dp * m);
        SimResult r = simulate(s);
        INFO(r.error);
        CHECK(r.ok);
        const std::string text = print_schedule(s);
        CHECK(print_schedule(parse_schedule(text, "z.sched")) == text);
        for (int rank = 0; rank < dp; ++rank) {
          int owned = 0;
          for (int l = 0; l < L; ++l) owned += l % dp == rank;
          CHECK(count_kind(s, rank, OpKind::Update) == owned);
          // A broadcast before every forward and backward of every layer, a reduce per layer, with more than one rank.
          CHECK(count_kind(s, rank, OpKind::Broadcast) == (dp > 1 ? 2 * L * m : 0));
          CHECK(count_kind(s, rank, OpKind::Reduce) == (dp > 1 ? L : 0));
          for (const Op& op : s.ranks[rank])
            if (is_rooted(op.kind)) CHECK(op.peer == op.layer % dp);
        }
      }
  // The hardware cost model times it too.
  GenOptions o;
  o.dp = 4, o.microbatches = 2, o.layers = 4;
  Schedule s = generate("zero3-owner", o);
  CHECK_THROWS_WITH_AS(export_pytorch_csv(s, CsvForm::ComputeComms), doctest::Contains("stage map"), std::invalid_argument);
  s.header.stage_map = {0, 1, 2, 3};
  CHECK_THROWS_WITH_AS(export_pytorch_csv(s, CsvForm::ComputeComms),
                       doctest::Contains("rank 0: broadcast layer 0 root 0: a PyTorch CSV has no action for a broadcast"),
                       std::invalid_argument);
}

TEST_CASE("gen zero3-owner: the owner's peak holds its own layers only, below ddp's") {
  GenOptions o;
  o.dp = 4, o.microbatches = 2, o.layers = 8;
  SimResult owner = simulate(generate("zero3-owner", o)), ddp = simulate(generate("ddp", o));
  REQUIRE(owner.ok);
  REQUIRE(ddp.ok);
  CHECK(owner.trace.peak().memory < ddp.trace.peak().memory);
}

TEST_CASE("exec replay: zero3-owner on 3 ranks trains exactly like one device") {
  GenOptions o;
  o.dp = 3, o.microbatches = 2, o.layers = 4;
  Schedule s = generate("zero3-owner", o);
  exec::ReplayOptions ro = tiny_options(s);
  ro.check = true;
  exec::ReplayResult r = exec::replay(s, ro);
  INFO(r.error);
  REQUIRE(r.ok);
  CHECK(r.checked);
  CHECK(r.losses.size() == 3);
  CHECK(r.max_rel_diff_loss <= 1e-5);
  CHECK(r.max_rel_diff_weights <= 1e-5);
  for (double l : r.losses) CHECK(std::isfinite(l));
}
