// Sequence parallelism in the executor (docs/executor.md, "Sequence parallelism"; Korthikanti et al. 2022): a
// layer's closing partial sum is reduce-scattered over the TP group into the rank's sequence shard, which is what
// the rank keeps, sends and receives, and an all-gather over the TP group brings the whole activation back
// before each pass that reads it; the activation grads likewise. Replays of the generators' SP schedules (gen tp
// --tp 2 and 4, gen 3d TP x PP x DP with DDP, ZeRO-1 and FSDP) equal single-device training within 1e-5
// relative (fp32) over 3 steps, and equal the same schedule without SP bit for bit (a reduce-scatter then an
// all-gather sum in the member order an all-reduce does).
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>

#include "cli_helpers.h"
#include "exec/sequence_shard.h"
#include "exec_helpers.h"
#include "schedules/generators.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// The tiny model with 4 heads (so that TP 4 splits them), one block per schedule layer.
exec::ReplayOptions sp_options(const Schedule& s) {
  exec::ReplayOptions o = tiny_options(s);
  o.model.heads = 4;
  return o;
}

// How many of the schedule's collectives over a TP group move an activation or activation grad of `kind`.
int sequence_collectives(const Schedule& s, OpKind kind) {
  int n = 0;
  for (const auto& ops : s.ranks)
    for (const Op& op : ops)
      if (op.kind == kind && !op.reads.empty() &&
          (op.reads.front().kind == TensorKind::Activation || op.reads.front().kind == TensorKind::ActivationGrad))
        ++n;
  return n;
}

// Applies `runs` to `from`, into a buffer of `n` elements.
std::vector<int> apply(const std::vector<exec::CopyRun>& runs, const std::vector<int>& from, long n) {
  std::vector<int> out(n, -1);
  for (const exec::CopyRun& r : runs)
    for (long e = 0; e < r.count; ++e) out[r.dst + e] = from[r.src + e];
  return out;
}

}  // namespace

TEST_CASE("exec SP: sequence shard j of t holds tokens j·T/t to (j+1)·T/t - 1 of every sequence") {
  exec::ModelConfig m = exec::preset("tiny");  // seq 16, 2 sequences per microbatch, dim 32
  m.heads = 4;
  const exec::ModelShapes shapes(m, 2, {2, 4});
  const Tensor whole = activation_tensor(1, IdSet::range(0, 2));  // 2 microbatches: 4 sequences of 16 tokens
  for (int t : {2, 4}) {
    CAPTURE(t);
    const exec::SequenceShards s = exec::sequence_shards(shapes, shard(whole, 0, t));
    CHECK(s.sequences == 4);
    CHECK(s.rows == 16 / t);
    CHECK(s.width == 32);
    CHECK(s.count == t);
    // The memory a shard takes is its share: 1/t of the whole, k of them k/t.
    CHECK(shapes.bytes(shard(whole, 1, t)) * t == shapes.bytes(whole));
    Tensor two = shard(whole, 0, t);
    two.shards = IdSet::range(0, 2);
    CHECK(shapes.bytes(two) * t == 2 * shapes.bytes(whole));
    Tensor all = whole;
    all.num_shards = t, all.shards = IdSet::range(0, t);
    CHECK(shapes.bytes(all) == shapes.bytes(whole));
    // The grad of the logits' vocabulary slice, sharded by sequence: width V/t.
    Tensor logits = tp_slice(activation_grad_tensor(2, IdSet{0}), 0, t);
    logits.num_shards = t, logits.shards = IdSet{1};
    CHECK(exec::sequence_shards(shapes, logits).width == 256 / t);
    CHECK(shapes.bytes(logits) * t * t == shapes.bytes(activation_grad_tensor(2, IdSet{0})));

    // A whole tensor whose element e is its row number (width 1 here), laid out for a reduce-scatter: piece m
    // holds, sequence after sequence, that sequence's rows [m·T/t, (m+1)·T/t).
    exec::SequenceShards rows = s;
    rows.width = 1;
    const long n = rows.sequences * 16;
    std::vector<int> value(n);
    std::iota(value.begin(), value.end(), 0);
    const std::vector<int> pieces = apply(exec::scatter_copies(rows), value, n);
    for (int j = 0; j < t; ++j)
      for (long i = 0; i < rows.sequences; ++i)
        for (long r = 0; r < rows.rows; ++r)
          CHECK(pieces[(j * rows.sequences + i) * rows.rows + r] == i * 16 + j * 16 / t + r);
    // The all-gather of those pieces, in member order, gives the whole back.
    CHECK(apply(exec::gather_copies(rows, t, 1, {}), pieces, n) == value);
    // Pieces that arrive in another order (member q holds shard t−1−q): the plan's order puts them back.
    std::vector<int> reversed(n), order(t);
    for (int q = 0; q < t; ++q) {
      order[q] = t - 1 - q;
      std::copy_n(pieces.begin() + (t - 1 - q) * n / t, n / t, reversed.begin() + q * n / t);
    }
    CHECK(apply(exec::gather_copies(rows, t, 1, order), reversed, n) == value);
  }
  // One sequence per tensor: the shards are contiguous, and no copy is needed.
  exec::SequenceShards one{.sequences = 1, .rows = 8, .width = 32, .count = 2};
  CHECK(exec::is_identity(exec::scatter_copies(one), 512));
  CHECK(exec::is_identity(exec::gather_copies(one, 2, 1, {}), 512));
  CHECK_FALSE(exec::is_identity(exec::gather_copies(one, 2, 1, {1, 0}), 512));
  // A sequence that does not split is refused, naming the tensor.
  m.seq = 15;
  const exec::ModelShapes odd(m, 2, {2});
  CHECK_THROWS_WITH_AS(odd.elements(shard(whole, 1, 2)),
                       doctest::Contains("A1{0-1}[1/2] is sequence shard 1 of 2, but a sequence of 15 tokens does not "
                                         "split into 2 equal shards"),
                       std::invalid_argument);
}

TEST_CASE("exec SP: the generators' sequence-parallel schedules train as one device does, and as without SP") {
  struct Case {
    const char* kind;
    int tp, pp, dp, zero;
    const char* order;
    int microbatch_size;
  };
  for (const Case& c : {Case{"tp", 2, 1, 1, 0, "1f1b", 2}, Case{"tp", 4, 1, 1, 0, "1f1b", 2},
                        Case{"tp", 2, 1, 1, 0, "1f1b", 1}, Case{"3d", 2, 2, 2, 0, "1f1b", 2},
                        Case{"3d", 2, 2, 2, 1, "1f1b", 2}, Case{"3d", 2, 2, 2, 3, "1f1b", 2},
                        Case{"3d", 2, 2, 1, 0, "zb-h1", 2}}) {
    CAPTURE(c.kind);
    CAPTURE(c.tp);
    CAPTURE(c.pp);
    CAPTURE(c.dp);
    CAPTURE(c.zero);
    CAPTURE(c.order);
    CAPTURE(c.microbatch_size);
    GenOptions g;
    g.tp = c.tp, g.pp = c.pp, g.dp = c.dp, g.zero = c.zero, g.schedule = c.order;
    g.microbatches = 2;
    g.sequence_parallel = true;
    const Schedule s = generate(c.kind, g);
    REQUIRE(simulate(s).ok);
    // Not vacuous: the schedule reduce-scatters and all-gathers activations and their grads.
    CHECK(sequence_collectives(s, OpKind::ReduceScatter) > 0);
    CHECK(sequence_collectives(s, OpKind::AllGather) > 0);
    CHECK(sequence_collectives(s, OpKind::AllReduce) == 0);
    // A replay with --check: it equals single-device training within 1e-5 (fp32), over 3 steps.
    auto checked = [&](const Schedule& x) {
      exec::ReplayOptions o = sp_options(x);
      o.model.microbatch_size = c.microbatch_size;
      o.check = true;
      exec::ReplayResult r = exec::replay(x, o);
      INFO(r.error);
      REQUIRE(r.ok);
      CHECK(r.checked);
      REQUIRE(r.losses.size() == 3);
      CHECK(r.max_rel_diff_loss <= 1e-5);
      CHECK(r.max_rel_diff_weights <= 1e-5);
      CHECK(r.replicas_identical);
      CHECK(r.losses.back() < r.losses.front());
      return r;
    };
    const exec::ReplayResult r = checked(s);
    // The same schedule without SP (all-reduces): the same bits, since a reduce-scatter then an all-gather sum
    // in member order as the all-reduce does.
    g.sequence_parallel = false;
    const exec::ReplayResult p = checked(generate(c.kind, g));
    CHECK(p.losses == r.losses);
    CHECK(p.max_rel_diff_weights == r.max_rel_diff_weights);
  }
}

TEST_CASE("exec SP: a sequence that does not split over the TP group is refused before any rank starts") {
  GenOptions g;
  g.tp = 2, g.pp = 2, g.microbatches = 2, g.sequence_parallel = true;
  // Through the text format, so that ops carry file:line.
  const Schedule s = parse_schedule(print_schedule(generate("3d", g)), "sp.sched");
  exec::ReplayOptions o = sp_options(s);
  o.model.seq = 15;
  exec::ReplayResult r = exec::replay(s, o);
  CHECK_FALSE(r.ok);
  INFO(r.error);
  CHECK(has(r.error, "(sp.sched:"));
  CHECK(has(r.error, "is sequence shard 0 of 2, but a sequence of 15 tokens does not split into 2 equal shards"));
  CHECK(has(r.error, "(--seq) must be a multiple of the TP degree"));
}
