// `trainsim gen tp` and `gen 3d` (schedules/generators/three_d.cpp): tensor parallelism alone and with pipeline
// and data parallelism. Every schedule of a grid of small sizes passes the simulator's checks (the TP rules of
// docs/design.md, "Tensor parallelism") and round-trips through .sched version 2; the ranks are in Megatron-LM's
// order; the TP collectives are the ones Megatron-LM runs; with --tp 1 the pipeline generators' schedules come
// out; bad options are refused with the option named.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "schedules/generators.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

std::string rejection(const std::string& kind, const GenOptions& o) {
  try {
    generate(kind, o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

GenOptions three_d(int tp, int pp, int dp, int m) {
  GenOptions o;
  o.tp = tp, o.pp = pp, o.dp = dp, o.microbatches = m;
  return o;
}

// Counts of ops per (kind, group is a TP group) on one rank.
struct Counts {
  int tp_all_reduce = 0, tp_reduce_scatter = 0, tp_all_gather = 0, dp_collectives = 0, forwards = 0;
};

Counts count(const Schedule& s, int rank) {
  Counts c;
  const int tp_group = tp_groups_by_rank(s.header).at(rank);
  for (const Op& op : s.ranks[rank]) {
    if (op.kind == OpKind::Forward) ++c.forwards;
    if (!is_collective(op.kind)) continue;
    if (op.group != 0 && op.group == tp_group) {
      CHECK(op.stream == 0);  // Megatron-LM runs its TP collectives on the compute stream
      c.tp_all_reduce += op.kind == OpKind::AllReduce;
      c.tp_reduce_scatter += op.kind == OpKind::ReduceScatter;
      c.tp_all_gather += op.kind == OpKind::AllGather;
    } else {
      CHECK(op.stream == 1);  // data-parallel collectives overlap the compute
      ++c.dp_collectives;
    }
  }
  return c;
}

void check_valid_and_round_trips(const Schedule& s) {
  SimResult r = simulate(s);
  INFO(r.error);
  CHECK(r.ok);
  const std::string text = print_schedule(s);
  CHECK(print_schedule(parse_schedule(text, "generated.sched")) == text);
}

}  // namespace

TEST_CASE("gen 3d: every schedule of a grid of sizes is valid and round-trips (TP 1-4, PP 1-2, DP 1-2, SP, ZeRO)") {
  int generated = 0;
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2})
      for (int dp : {1, 2})
        for (int m : {1, 4})
          for (bool sp : {false, true})
            for (int zero : {0, 1, 3})
              for (const char* order : {"1f1b", "interleaved-1f1b", "zb-h1"}) {
                GenOptions o = three_d(tp, pp, dp, m);
                o.sequence_parallel = sp, o.zero = zero, o.schedule = order;
                o.chunks = std::string(order) == "interleaved-1f1b" ? 2 : 1;
                o.layers = 2 * pp * o.chunks;  // two layers per stage chunk
                CAPTURE(tp);
                CAPTURE(pp);
                CAPTURE(dp);
                CAPTURE(m);
                CAPTURE(sp);
                CAPTURE(zero);
                CAPTURE(order);
                Schedule s = generate("3d", o);
                ++generated;
                REQUIRE(s.header.world_size == tp * pp * dp);
                CHECK(s.header.layers == o.layers);
                CHECK(s.header.microbatches == m * dp);
                CHECK(s.header.version == (tp > 1 || dp > 1 ? 2 : 1));
                check_valid_and_round_trips(s);
                // Each rank runs its stage's layers for its replica's microbatches, with its TP group's
                // collectives: L-1 reductions forward and L-1 backward per microbatch over the whole model
                // (none for layer 0's input grad), shared by the stages.
                int tp_reductions = 0, tp_gathers = 0;
                for (int r = 0; r < s.header.world_size; r += tp * dp) {  // tp 0, dp 0 of each stage
                  Counts c = count(s, r);
                  tp_reductions += sp ? c.tp_reduce_scatter : c.tp_all_reduce;
                  tp_gathers += c.tp_all_gather;
                  CHECK((sp ? c.tp_all_reduce : c.tp_reduce_scatter) == 0);
                  if (dp == 1) CHECK(c.dp_collectives == 0);
                }
                const int L = o.layers;
                CHECK(tp_reductions == (tp > 1 ? 2 * m * (L - 1) : 0));
                // With SP every pass but layer 0's gathers its input, every backward pass but the last layer's
                // its output grad; a split backward (zb-h1) gathers again for its weight half.
                const int split = std::string(order) == "zb-h1" ? 2 : 1;
                CHECK(tp_gathers == (tp > 1 && sp ? m * ((L - 1) * (1 + split) + (L - 1) * split) : 0));
              }
  CHECK(generated == 432);
}

TEST_CASE("gen 3d: ZBV, DualPipeV and interleaved zero bubble compose with TP, SP, DP (ZeRO-1, FSDP) and CP") {
  // The zero-bubble family was pipelines alone; in gen 3d each runs its own order on every replica and TP group,
  // with one schedule layer per block when the blocks of each chunk are given (two per chunk here).
  int generated = 0;
  for (const char* order : {"zbv", "dualpipev", "interleaved-zb"})
    for (int tp : {1, 2})
      for (int dp : {1, 2})
        for (int cp : {1, 2})
          for (int zero : {0, 1, 3}) {
            if (dp * cp == 1 && zero != 0) continue;
            GenOptions o = three_d(tp, 2, dp, 4);
            o.schedule = order, o.cp = cp, o.zero = zero, o.sequence_parallel = tp > 1;
            o.chunks = std::string(order) == "interleaved-zb" ? 2 : 1;
            o.chunk_blocks.assign(4, 2);  // 2 stages x 2 chunks (V placement or looped), two blocks each
            CAPTURE(order);
            CAPTURE(tp);
            CAPTURE(dp);
            CAPTURE(cp);
            CAPTURE(zero);
            Schedule s = generate("3d", o);
            ++generated;
            REQUIRE(s.header.world_size == tp * 2 * dp * cp);
            CHECK(s.header.layers == 8);
            REQUIRE(s.header.layout);
            CHECK(s.header.layout->blocks_per_layer() == std::vector<int>(8, 1));
            check_valid_and_round_trips(s);
          }
  CHECK(generated == 3 * 2 * (3 * 4 - 2));
  // The V placement: stage 0 holds the first and the last chunk (layers 0-1 and 6-7), stage 1 the middle two.
  GenOptions v = three_d(1, 2, 1, 4);
  v.schedule = "zbv", v.chunk_blocks.assign(4, 2);
  CHECK(generate("3d", v).header.stage_map == std::vector<int>{0, 0, 1, 1, 1, 1, 0, 0});
  // DualPipeV needs 2 x pp microbatches, as PyTorch's ScheduleDualPipeV does, said with gen 3d's option.
  GenOptions few = three_d(1, 4, 1, 4);
  few.schedule = "dualpipev";
  CHECK(has(rejection("3d", few), "3d: --microbatches must be at least the number of stages, 2 x --pp = 8 (got 4)"));
}

TEST_CASE("gen 3d: Megatron-LM's rank order, rank = tp + T * (dp + D * pp), groups named in the header") {
  GenOptions o = three_d(2, 2, 3, 2);
  Schedule s = generate("3d", o);
  const ScheduleHeader& h = s.header;
  REQUIRE(h.world_size == 12);
  // The TP groups first: tp<k> is ranks 2k, 2k+1 (a node's GPUs); then dp<tp + T * pp>, one per stage and slice.
  REQUIRE(h.groups.size() == 6 + 4);
  REQUIRE(h.group_names.size() == 10);
  for (int k = 0; k < 6; ++k) {
    CHECK(h.group_names[k] == "tp" + std::to_string(k));
    CHECK(h.groups[k] == std::vector<int>{2 * k, 2 * k + 1});
  }
  CHECK(h.group_names[6] == "dp0");
  CHECK(h.groups[6] == std::vector<int>{0, 2, 4});   // stage 0, slice 0
  CHECK(h.groups[7] == std::vector<int>{1, 3, 5});   // stage 0, slice 1
  CHECK(h.groups[9] == std::vector<int>{7, 9, 11});  // stage 1, slice 1
  CHECK(h.stage_map == std::vector<int>{0, 6});
  // Rank 9: tp 1, dp 1, stage 1 - layer 1, slice 1 of 2, replica 1's microbatches 2 and 3.
  for (const Op& op : s.ranks[9]) {
    if (op.kind != OpKind::Forward) continue;
    CHECK(op.layer == 1);
    CHECK(op.reads[1].str() == "W1<1/2>");
    CHECK((op.batches == IdSet{2} || op.batches == IdSet{3}));
  }
  // Sends go to the same tp and dp index of the next stage: rank 3 (tp 1, dp 1, stage 0) to rank 9.
  for (const Op& op : s.ranks[3])
    if (op.kind == OpKind::Send) CHECK(op.peer == 9);
}

TEST_CASE("gen tp: one TP group, each rank's slice, Megatron's collectives and nothing for layer 0's input grad") {
  GenOptions o;
  o.tp = 4, o.microbatches = 3;
  Schedule s = generate("tp", o);
  REQUIRE(s.header.world_size == 4);
  CHECK(s.header.layers == 4);
  CHECK(s.header.version == 2);
  CHECK(s.header.groups == std::vector<std::vector<int>>{{0, 1, 2, 3}});
  CHECK(s.header.group_names == std::vector<std::string>{"tp0"});
  check_valid_and_round_trips(s);
  const std::string text = print_schedule(s);
  CHECK(has(text, "\ngroup 1 tp0 0 1 2 3\n"));
  // Rank 2's ops, as Megatron-LM runs them: the partial sum of each layer but the last all-reduced, the logits
  // a vocabulary slice, the input grads' partial sums all-reduced except layer 0's.
  CHECK(has(text, "forward L0 {0} : A0{0} W0<2/4> -> A1{0}<+2/4>"));
  CHECK(has(text, "all-reduce L0 group 1 : A1{0}<+2/4> -> A1{0}"));
  CHECK(has(text, "forward L3 {0} : A3{0} W3<2/4> -> A4{0}<2/4>"));
  CHECK(has(text, "loss {0} : A4{0}<2/4> -> dA4{0}<2/4>"));
  CHECK(has(text, "backward L3 {0} : A3{0} dA4{0}<2/4> W3<2/4> -> dW3{0}<2/4> dA3{0}<+2/4>"));
  CHECK(has(text, "all-reduce L3 group 1 : dA3{0}<+2/4> -> dA3{0}"));
  CHECK(!has(text, "dA0{0} ->"));
  CHECK(!has(text, "dA0{0}<+2/4> -> dA0"));
  for (int r = 0; r < 4; ++r) {
    Counts c = count(s, r);
    CHECK(c.tp_all_reduce == 2 * 3 * 3);  // (L-1) forward and (L-1) backward per microbatch
    CHECK(c.forwards == 4 * 3);
  }
  // The weight grads are summed over the microbatches, each slice updated once (the simulator checks it).
  CHECK(has(text, "update L0 : dW0{0-2}<2/4> W0<2/4> O0<2/4>"));
}

TEST_CASE("gen tp: memory stays bounded as the microbatches grow, TP slices hold 1/T of the weights") {
  auto peak = [](int tp, int m, bool sp) {
    GenOptions o;
    o.tp = tp, o.microbatches = m, o.sequence_parallel = sp;
    SimResult r = simulate(generate("tp", o));
    REQUIRE(r.ok);
    return r.summary.peak.memory;
  };
  CHECK(peak(2, 16, false) == peak(2, 3, false));
  CHECK(peak(2, 16, true) == peak(2, 3, true));
  CHECK(peak(4, 2, false) < peak(2, 2, false));
  CHECK(peak(2, 2, false) < peak(1, 2, false));
}

// A schedule without its optimizer steps (the updates and the frees of what they used), in text.
std::string without_steps(Schedule s) {
  for (auto& ops : s.ranks)
    std::erase_if(ops, [](const Op& op) {
      if (op.kind == OpKind::Update) return true;
      return op.kind == OpKind::Free && std::any_of(op.reads.begin(), op.reads.end(), [](const Tensor& t) {
               return t.kind == TensorKind::Weight || t.kind == TensorKind::OptState || t.kind == TensorKind::WeightGrad;
             });
    });
  return print_schedule(s);
}

TEST_CASE("gen 3d with --tp 1 is the pipeline generator's schedule, op for op, but for when the optimizer steps") {
  // gen 3d steps every layer after the rank's last pass (Megatron-LM's optimizer step follows the whole backward);
  // the pipeline kinds step a layer right after its last grad. With one layer per rank the two are the same.
  for (int m : {1, 3, 4, 8}) {
    CAPTURE(m);
    GenOptions pipe;
    pipe.stages = 2, pipe.microbatches = m;
    GenOptions o = three_d(1, 2, 1, m);
    CHECK(print_schedule(generate("3d", o)) == print_schedule(generate("1f1b", pipe)));
    o.schedule = "zb-h1";
    CHECK(print_schedule(generate("3d", o)) == print_schedule(generate("zb-h1", pipe)));
    if (m % 2 == 0) {
      o.schedule = "interleaved-1f1b", o.chunks = 2, pipe.chunks = 2;
      const Schedule three = generate("3d", o), looped = generate("interleaved-1f1b", pipe);
      CHECK(without_steps(three) == without_steps(looped));
      CHECK(print_schedule(three) != print_schedule(looped));
      // Each rank's updates are its last ops but the frees, in layer order.
      for (const auto& ops : three.ranks) {
        std::vector<int> updated;
        bool past = false;
        for (const Op& op : ops) {
          if (op.kind == OpKind::Update) updated.push_back(op.layer), past = true;
          else if (past) CHECK(op.kind == OpKind::Free);
        }
        CHECK(std::is_sorted(updated.begin(), updated.end()));
        CHECK(updated.size() == 2);
      }
    }
  }
}

TEST_CASE("gen 3d --sp: sequence shards are what a rank keeps, sends and receives") {
  GenOptions o = three_d(2, 2, 1, 2);
  o.sequence_parallel = true;
  Schedule s = generate("3d", o);
  check_valid_and_round_trips(s);
  const std::string text = print_schedule(s);
  CHECK(has(text, "reduce-scatter L0 group 1 : A1{0}<+0/2> -> A1{0}[0/2]"));
  CHECK(has(text, "send to 2 : A1{0}[0/2]"));
  CHECK(has(text, "recv from 1 -> A1{0}[1/2]"));
  CHECK(has(text, "all-gather L1 group 2 : A1{0}[1/2] -> A1{0}[0-1/2]"));
  CHECK(has(text, "reduce-scatter L1 group 2 : dA1{0}<+1/2> -> dA1{0}[1/2]"));
}

TEST_CASE("gen 3d --zero: FSDP shards each TP slice over the data-parallel group, ZeRO-1 the optimizer state") {
  GenOptions o = three_d(2, 1, 2, 1);
  o.layers = 2;
  o.zero = 3;
  std::string text = print_schedule(generate("3d", o));
  CHECK(has(text, "load -> W0<1/2>[0/2] O0<1/2>[0/2]"));
  CHECK(has(text, "all-gather L0 group 3 stream 1 : W0<0/2>[1/2] -> W0<0/2>[0-1/2]"));
  CHECK(has(text, "reduce-scatter L1 group 3 stream 1 : dW1{0}<0/2> -> dW1{0-1}<0/2>[0/2]"));
  o.zero = 1;
  text = print_schedule(generate("3d", o));
  CHECK(has(text, "load -> W0<1/2> O0<1/2>[0/2]"));
  CHECK(has(text, "all-reduce L1 group 3 stream 1 : dW1{0}<0/2> -> dW1{0-1}<0/2>"));
  CHECK(has(text, "all-gather L1 group 3 stream 1 : W1<0/2>[0/2]@1 -> W1<0/2>[0-1/2]@1"));
  o.zero = 0;
  text = print_schedule(generate("3d", o));
  CHECK(has(text, "load -> W0<1/2> O0<1/2>"));
  CHECK(has(text, "update L1 : dW1{0-1}<0/2> W1<0/2> O1<0/2>"));
}

TEST_CASE("gen tp and 3d refuse bad options, naming them") {
  GenOptions o = three_d(65, 1, 1, 1);
  CHECK(has(rejection("3d", o), "--tp must be at most 64"));
  CHECK(has(rejection("tp", o), "tp: --tp must be at most 64"));
  o = three_d(0, 1, 1, 1);
  CHECK(has(rejection("3d", o), "--tp must be at least 1"));
  o = three_d(2, 2, 1, 4);
  o.layers = 3;
  CHECK(has(rejection("3d", o), "--layers 3 does not split evenly into 2 stage chunks"));
  o.layers = 0, o.schedule = "gpipe";
  CHECK(has(rejection("3d", o), "--schedule must be 1f1b, interleaved-1f1b, zb-h1, zbv, dualpipev or interleaved-zb (got 'gpipe')"));
  o.schedule = "1f1b", o.chunks = 2;
  CHECK(has(rejection("3d", o), "--chunks 2 goes with --schedule interleaved-1f1b"));
  o.chunks = 1, o.zero = 2;
  CHECK(has(rejection("3d", o), "--zero must be 1"));
  o.zero = 0;
  o.schedule = "interleaved-1f1b", o.chunks = 2, o.microbatches = 5;  // PyTorch's rounds rule
  CHECK(has(rejection("3d", o), "rounds"));
  // The sizes the limits refuse at once (docs/schedule-format.md, Limits), without wrapping.
  o = three_d(64, 2048, 2048, 1);
  CHECK(has(rejection("3d", o), "ranks, above the limit"));
  o = three_d(64, 1 << 30, 1 << 30, 1);
  CHECK(has(rejection("3d", o), "ranks, above the limit"));
  o = three_d(64, 1, 1, 100000);
  o.layers = 64;
  CHECK(has(rejection("3d", o), "times TP ranks"));
}

TEST_CASE("trainsim gen 3d: written, validated and simulated from the command line, exit status 2 for bad values") {
  auto dir = fresh_dir("gen-3d");
  const std::string file = (dir / "x.sched").string();
  CommandResult g = run_trainsim("gen 3d --tp 2 --pp 2 --dp 2 --microbatches 4 --sp --zero 3 -o " + file, true);
  CHECK(g.exit_code == 0);
  CommandResult v = run_trainsim("validate " + file, true);
  INFO(v.out);
  CHECK(v.exit_code == 0);
  CHECK(run_trainsim("sim " + file + " --json").exit_code == 0);
  CommandResult sim = run_trainsim("gen 3d --tp 2 --pp 2 --dp 2 --microbatches 4 --sim --json");
  CHECK(sim.exit_code == 0);
  CHECK(has(sim.out, "\"world_size\": 8"));
  CommandResult tp = run_trainsim("gen tp --tp 4 --layers 2 --microbatches 2");
  CHECK(tp.exit_code == 0);
  CHECK(has(tp.out, "group 1 tp0 0 1 2 3"));
  CommandResult help = run_trainsim("gen --help");
  CHECK(has(help.out, "tensor parallel tp"));
  CHECK(has(help.out, "3D parallel 3d"));
  CHECK(has(help.out, "rank = tp + T * (dp + D * pp)"));
  for (const char* bad : {"--tp 65", "--tp 2 --pp 2 --layers 3", "--tp 2 --schedule gpipe", "--tp 2 --zero 2",
                          "--tp 0", "--tp 64 --pp 2048 --dp 2048"}) {
    CAPTURE(bad);
    CommandResult r = run_trainsim(std::string("gen 3d ") + bad, true);
    CHECK(r.exit_code == 2);
    CHECK(has(r.out, "trainsim gen"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("timeline, Perfetto trace and graph draw TP collectives apart from the data-parallel ones") {
  auto dir = fresh_dir("gen-3d-visual");
  const std::string sched = (dir / "x.sched").string(), svg = (dir / "x.svg").string(),
                    trace = (dir / "x.json").string(), dot = (dir / "x.dot").string();
  REQUIRE(run_trainsim("gen 3d --tp 2 --pp 2 --dp 2 --microbatches 2 --sp -o " + sched).exit_code == 0);
  REQUIRE(run_trainsim("sim " + sched + " --svg " + svg + " --trace " + trace + " --dot " + dot).exit_code == 0);
  const std::string drawn = slurp(svg), json = slurp(trace), graph = slurp(dot);
  CHECK(has(drawn, "TP collective (AR, RS, AG"));  // the legend entry
  CHECK(has(drawn, "#c8379b"));                     // visualize/palette.h, kTpCollectiveColour
  CHECK(has(json, "\"cat\":\"tp-collective\""));
  CHECK(has(json, "\"cat\":\"collective\""));        // the data-parallel all-reduces stay collectives
  CHECK(has(graph, "#f1b6da"));
  // A schedule without TP draws as before: no legend entry, no TP category.
  REQUIRE(run_trainsim("gen 1f1b --stages 2 --microbatches 2 -o " + sched).exit_code == 0);
  REQUIRE(run_trainsim("sim " + sched + " --svg " + svg + " --trace " + trace).exit_code == 0);
  CHECK(!has(slurp(svg), "TP collective"));
  CHECK(!has(slurp(trace), "tp-collective"));
  std::filesystem::remove_all(dir);
}
