// Stream semantics (DESIGN §2, schedules/stream_sim.h): a rank issues its ops without blocking on other
// ranks, each op runs in order on its stream, a recv only posts its receive and the op that reads the
// message waits for it. Compared on the same schedules with the receives moved between streams, and on
// PyTorch CSVs whose RECV cells come early.
#include <doctest/doctest.h>

#include <algorithm>

#include "schedules/generators.h"
#include "interop/pytorch_csv.h"
#include "interop/pytorch_csv_cells.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;

namespace {

Schedule gen(const std::string& kind, int stages, int microbatches, int chunks = 1) {
  GenOptions g;
  g.stages = stages, g.microbatches = microbatches, g.chunks = chunks;
  return generate(kind, g);
}

// Moves every recv of every rank to the start of its op list (keeping their order), on `stream`.
Schedule hoist_receives(const Schedule& s, int stream) {
  Schedule out = s;
  for (auto& ops : out.ranks) {
    std::vector<Op> recvs, rest;
    for (Op op : ops) {
      if (op.kind == OpKind::Recv) {
        op.stream = stream;
        recvs.push_back(std::move(op));
      } else {
        rest.push_back(std::move(op));
      }
    }
    ops = recvs;
    ops.insert(ops.end(), rest.begin(), rest.end());
  }
  return out;
}

// The CSV with every RECV cell of a row moved to the row's start, in order (as early as it can be posted).
std::string early_recv_cells(const std::string& csv) {
  std::string out;
  for (const std::string& row : csv::split_rows(csv, "early.csv")) {
    std::vector<std::string> recvs, rest;
    for (const std::string& cell : csv::split_cells(row))
      (cell.find("RECV") != std::string::npos ? recvs : rest).push_back(cell);
    recvs.insert(recvs.end(), rest.begin(), rest.end());
    for (std::size_t i = 0; i < recvs.size(); ++i) out += (i ? "," : "") + recvs[i];
    out += "\n";
  }
  return out;
}

SimResult sim(const Schedule& s) {
  SimResult r = simulate(s);
  INFO(r.error);
  return r;
}

}  // namespace

TEST_CASE("stream semantics: a receive on its own stream only posts, on the compute stream it blocks") {
  Schedule s = gen("gpipe", 3, 4);
  SimResult base = sim(s);
  REQUIRE(base.ok);
  // Posted at the start on a communication stream: nothing changes, each forward still waits for its input.
  SimResult posted = sim(hoist_receives(s, 1));
  REQUIRE(posted.ok);
  CHECK(posted.trace.makespan() == base.trace.makespan());
  // At the start of the compute stream: a rank computes nothing until every message has come.
  SimResult blocking = sim(hoist_receives(s, 0));
  CHECK(!blocking.ok);  // the last stage's backward messages come after its forwards: a cycle of waits
  CHECK(blocking.error.find("deadlock") != std::string::npos);
  CHECK(blocking.error.find("wait-for cycle") != std::string::npos);
}

TEST_CASE("stream semantics: ops start when their stream is free and their inputs exist, not in program order") {
  // gpipe on 2 stages with the second stage's receives posted on stream 1: its forward of microbatch b starts
  // when A1{b} arrives (the end of the first stage's forward b), as in the one-stream schedule.
  Schedule s = hoist_receives(gen("gpipe", 2, 3), 1);
  SimResult r = sim(s);
  REQUIRE(r.ok);
  std::vector<Time> forward_ends0, forward_starts1;
  for (const OpRun& run : r.trace.ranks[0])
    if (run.op.kind == OpKind::Forward) forward_ends0.push_back(run.end);
  for (const OpRun& run : r.trace.ranks[1])
    if (run.op.kind == OpKind::Forward) forward_starts1.push_back(run.start);
  REQUIRE(forward_ends0.size() == 3);
  REQUIRE(forward_starts1.size() == 3);
  for (int b = 0; b < 3; ++b) CHECK(forward_starts1[b] == std::max(forward_ends0[b], b ? forward_starts1[b - 1] + seconds(1) : 0));
  // The receives ran at their messages' times, not at program position 0.
  std::vector<Time> recv_starts;
  for (const OpRun& run : r.trace.ranks[1])
    if (run.op.kind == OpKind::Recv) recv_starts.push_back(run.start);
  REQUIRE(recv_starts.size() == 3 + 0);
  CHECK(recv_starts[1] > recv_starts[0]);
}

TEST_CASE("stream semantics: an exchange that deadlocks on one stream runs with receives on another") {
  const std::string head = "trainsim-schedule 1\nworld_size 2\nlayers 1\nmicrobatches 2\ncost_model unit\np2p per-pair\n";
  auto rank = [](int r, const std::string& recv_stream) {
    std::string me = std::to_string(r), other = std::to_string(1 - r);
    return "rank " + me + "\n  load -> A0{" + me + "}\n  recv from " + other + recv_stream + " -> A0{" + other +
           "}\n  send to " + other + " : A0{" + me + "}\n";
  };
  SimResult blocked = simulate(parse_schedule(head + rank(0, "") + rank(1, ""), "x.sched"));
  CHECK(!blocked.ok);
  CHECK(blocked.error.find("wait-for cycle: rank 0 -> rank 1 -> rank 0") != std::string::npos);
  SimResult posted = simulate(parse_schedule(head + rank(0, " stream 1") + rank(1, " stream 1"), "x.sched"));
  // Both exchanges complete; the run then fails only because no layer is updated (this is no training step).
  CHECK(posted.error == "layer 0 is never updated");
}

TEST_CASE("PyTorch CSV: early RECV cells post, the makespan is the runtime's, as with compute-only rows") {
  for (auto [p, m, v] : {std::tuple{4, 8, 2}, std::tuple{8, 16, 2}, std::tuple{4, 8, 1}}) {
    CAPTURE(p);
    CAPTURE(m);
    CAPTURE(v);
    Schedule s = v > 1 ? gen("interleaved-1f1b", p, m, v) : gen("1f1b", p, m);
    Schedule compute_only = import_pytorch_csv(export_pytorch_csv(s, CsvForm::ComputeOnly), m);
    std::string comms = export_pytorch_csv(s, CsvForm::ComputeComms);
    std::string early = early_recv_cells(comms);
    REQUIRE(early != comms);
    Schedule imported = import_pytorch_csv(early, m);
    SimResult a = sim(compute_only), b = sim(imported), c = sim(import_pytorch_csv(comms, m));
    REQUIRE(a.ok);
    REQUIRE(b.ok);
    REQUIRE(c.ok);
    CHECK(b.trace.makespan() == a.trace.makespan());
    CHECK(c.trace.makespan() == a.trace.makespan());
    // The generator's own schedule (receives right before use, one stream) takes as long.
    CHECK(sim(s).trace.makespan() == a.trace.makespan());
    // With blocking receives (all on the compute stream) the early cells cost time or deadlock.
    SimResult blocking = sim(hoist_receives(imported, 0));
    CHECK((!blocking.ok || blocking.trace.makespan() > a.trace.makespan()));
  }
}

TEST_CASE("stream semantics: a deadlock over many ranks is reported in bounded size, with the cycle") {
  const int n = 5000;
  std::string text = "trainsim-schedule 1\nworld_size " + std::to_string(n) +
                     "\nlayers 1\nmicrobatches " + std::to_string(n) + "\ncost_model unit\np2p per-pair\n";
  for (int r = 0; r < n; ++r)  // each rank waits for the next one's message before sending its own
    text += "rank " + std::to_string(r) + "\n  load -> A0{" + std::to_string(r) + "}\n  recv from " +
            std::to_string((r + 1) % n) + " -> A0{" + std::to_string((r + 1) % n) + "}\n  send to " +
            std::to_string((r + n - 1) % n) + " : A0{" + std::to_string(r) + "}\n";
  SimResult r = simulate(parse_schedule(text, "ring.sched"));
  REQUIRE(!r.ok);
  CHECK(r.error.find("deadlock: no event is left at t=0 and ranks 0, 1, 2") != std::string::npos);
  CHECK(r.error.find("and 4984 more are blocked") != std::string::npos);
  CHECK(r.error.find("... and 4984 more blocked ranks") != std::string::npos);
  CHECK(r.error.find("wait-for cycle: rank 0 -> rank 1 -> rank 2") != std::string::npos);
  CHECK(r.error.find("more ranks) -> rank 0") != std::string::npos);
  CHECK(r.error.size() < 4000);
  // The report lists 16 ranks in words; the result lists every blocked rank as data (what the timeline marks).
  REQUIRE(r.blocked.size() == static_cast<std::size_t>(n));
  CHECK(r.blocked.back().rank == n - 1);
  CHECK(r.blocked.back().op == "recv from rank 0 (ring.sched:" + std::to_string(7 + 4 * (n - 1) + 2) + ")");
  CHECK(r.blocked.back().detail == "waiting for a message from rank 0");
}

TEST_CASE("stream semantics: after a deadlock the trace holds what ran before it") {
  Schedule s = gen("gpipe", 2, 2);
  // Drop rank 1's last send (the gradient back to rank 0): rank 0's last receive never completes.
  for (auto it = s.ranks[1].rbegin(); it != s.ranks[1].rend(); ++it)
    if (it->kind == OpKind::Send) {
      s.ranks[1].erase(std::next(it).base());
      break;
    }
  SimResult r = simulate(s);
  REQUIRE(!r.ok);
  CHECK(r.error.find("deadlock") != std::string::npos);
  auto count = [&](int rank, OpKind k) {
    int n = 0;
    for (const OpRun& run : r.trace.ranks[rank]) n += run.op.kind == k;
    return n;
  };
  CHECK(count(0, OpKind::Forward) == 2);   // rank 0 ran its forwards and one backward
  CHECK(count(0, OpKind::Backward) == 1);
  CHECK(count(1, OpKind::Backward) == 2);  // rank 1 finished
  for (const OpRun& run : r.trace.ranks[0]) CHECK(run.end <= r.trace.makespan());
}

TEST_CASE("stream semantics: without per-op records the summary equals the trace's figures") {
  // Schedules where the peak, the bubble and the last op differ in kind: pipeline, FSDP, pipeline + FSDP.
  for (const char* kind : {"1f1b", "zb-h1", "fsdp", "pp-fsdp"}) {
    CAPTURE(kind);
    GenOptions o;
    o.stages = 3, o.microbatches = 5, o.dp = 2, o.layers = 3;
    Schedule s = generate(kind, o);
    SimResult full = simulate(s);
    SimOptions bare;
    bare.record_trace = false;
    SimResult summary_only = simulate(s, bare);
    REQUIRE(full.ok);
    REQUIRE(summary_only.ok);
    const RunSummary expect = full.trace.summary();
    CHECK(expect.timed_ops > 0);
    CHECK(summary_only.trace.op_count() == 0);  // no records kept
    CHECK(summary_only.summary.makespan == expect.makespan);
    CHECK(summary_only.summary.timesteps == expect.timesteps);
    CHECK(summary_only.summary.bubble_fraction == doctest::Approx(expect.bubble_fraction).epsilon(1e-12));
    CHECK(summary_only.summary.peak.memory == expect.peak.memory);
    CHECK(summary_only.summary.peak.rank == expect.peak.rank);
    CHECK(summary_only.summary.peak.time == expect.peak.time);
    CHECK(summary_only.summary.timed_ops == expect.timed_ops);
    CHECK(full.summary.makespan == expect.makespan);  // and the recording run fills its summary too
  }
}

namespace {

// Forward 1 s per batch, backward 2 s, a send 5 s (a slow link), everything else free; every tensor 1 unit.
struct SlowSendCost final : CostModel {
  std::string name() const override { return "slow-send"; }
  Time duration(const Op& op, int) const override {
    switch (op.kind) {
      case OpKind::Forward: return seconds(op.batches.size());
      case OpKind::Backward: return seconds(2 * op.batches.size());
      case OpKind::Send: return seconds(5);
      default: return 0;
    }
  }
  double memory(const Tensor&) const override { return 1; }
  std::string memory_unit() const override { return "tensors"; }
};

}  // namespace

TEST_CASE("stream semantics: a free after a send on another stream holds the memory, not the compute stream") {
  // gpipe on 2 stages, rank 0's sends on stream 1. Rank 0 runs `forward {0}; send A1{0} (stream 1); free A1{0};
  // load A0{1}; forward {1}`: the second forward starts when the first ends (t=1), while the send runs until
  // t=6, and A1{0} stays resident until then (the free takes effect when its last user, the send, ends).
  Schedule s = gen("gpipe", 2, 2);
  for (Op& op : s.ranks[0])
    if (op.kind == OpKind::Send) op.stream = 1;
  SlowSendCost cost;
  SimOptions options;
  options.cost = &cost;
  SimResult r = simulate(s, options);
  INFO(r.error);
  REQUIRE(r.ok);
  std::vector<const OpRun*> forwards, sends;
  for (const OpRun& run : r.trace.ranks[0]) {
    if (run.op.kind == OpKind::Forward) forwards.push_back(&run);
    if (run.op.kind == OpKind::Send) sends.push_back(&run);
  }
  REQUIRE(forwards.size() == 2);
  REQUIRE(sends.size() == 2);
  CHECK(forwards[0]->end == seconds(1));
  CHECK(sends[0]->start == seconds(1));
  CHECK(sends[0]->end == seconds(6));
  CHECK(forwards[1]->start == seconds(1));  // not t=6: the free does not hold the compute stream
  // The second send waits for the first on stream 1. When it starts (t=6) the first send's A1{0} was freed
  // at that same moment, so what is resident is W0 O0, A0{0} (kept for the backward), A0{1} and A1{1}.
  CHECK(sends[1]->start == seconds(6));
  CHECK(sends[1]->memory == doctest::Approx(5));
  // During the second forward, A1{0} is still resident (its send is in flight): W0 O0 A0{0} A1{0} A0{1}.
  CHECK(forwards[1]->memory == doctest::Approx(5));
}

TEST_CASE("stream semantics: chains of dependencies as long as the schedule are timed without recursion") {
  // GPipe over 2 stages: rank 1's first gradient send waits, through its stream order, for every op it ran
  // before (all its forwards), and the engine meets that chain first from rank 0's first receive: the
  // timing search goes about 150,000 ops deep, past what a recursive search could on an 8 MiB stack.
  const int p = 2, m = 50000;
  SimOptions summary_only;
  summary_only.record_trace = false;
  SimResult r = simulate(gen("gpipe", p, m), summary_only);
  REQUIRE(r.ok);
  // Unit costs: a forward and a backward take one second each per batch, so the bubble is (p-1)/(m+p-1).
  CHECK(r.summary.bubble_fraction == doctest::Approx(static_cast<double>(p - 1) / (m + p - 1)));
}

TEST_CASE("stream semantics: a send on a communication stream leaves once the compute issued before it has ended") {
  // gpipe on 2 stages, rank 0's sends on stream 1: `forward {0}; send A1{0}; forward {1}` sends at t=1. With the
  // send issued after `forward {1}` it leaves at t=2, when the compute stream reaches it (NCCL's isend waits
  // for the current stream), though A1{0} exists since t=1; rank 1's forward {0} waits for it.
  Schedule s = gen("gpipe", 2, 2);
  for (Op& op : s.ranks[0])
    if (op.kind == OpKind::Send) op.stream = 1;
  auto times = [](const Schedule& x) {
    SimResult r = sim(x);
    REQUIRE(r.ok);
    Time send = -1, forward1 = -1;
    for (const OpRun& run : r.trace.ranks[0])
      if (run.op.kind == OpKind::Send && send < 0) send = run.start;
    for (const OpRun& run : r.trace.ranks[1])
      if (run.op.kind == OpKind::Forward && forward1 < 0) forward1 = run.start;
    return std::pair{send, forward1};
  };
  CHECK(times(s) == std::pair{seconds(1), seconds(1)});
  // Move `send A1{0}` and its free after the second forward.
  auto& ops = s.ranks[0];
  auto send = std::find_if(ops.begin(), ops.end(), [](const Op& op) { return op.kind == OpKind::Send; });
  REQUIRE(send != ops.end());
  std::vector<Op> moved(send, send + 2);  // the send and the free after it
  REQUIRE(moved[1].kind == OpKind::Free);
  ops.erase(send, send + 2);
  auto second = std::find_if(ops.begin(), ops.end(), [](const Op& op) { return op.kind == OpKind::Forward && op.batches.contains(1); });
  REQUIRE(second != ops.end());
  ops.insert(second + 1, moved.begin(), moved.end());
  CHECK(times(s) == std::pair{seconds(2), seconds(2)});
}
