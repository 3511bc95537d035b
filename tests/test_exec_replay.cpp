// The executor's heart (DESIGN §5): replaying a schedule with real tensors equals plain single-device
// training. For the eight puzzle solutions, every generator at 2 to 8 ranks and an imported PyTorch CSV, the
// loss of every step and the final weights match the single-device reference within 1e-5 relative (fp32;
// sums taken in another order differ by rounding only), over 3 steps.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>

#include "exec_helpers.h"
#include "puzzles/runner.h"
#include "schedules/generators.h"
#include "interop/pytorch_csv.h"
#include "interop/pytorch_csv_cells.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// `heads`: the model's attention heads when not the preset's (a TP degree t splits them, so t must divide them).
exec::ReplayResult check_equivalence(const Schedule& s, const std::string& what, int heads = 0) {
  INFO(what);
  exec::ReplayOptions o = tiny_options(s);
  if (heads > 0) o.model.heads = heads;
  o.check = true;
  exec::ReplayResult r = exec::replay(s, o);
  INFO(r.error);
  if (!r.ok) MESSAGE(what << ": " << r.error);
  CHECK(r.ok);
  CHECK(r.checked);
  CHECK(r.losses.size() == 3);
  CHECK(r.reference_losses.size() == 3);
  CHECK(r.max_rel_diff_loss <= 1e-5);
  CHECK(r.max_rel_diff_weights <= 1e-5);
  CHECK(r.replicas_identical);
  for (double l : r.losses) CHECK(std::isfinite(l));
  return r;
}

Schedule gen(const std::string& kind, int stages, int microbatches, int chunks = 1, int dp = 1, int layers = 0,
             bool reshard = true, int prefetch = 1) {
  GenOptions g;
  g.stages = stages, g.microbatches = microbatches, g.chunks = chunks, g.dp = dp, g.layers = layers;
  g.reshard_after_forward = reshard, g.prefetch = prefetch;
  return generate(kind, g);
}

}  // namespace

TEST_CASE("exec replay: the puzzle solutions train exactly like one device") {
  for (const auto& p : puzzles::catalog()) {
    if (p.ep > 1) continue;  // (the executor's model has no experts yet: test_puzzle_expert_parallel.cpp)
    puzzles::PuzzleResult run = puzzles::run_puzzle(p, false, true);
    REQUIRE(run.schedule);
    // Tensor parallelism splits every layer over p.tp ranks: as many heads as TP ranks.
    check_equivalence(*run.schedule, p.name, p.tp > 1 ? p.tp : 0);
  }
}

TEST_CASE("exec replay: pipeline schedules at 2 to 8 stages equal one device") {
  for (int p : {2, 3, 4, 8}) {
    check_equivalence(gen("gpipe", p, 4), "gpipe p=" + std::to_string(p));
    check_equivalence(gen("1f1b", p, p + 2), "1f1b p=" + std::to_string(p));
    check_equivalence(gen("zb-h1", p, p + 1), "zb-h1 p=" + std::to_string(p));
  }
  check_equivalence(gen("interleaved-1f1b", 2, 4, 2), "interleaved-1f1b p=2 v=2");
  check_equivalence(gen("interleaved-1f1b", 4, 8, 2), "interleaved-1f1b p=4 v=2");
  check_equivalence(gen("looped-bfs", 2, 4, 3), "looped-bfs p=2 v=3");
  check_equivalence(gen("looped-bfs", 4, 4, 2), "looped-bfs p=4 v=2");
}

TEST_CASE("exec replay: data-parallel and sharded schedules at 2 to 8 ranks equal one device") {
  for (int dp : {2, 3, 8}) {
    const std::string n = " dp=" + std::to_string(dp);
    check_equivalence(gen("ddp", 1, 2, 1, dp, 2), "ddp" + n);
    check_equivalence(gen("zero1", 1, 2, 1, dp, 2), "zero1" + n);
    check_equivalence(gen("zero2", 1, 2, 1, dp, 2), "zero2" + n);
    check_equivalence(gen("fsdp", 1, 2, 1, dp, 3, true), "fsdp reshard" + n);
    check_equivalence(gen("fsdp", 1, 2, 1, dp, 3, false, 2), "fsdp no-reshard prefetch 2" + n);
  }
  check_equivalence(gen("pp-fsdp", 2, 4, 1, 2), "pp-fsdp stages=2 dp=2");
  check_equivalence(gen("pp-fsdp", 4, 4, 1, 2), "pp-fsdp stages=4 dp=2");
}

TEST_CASE("exec replay: an imported PyTorch CSV equals one device") {
  Schedule s = gen("1f1b", 4, 8);
  std::string csv = export_pytorch_csv(s, CsvForm::ComputeOnly);
  check_equivalence(import_pytorch_csv(csv, 8), "1f1b via compute-only CSV");
  std::string comms = export_pytorch_csv(gen("interleaved-1f1b", 2, 4, 2), CsvForm::ComputeComms);
  check_equivalence(import_pytorch_csv(comms, 4), "interleaved-1f1b via compute+comms CSV");
  // Every RECV cell moved to the start of its row, as early as it can be posted: each receive waits on its
  // own stream (one per source rank) and the compute that reads it waits for it.
  std::string early;
  for (const std::string& row : csv::split_rows(comms, "comms.csv")) {
    std::vector<std::string> recvs, rest;
    for (const std::string& cell : csv::split_cells(row))
      (cell.find("RECV") != std::string::npos ? recvs : rest).push_back(cell);
    recvs.insert(recvs.end(), rest.begin(), rest.end());
    for (std::size_t i = 0; i < recvs.size(); ++i) early += (i ? "," : "") + recvs[i];
    early += "\n";
  }
  check_equivalence(import_pytorch_csv(early, 4), "interleaved-1f1b via a CSV with early RECV cells");
}

TEST_CASE("exec replay: a reduce-scatter that skips the sum still trains, and --check catches it") {
  Schedule s = gen("fsdp", 1, 2, 1, 2, 2);
  exec::ReplayOptions o = tiny_options(s, 4);
  o.check = true;
  o.fault.local_reduce_scatter = true;
  exec::ReplayResult r = exec::replay(s, o);
  // The loose check passes: every step has a finite loss and it falls...
  REQUIRE(r.losses.size() == 4);
  for (double l : r.losses) CHECK(std::isfinite(l));
  CHECK(r.losses.back() < r.losses.front());
  // ...but the comparison with one device fails, and says by how much.
  CHECK_FALSE(r.ok);
  CHECK(r.max_rel_diff_weights > 1e-3);
  CHECK(r.error.find("differs from single-device training") != std::string::npos);
}

TEST_CASE("exec replay: a rank that throws stops every rank with its error, quickly") {
  Schedule s = gen("1f1b", 4, 8);
  exec::ReplayOptions o = tiny_options(s, 3);
  o.timeout_seconds = 120;  // the job must end through the abort, not the timeout
  o.fault.throw_rank = 2;
  o.fault.throw_op = 5;
  auto start = std::chrono::steady_clock::now();
  exec::ReplayResult r = exec::replay(s, o);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK_FALSE(r.ok);
  INFO(r.error);
  CHECK(r.error.find("rank 2: ") == 0);
  CHECK(r.error.find("injected fault") != std::string::npos);
  CHECK(r.error.find(s.ranks[2][5].describe()) != std::string::npos);
  CHECK(seconds < 30);
}

TEST_CASE("exec replay: a schedule the simulator rejects is refused with the simulator's message") {
  Schedule s = gen("1f1b", 2, 2);
  // Drop rank 1's first receive: its forward then reads an activation it never got.
  for (auto it = s.ranks[1].begin(); it != s.ranks[1].end(); ++it)
    if (it->kind == OpKind::Recv) {
      s.ranks[1].erase(it);
      break;
    }
  exec::ReplayResult r = exec::replay(s, tiny_options(s));
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("the schedule does not validate: rank 1: ") == 0);
  CHECK(r.losses.empty());
}

TEST_CASE("exec replay: blocks that do not divide the layers are a clear error") {
  Schedule s = gen("1f1b", 4, 4);
  exec::ReplayOptions o = tiny_options(s);
  o.model.blocks = 6;
  exec::ReplayResult r = exec::replay(s, o);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("4 layers but the model has 6 blocks") != std::string::npos);
  CHECK(r.error.find("--blocks 8") != std::string::npos);
}

TEST_CASE("exec replay: clipping is off with a note where a layer is updated before every grad exists") {
  puzzles::PuzzleResult ddp = puzzles::run_puzzle(*puzzles::find_puzzle("ddp"), false, true);
  REQUIRE(ddp.schedule);
  exec::ReplayOptions o = tiny_options(*ddp.schedule);
  exec::ReplayResult r = exec::replay(*ddp.schedule, o);
  CHECK(r.ok);
  CHECK_FALSE(r.clip);
  CHECK(r.clip_note.find("update layer 0") != std::string::npos);
  o.clip_required = true;  // asked for explicitly: an error
  r = exec::replay(*ddp.schedule, o);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("--grad-clip 0") != std::string::npos);
  // 1f1b updates at the end: clipping runs, and it changes the result (the norm of the tiny model's first
  // grads is above a small clip)
  Schedule p = gen("1f1b", 2, 4);
  exec::ReplayOptions c = tiny_options(p);
  c.check = true;
  c.optimizer.grad_clip = 0.05f;
  exec::ReplayResult clipped = exec::replay(p, c);
  CHECK(clipped.ok);
  CHECK(clipped.clip);
  c.optimizer.grad_clip = 0;
  exec::ReplayResult free = exec::replay(p, c);
  CHECK(free.ok);
  CHECK_FALSE(free.clip);
  CHECK(clipped.losses.back() != free.losses.back());
}

TEST_CASE("exec replay: a schedule that does not keep its updated weights runs one step, not two") {
  Schedule s = gen("1f1b", 2, 2);
  // Free rank 0's updated weight at the very end: it cannot load it again next step.
  Op f;
  f.kind = OpKind::Free, f.rank = 0, f.reads = {weight_tensor(0, {0}, 1, 1)};
  s.ranks[0].push_back(f);
  exec::ReplayResult one = exec::replay(s, tiny_options(s, 1));
  CHECK(one.ok);
  exec::ReplayResult two = exec::replay(s, tiny_options(s, 2));
  CHECK_FALSE(two.ok);
  CHECK(two.error.find("rank 0 loads W0") != std::string::npos);
  CHECK(two.error.find("--steps 1") != std::string::npos);
}

TEST_CASE("exec replay: the measured timeline has every timed op of the last step, in order") {
  Schedule s = gen("zb-h1", 3, 4);
  exec::ReplayResult r = exec::replay(s, tiny_options(s, 2));
  REQUIRE(r.ok);
  REQUIRE(r.trace.ranks.size() == 3);
  CHECK(r.trace.memory_unit == "bytes");
  for (std::size_t rank = 0; rank < 3; ++rank) {
    std::size_t timed = 0;
    for (const Op& op : s.ranks[rank]) timed += is_timed(op.kind);
    CHECK(r.trace.ranks[rank].size() == timed);
    for (std::size_t i = 0; i < r.trace.ranks[rank].size(); ++i) {
      const OpRun& run = r.trace.ranks[rank][i];
      CHECK(run.start >= 0);
      CHECK(run.end >= run.start);
      CHECK(run.memory > 0);
      if (i > 0) CHECK(run.start >= r.trace.ranks[rank][i - 1].end);  // one stream: one op after the other
    }
  }
  // A stage's backward-weight really computes: it takes time comparable to its forward.
  CHECK(r.trace.makespan() > 0);
}

TEST_CASE("exec replay: sharding the weights really saves memory") {
  exec::ReplayResult ddp = exec::replay(gen("ddp", 1, 2, 1, 4, 4), tiny_options(gen("ddp", 1, 2, 1, 4, 4), 1));
  exec::ReplayResult fsdp = exec::replay(gen("fsdp", 1, 2, 1, 4, 4), tiny_options(gen("fsdp", 1, 2, 1, 4, 4), 1));
  REQUIRE(ddp.ok);
  REQUIRE(fsdp.ok);
  for (int r = 0; r < 4; ++r) {
    CHECK(fsdp.peak_bytes[r] < ddp.peak_bytes[r]);
    CHECK(fsdp.schedule_tensor_bytes[r] < ddp.schedule_tensor_bytes[r]);
    // the measured peak holds the schedule's tensors plus the forward's saved activations and temporaries
    CHECK(ddp.peak_bytes[r] >= ddp.schedule_tensor_bytes[r]);
  }
}

TEST_CASE("exec replay: a group's collectives on two streams (FSDP's all-gathers and reduce-scatters) equal one device") {
  // FSDP as FSDP2 runs it: all-gathers on one communication stream, reduce-scatters on another, both over the
  // data-parallel group. A communicator numbers a group's calls as they run, and two streams of a rank run in
  // either order: the executor gives each stream its own copy of the group (exec/plan.h, comm_group).
  GenOptions g;
  g.dp = 4, g.layers = 3, g.microbatches = 2;
  Schedule s = generate("fsdp", g);
  int gathers = 0, scatters = 0;
  for (auto& ops : s.ranks)
    for (Op& op : ops) {
      if (op.kind == OpKind::AllGather) op.stream = 1, ++gathers;
      if (op.kind == OpKind::ReduceScatter) op.stream = 2, ++scatters;
    }
  REQUIRE(gathers > 0);
  REQUIRE(scatters > 0);
  REQUIRE(simulate(s).ok);
  for (int round = 0; round < 3; ++round) check_equivalence(s, "fsdp, all-gathers on stream 1, reduce-scatters on 2");
  // Members that run the same collective of the group on different streams cannot share a stream's numbering:
  // refused before any rank starts, naming the op and both streams.
  Schedule crossed = s;
  for (Op& op : crossed.ranks[1])
    if (op.kind == OpKind::AllGather) {
      op.stream = 2;
      break;
    }
  REQUIRE(simulate(crossed).ok);  // (the simulator matches a group's calls in program order, whatever the stream)
  exec::ReplayResult r = exec::replay(crossed, tiny_options(crossed));
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("rank 1: all-gather layer 0") != std::string::npos);
  CHECK(r.error.find("collective #0 of group 0 runs on stream 2 here but on stream 1 on rank 0") != std::string::npos);
}
