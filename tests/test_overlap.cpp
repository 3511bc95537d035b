// Overlap as the frameworks do it (docs/design.md, "Overlap as the frameworks do it"): the data-parallel
// generators put their collectives on communication stream 1; a collective there starts no earlier than the
// compute issued before it (schedules/stream_sim.h), so where FSDP's all-gathers are issued bounds how many run
// ahead; DDP all-reduces its grads in buckets during the backward.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "schedules/generators.h"
#include "schedules/hardware_sim.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

GenOptions dp_options(int dp, int layers, int microbatches, int prefetch = 1) {
  GenOptions o;
  o.dp = dp, o.layers = layers, o.microbatches = microbatches, o.prefetch = prefetch;
  return o;
}

// The records of rank `rank`'s ops of `kind` and layer `layer`, in start order.
std::vector<OpRun> runs_of(const Trace& t, int rank, OpKind kind, int layer) {
  std::vector<OpRun> out;
  for (const OpRun& r : t.ranks[rank])
    if (r.op.kind == kind && r.op.layer == layer) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const OpRun& a, const OpRun& b) { return a.start < b.start; });
  return out;
}

}  // namespace

TEST_CASE("overlap: the data-parallel collectives run on FSDP2's streams: all-gathers on 1, reductions on 2") {
  // ddp: its all-reduces on its one communication stream, 1; the others: all-gathers (of weights) on 1, the grads'
  // reduce-scatters and all-reduces on 2, as FSDP2's all-gather and reduce-scatter streams.
  for (const char* kind : {"ddp", "zero1", "zero2", "fsdp"}) {
    INFO(kind);
    Schedule s = generate(kind, dp_options(4, 3, 2));
    const int reductions = std::string(kind) == "ddp" ? 1 : 2;
    int collectives = 0;
    for (const auto& ops : s.ranks)
      for (const Op& op : ops) {
        if (is_collective(op.kind)) {
          ++collectives;
          CHECK(op.stream == (op.kind == OpKind::AllGather ? 1 : reductions));
        }
        if (is_compute(op.kind)) CHECK(op.stream == 0);
      }
    CHECK(collectives > 0);
    CHECK(simulate(s).ok);
  }
  // pp-fsdp: the pipeline builder's one data-parallel stream, 1.
  GenOptions o;
  o.stages = 2, o.dp = 2, o.microbatches = 2;
  Schedule pp = generate("pp-fsdp", o);
  int collectives = 0;
  for (const auto& ops : pp.ranks)
    for (const Op& op : ops)
      if (is_collective(op.kind)) {
        ++collectives;
        CHECK(op.stream == 1);
      }
  CHECK(collectives == 2 * 2 * 2);  // per rank: its layer's all-gather and reduce-scatter
}

TEST_CASE("overlap: one group's collectives take turns across streams, as one NCCL communicator runs them") {
  // FSDP on the hardware model: all-gathers on stream 1, reduce-scatters on stream 2, both over group 0. On every
  // rank no two of them overlap in time, and each starts no earlier than the one issued before it ends.
  auto dir = fresh_dir("overlap-turns");
  const std::string file = (dir / "fsdp.sched").string();
  REQUIRE(run_trainsim("gen fsdp --dp 16 --layers 8 --microbatches 2 --model llama3-8b --device h100-sxm "
                       "--network nvlink8-ib400 --recompute selective -o " + file).exit_code == 0);
  Schedule s = parse_schedule(slurp(file), file);
  HardwareRun run = simulate_hardware(s);
  REQUIRE(run.result.ok);
  for (int rank : {0, 15}) {
    CAPTURE(rank);
    std::vector<OpRun> calls;
    std::set<int> streams;
    for (const OpRun& r : run.result.trace.ranks[rank])
      if (is_collective(r.op.kind)) calls.push_back(r), streams.insert(r.op.stream);
    CHECK(streams == std::set<int>{1, 2});
    std::sort(calls.begin(), calls.end(), [](const OpRun& a, const OpRun& b) { return a.start < b.start; });
    REQUIRE(calls.size() > 1);
    for (std::size_t i = 1; i < calls.size(); ++i) CHECK(calls[i].start >= calls[i - 1].end);
  }
}

TEST_CASE("overlap: an all-gather starts after the compute that frees its slot, prefetch layers ahead") {
  // Unit costs: a forward or backward takes 1 s, communication none. One microbatch of L layers: forward l
  // runs [l, l+1], the loss at L takes nothing, backward l runs [L + (L-1-l), L + (L-l)]. The all-gather of
  // layer l (docs/design.md, "Overlap") waits for the end of the compute issued before it:
  //   forward, prefetch k >= 1: after forward l-k-2, so it starts at max(0, l-k-1); prefetch 0: at l;
  //   backward, prefetch k: after backward l+k+1 (or at the backward's start, L), so at max(L, 2L-l-k-1).
  const int L = 7;
  for (int k = 0; k <= 3; ++k) {
    CAPTURE(k);
    SimResult r = simulate(generate("fsdp", dp_options(2, L, 1, k)));
    REQUIRE(r.ok);
    for (int l = 0; l < L; ++l) {
      CAPTURE(l);
      std::vector<OpRun> gathers = runs_of(r.trace, 0, OpKind::AllGather, l);
      // Gathered for the forward and (all but the last layer, kept) again for the backward.
      REQUIRE(gathers.size() == (l == L - 1 ? 1u : 2u));
      const double forward_start = k == 0 ? l : std::max(0, l - k - 1);
      CHECK(to_seconds(gathers[0].start) == doctest::Approx(forward_start));
      if (l < L - 1) CHECK(to_seconds(gathers[1].start) == doctest::Approx(std::max(L, 2 * L - l - k - 1)));
      // ... and never holds a forward or backward up: the unit makespan is the compute's.
    }
    CHECK(to_seconds(r.summary.makespan) == doctest::Approx(2.0 * L));
  }
}

TEST_CASE("overlap: DDP all-reduces buckets of consecutive layers once their last grad is ready") {
  const int L = 8, m = 2;
  for (int bucket : {1, 3, 8, 20}) {
    CAPTURE(bucket);
    GenOptions o = dp_options(2, L, m);
    o.bucket_layers = bucket;
    Schedule s = generate("ddp", o);
    REQUIRE(simulate(s).ok);
    // Buckets from the last layer down: bucket b holds layers top = L-1-b*K down to max(0, top-K+1); its
    // all-reduces come right after the last microbatch's backward of its lowest layer, highest layer first.
    std::vector<int> expected;  // the layers' order of all-reduce, with -1 for "a backward of layer low"
    const int K = std::min(bucket, L);
    for (int top = L - 1; top >= 0; top -= K) {
      const int low = std::max(0, top - K + 1);
      for (int l = top; l >= low; --l) expected.push_back(l);
    }
    std::vector<int> seen;
    int last_backward = -1, backwards = 0;
    for (const Op& op : s.ranks[0]) {
      if (op.kind == OpKind::Backward) last_backward = op.layer, ++backwards;
      if (op.kind != OpKind::AllReduce) continue;
      seen.push_back(op.layer);
      CHECK(backwards > (m - 1) * L);  // in the last microbatch's backward
      const int top = L - 1 - ((L - 1 - op.layer) / K) * K;
      CHECK(last_backward == std::max(0, top - K + 1));
    }
    CHECK(seen == expected);
  }
  CHECK_THROWS_WITH_AS(generate("ddp", [] {
    GenOptions o;
    o.bucket_layers = 0;
    return o;
  }()), doctest::Contains("--bucket-layers"), std::invalid_argument);
}

TEST_CASE("overlap: gen ddp turns --bucket-mb into layers with the model's grad bytes") {
  // A GPT-2 124M block holds 12·768² + 13·768 = 7,087,872 parameters, 14.2 MB of bf16 grads; DDP closes a bucket
  // once it holds at least the cap, so 25 MiB (26,214,400 bytes) takes ceil(26.2 / 14.2) = 2 blocks and 100 MiB
  // ceil(104.9 / 14.2) = 8. One block per layer (--layers 12). With the default fp32 grads (28.4 MB a block) a
  // block fills a 25 MiB bucket alone, and 100 MiB take ceil(104.9 / 28.4) = 4.
  auto buckets = [](const std::string& extra) {
    CommandResult r = run_trainsim("gen ddp --dp 2 --layers 12 --microbatches 1 --model gpt2-124m --device h100-sxm "
                                   "--network nvlink8-ib400 -o - " + extra);
    REQUIRE(r.exit_code == 0);
    Schedule s = parse_schedule(r.out, "ddp.sched");
    // The all-reduces issued after each backward, as bucket sizes.
    std::vector<int> sizes;
    bool after_backward = false;
    for (const Op& op : s.ranks[0]) {
      if (op.kind == OpKind::Backward) after_backward = true;
      if (op.kind == OpKind::AllReduce) {
        if (after_backward) sizes.push_back(0), after_backward = false;
        ++sizes.back();
      }
    }
    return sizes;
  };
  CHECK(buckets("--set model.grad_bytes=2") == std::vector<int>{2, 2, 2, 2, 2, 2});
  CHECK(buckets("--set model.grad_bytes=2 --bucket-mb 100") == std::vector<int>{8, 4});
  CHECK(buckets("") == std::vector<int>(12, 1));
  CHECK(buckets("--bucket-mb 100") == std::vector<int>{4, 4, 4});
  CHECK(buckets("--bucket-layers 5") == std::vector<int>{5, 5, 2});
  CommandResult both = run_trainsim("gen ddp --bucket-mb 25 --bucket-layers 2 -o -", true);
  CHECK(both.exit_code == 2);
  CHECK(both.out.find("not both") != std::string::npos);
  CommandResult no_model = run_trainsim("gen ddp --bucket-mb 25 -o -", true);
  CHECK(no_model.exit_code == 2);
  CHECK(no_model.out.find("--bucket-mb needs the model") != std::string::npos);
  CommandResult not_ddp = run_trainsim("gen fsdp --bucket-layers 2 -o -", true);
  CHECK(not_ddp.exit_code == 2);
  CHECK(not_ddp.out.find("options of ddp, not of fsdp") != std::string::npos);
  CHECK(run_trainsim("gen ddp --bucket-mb 0 -o -").exit_code == 2);
}

TEST_CASE("overlap: on the hardware model --prefetch changes the step time and the memory") {
  // Llama 3 70B, 16 layers of 5 blocks, full recomputation, 16 ranks over two nodes: each layer's all-gather and
  // reduce-scatter cross the nodes. More prefetch hides more all-gathers under compute (a shorter step, less
  // exposed communication) and holds more gathered weights (a higher peak, here in the forward, where the
  // gathered weights are the largest part; over an 80 GB device, hence --allow-oom).
  std::map<int, nlohmann::json> runs;
  for (int k : {0, 1, 2}) {
    CommandResult r = run_trainsim("gen fsdp --dp 16 --layers 16 --microbatches 2 --prefetch " + std::to_string(k) +
                                   " --model llama3-70b --device h100-sxm --network nvlink8-ib400 --recompute full "
                                   "--sim --json --allow-oom");
    REQUIRE(r.exit_code == 0);
    runs[k] = nlohmann::json::parse(r.out);
  }
  auto step = [&](int k) { return runs[k]["step_time_s"].get<double>(); };
  auto exposed = [&](int k) { return runs[k]["exposed_comm_s"].get<double>(); };
  auto peak = [&](int k) { return runs[k]["peak_memory_bytes"].get<double>(); };
  CHECK(step(1) < step(0));
  CHECK(step(2) <= step(1));
  CHECK(exposed(1) < exposed(0));
  CHECK(exposed(2) <= exposed(1));
  CHECK(peak(0) < peak(1));
  CHECK(peak(1) < peak(2));
}
