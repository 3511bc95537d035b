// Mixture of Experts and expert parallelism in the simulator (docs/design.md, "Mixture of Experts"; issue 35):
// expert slices and routed tokens as tensor identities, the all-to-all's dispatch and combine, the algebra of
// the experts' compute, the updates of every expert slice, the .sched version 3 syntax, `gen ep`, both engines,
// and what refuses MoE so far (the executor, PyTorch's CSV; the hardware model's MoE is tests/test_hardware_moe.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "interop/chakra.h"
#include "interop/pytorch_csv.h"
#include "schedules/generators.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"
#include "sim/all_to_all.h"
#include "sim/algebra.h"
#include "cli_helpers.h"
#include "sim_helpers.h"

using namespace trainsim;

namespace {

using testing::has;

// `s` with its cost model line replaced: "puzzle" runs the puzzle engine (sim/world.h), "unit" the stream engine.
Schedule with_cost(Schedule s, const std::string& cost) {
  s.header.cost_model = cost;
  return s;
}

// The first error of simulating `text` (a mutated .sched) under both engines, which must agree that it is wrong.
std::string both_refuse(const std::string& text) {
  std::string first;
  for (const char* cost : {"puzzle", "unit"}) {
    CAPTURE(cost);
    Schedule s = with_cost(parse_schedule(text, "moe.sched"), cost);
    SimResult r = simulate(s);
    CHECK_FALSE(r.ok);
    if (first.empty()) first = r.error;
  }
  return first;
}

// `text` with its first occurrence of `from` replaced by `to` (which must be there).
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

// A generated version 3 schedule that prints back byte for byte and simulates valid on both engines.
void check_round_trip_and_valid(const Schedule& s, const char* file) {
  CHECK(s.header.version == 3);
  const std::string text = print_schedule(s);
  CHECK(print_schedule(parse_schedule(text, file)) == text);
  for (const char* cost : {"unit", "puzzle"}) {
    CAPTURE(cost);
    SimResult r = simulate(with_cost(s, cost));
    INFO(r.error);
    CHECK(r.ok);
  }
}

GenOptions ep_options(int dp, int ep, int layers, int dense, int m) {
  GenOptions o;
  o.dp = dp, o.ep = ep, o.layers = layers, o.dense_layers = dense, o.microbatches = m;
  return o;
}

}  // namespace

TEST_CASE("MoE tensors: expert slices and token states print and parse back, version 3 only") {
  const Tensor w = expert_slice(weight_tensor(3), 1, 4);
  CHECK(w.str() == "W3<e1/4>");
  CHECK(w.held_fraction() == doctest::Approx(0.25));
  CHECK(routed_as(activation_tensor(4, IdSet{0}), Route::Routed).str() == "A4{0}<routed>");
  CHECK(routed_as(activation_tensor(4, IdSet::range(0, 4)), Route::ExpertIn, 1, 4).str() == "A4{0-3}<e1/4>");
  CHECK(routed_as(activation_grad_tensor(4, IdSet::range(0, 4)), Route::ExpertOut, 3, 4).str() == "dA4{0-3}<e3/4:out>");
  // An expert slice of a TP slice, FSDP-sharded, after an update.
  Tensor t = expert_slice(tp_slice(shard(weight_tensor(2), 1, 2), 0, 2), 3, 8);
  ++t.step;
  CHECK(t.str() == "W2<0/2><e3/8>[1/2]@1");
  for (const char* text : {"W3<e1/4>", "A4{0}<routed>", "A4{0-3}<e1/4>", "dA4{0-3}<e3/4:out>", "W2<0/2><e3/8>[1/2]@1",
                           "dW5{0-7}<e0/1>", "O1<e4095/4096>"})
    CHECK(parse_tensor(text).str() == text);
  // Different slices are different tensors; the states too.
  CHECK(parse_tensor("W3<e1/4>") != parse_tensor("W3<e2/4>"));
  CHECK(parse_tensor("W3<e1/4>") != parse_tensor("W3"));
  CHECK(parse_tensor("A4{0-3}<e1/4>") != parse_tensor("A4{0-3}<e1/4:out>"));
  for (const char* bad : {"W3<e4/4>", "W3<e0/0>", "W3<e1/4:out>", "W3<routed>", "A4{0}<e1/4><routed>", "W3<e/4>",
                          "W3<e1/4097>", "A4{0}<0/2><e1/2>", "W3<ex/4>"})
    CHECK_THROWS_AS(parse_tensor(bad), std::invalid_argument);
  // Grads of different expert slices never add up; the same slice's over disjoint batches do.
  const Tensor g0 = expert_slice(weight_grad_tensor(1, IdSet{0}), 0, 2), g1 = expert_slice(weight_grad_tensor(1, IdSet{1}), 0, 2);
  CHECK(sum(g0, g1).str() == "dW1{0-1}<e0/2>");
  CHECK_THROWS_WITH_AS(sum(g0, expert_slice(weight_grad_tensor(1, IdSet{1}), 1, 2)),
                       doctest::Contains("different expert slices"), TensorError);
  CHECK_THROWS_AS(sum(g0, weight_grad_tensor(1, IdSet{1})), TensorError);
  // Version 2 files cannot hold them.
  try {
    parse_schedule("trainsim-schedule 2\nworld_size 1\nlayers 1\nmicrobatches 1\ncost_model unit\n\nrank 0\n  load -> W0<e0/1>\n",
                   "v2.sched");
    FAIL("version 2 read an expert slice");
  } catch (const ParseError& e) {
    CHECK(has(e.what(), "v2.sched:8:11"));
    CHECK(has(e.what(), "need format version 3"));
  }
}

TEST_CASE("the all-to-all: a dispatch gives slice j every member's tokens, a combine gives each member its own back") {
  AllToAllGroup group;
  const int n = 4;
  std::vector<Tensor> routed;
  for (int m = 0; m < n; ++m) routed.push_back(routed_as(activation_tensor(2, IdSet{10 + 3 * m}), Route::Routed));
  std::vector<const Tensor*> in;
  for (const Tensor& t : routed) in.push_back(&t);
  std::vector<Tensor> dispatched = group.call(in);
  REQUIRE(dispatched.size() == n);
  for (int m = 0; m < n; ++m) CHECK(dispatched[m].str() == fmt::format("A2{{10,13,16,19}}<e{}/4>", m));
  // The experts run: each slice's output, then the combine.
  std::vector<Tensor> outs;
  for (int m = 0; m < n; ++m) outs.push_back(routed_as(activation_tensor(2, dispatched[m].batches), Route::ExpertOut, m, n));
  in.clear();
  for (const Tensor& t : outs) in.push_back(&t);
  std::vector<Tensor> back = group.call(in);
  for (int m = 0; m < n; ++m) CHECK(back[m] == activation_tensor(2, IdSet{10 + 3 * m}));
  // Once combined, the tokens are not waiting any more: a second combine is refused.
  try {
    group.call(in);
    FAIL("combined twice");
  } catch (const AllToAllError& e) {
    CHECK(has(e.what(), "never dispatched"));
  }
  // Grads: the complete grad goes out, and what comes back is routed (the dense backward's input).
  std::vector<Tensor> grads;
  for (int m = 0; m < n; ++m) grads.push_back(activation_grad_tensor(2, IdSet{m}));
  in.clear();
  for (const Tensor& t : grads) in.push_back(&t);
  std::vector<Tensor> gd = group.call(in);
  std::vector<Tensor> gout;
  for (int m = 0; m < n; ++m) gout.push_back(routed_as(activation_grad_tensor(2, gd[m].batches), Route::ExpertOut, m, n));
  in.clear();
  for (const Tensor& t : gout) in.push_back(&t);
  std::vector<Tensor> gback = group.call(in);
  for (int m = 0; m < n; ++m) CHECK(gback[m].str() == fmt::format("dA2{{{}}}<routed>", m));
  // Wrong inputs name the member: two members sending the same batch, an activation not routed, a slice out of place.
  auto refused = [&](std::vector<Tensor> ts, int member, const std::string& words) {
    AllToAllGroup fresh;
    std::vector<const Tensor*> p;
    for (const Tensor& t : ts) p.push_back(&t);
    try {
      fresh.call(p);
      FAIL("accepted");
    } catch (const AllToAllError& e) {
      CHECK(e.member == member);
      CHECK(has(e.what(), words));
    }
  };
  refused({routed[0], routed[0]}, 1, "dispatched by two members");
  refused({routed[0], activation_tensor(2, IdSet{1})}, 1, "state <routed>");
  refused({outs[1], outs[0]}, 0, "member 0");
  refused({dispatched[0], dispatched[1]}, 0, "not their output");
}

TEST_CASE("the all-to-all with TP: members send sequence shards of whole microbatches, and get their own back") {
  // An EP group of 4 over 2 TP groups of 2 (Megatron-Core's folded layout, expert TP 1): member 2·d + j sends
  // sequence shard j of 2 of microbatch d's routed tokens.
  std::vector<Tensor> routed;
  for (int m = 0; m < 4; ++m) routed.push_back(shard(routed_as(activation_tensor(3, IdSet{m / 2}), Route::Routed), m % 2, 2));
  auto call = [](AllToAllGroup& g, const std::vector<Tensor>& ts) {
    std::vector<const Tensor*> p;
    for (const Tensor& t : ts) p.push_back(&t);
    return g.call(p);
  };
  AllToAllGroup group;
  const std::vector<Tensor> in = call(group, routed);
  for (int m = 0; m < 4; ++m) CHECK(in[m].str() == fmt::format("A3{{0-1}}<e{}/4>", m));  // whole microbatches
  std::vector<Tensor> outs;
  for (int m = 0; m < 4; ++m) outs.push_back(routed_as(activation_tensor(3, in[m].batches), Route::ExpertOut, m, 4));
  const std::vector<Tensor> back = call(group, outs);
  for (int m = 0; m < 4; ++m) CHECK(back[m] == shard(activation_tensor(3, IdSet{m / 2}), m % 2, 2));
  // The grads: shards out, routed shards back (what the dense part's TP backward reads).
  std::vector<Tensor> grads;
  for (int m = 0; m < 4; ++m) grads.push_back(shard(activation_grad_tensor(3, IdSet{m / 2}), m % 2, 2));
  const std::vector<Tensor> gin = call(group, grads);
  std::vector<Tensor> gout;
  for (int m = 0; m < 4; ++m) gout.push_back(routed_as(activation_grad_tensor(3, gin[m].batches), Route::ExpertOut, m, 4));
  const std::vector<Tensor> gback = call(group, gout);
  for (int m = 0; m < 4; ++m) CHECK(gback[m].str() == fmt::format("dA3{{{}}}<routed>[{}/2]", m / 2, m % 2));
  // A microbatch with a shard missing (or sent twice) is refused: the experts would see part of it.
  auto refused = [&](std::vector<Tensor> ts, const std::string& words) {
    AllToAllGroup fresh;
    CAPTURE(words);
    try {
      call(fresh, ts);
      FAIL("accepted");
    } catch (const AllToAllError& e) {
      CHECK(has(e.what(), words));
    }
  };
  refused({routed[0], routed[2], routed[3]}, "must send the same sequence shards of every microbatch");
  refused({routed[0], routed[0], routed[2], routed[3]}, "dispatched by two members");
  Tensor wide = routed[0];
  wide.num_shards = 1000, wide.shards = IdSet{0};
  refused({wide, wide}, "a sequence shard of at most 64");
}

TEST_CASE("the all-to-all with expert TP: an EP group of one TP index, its shards gathered and reduce-scattered") {
  // Megatron-Core's expert TP 2 beside TP 2: EP group k holds TP index k of 4 TP groups (microbatches 0-3); member m
  // sends sequence shard k of 2 of microbatch m and gets shard k of every member's microbatches for slice m.
  auto call = [](AllToAllGroup& g, const std::vector<Tensor>& ts) {
    std::vector<const Tensor*> p;
    for (const Tensor& t : ts) p.push_back(&t);
    return g.call(p);
  };
  for (int k = 0; k < 2; ++k) {
    CAPTURE(k);
    AllToAllGroup group;
    std::vector<Tensor> routed;
    for (int m = 0; m < 4; ++m) routed.push_back(shard(routed_as(activation_tensor(3, IdSet{m}), Route::Routed), k, 2));
    const std::vector<Tensor> in = call(group, routed);
    for (int m = 0; m < 4; ++m) CHECK(in[m].str() == fmt::format("A3{{0-3}}<e{}/4>[{}/2]", m, k));
    // The experts read whole tokens: on the shard alone they are refused (the expert-TP group gathers them first).
    Op fwd;
    fwd.kind = OpKind::Forward, fwd.layer = 2, fwd.batches = in[1].batches;
    const Tensor w = tp_slice(expert_slice(weight_tensor(2), 1, 4), k, 2);
    fwd.reads = {in[1], w};
    fwd.writes = {tp_partial(routed_as(activation_tensor(3, in[1].batches), Route::ExpertOut, 1, 4), k, 2)};
    CHECK(has(algebra_problem(fwd, 4, 4), "all-gather them over the expert-TP group first"));
    Tensor gathered = in[1];
    gathered.shards = IdSet::range(0, 2);
    fwd.reads = {gathered, w};
    CHECK(algebra_problem(fwd, 4, 4) == "");
    CHECK(fwd.writes.front().str() == fmt::format("A3{{0-3}}<+{}/2><e1/4:out>", k));
    // The backward: the slice's TP slice of the expert grad, the input grad a partial sum.
    Tensor g = gathered;
    g.kind = TensorKind::ActivationGrad;
    Op bwd;
    bwd.kind = OpKind::Backward, bwd.layer = 2, bwd.batches = gathered.batches;
    bwd.reads = {gathered, g, w};
    bwd.writes = {tp_slice(expert_slice(weight_grad_tensor(2, gathered.batches), 1, 4), k, 2),
                  tp_partial(routed_as(activation_grad_tensor(3, gathered.batches), Route::ExpertOut, 1, 4), k, 2)};
    CHECK(algebra_problem(bwd, 4, 4) == "");
    bwd.writes.front() = expert_slice(weight_grad_tensor(2, gathered.batches), 1, 4);  // (the whole slice's grad)
    CHECK(has(algebra_problem(bwd, 4, 4), "dW2{0-3}<"));
    // The combine takes the reduce-scattered shard back (not the partial sum, not another shard).
    std::vector<Tensor> partials, shards, others;
    for (int m = 0; m < 4; ++m) {
      const Tensor out = routed_as(activation_tensor(3, in[m].batches), Route::ExpertOut, m, 4);
      partials.push_back(tp_partial(out, k, 2));
      shards.push_back(shard(out, k, 2));
      others.push_back(shard(out, 1 - k, 2));
    }
    for (const auto& [ts, words] : {std::pair{partials, std::string("reduce-scatter it there before the combine")},
                                    std::pair{others, fmt::format("the dispatch gave the experts shards {} of 2", k)}}) {
      try {
        call(group, ts);
        FAIL("accepted");
      } catch (const AllToAllError& e) {
        CHECK(has(e.what(), words));
      }
    }
    const std::vector<Tensor> back = call(group, shards);
    for (int m = 0; m < 4; ++m) CHECK(back[m] == shard(activation_tensor(3, IdSet{m}), k, 2));
  }
  // The experts' output as a partial sum prints and parses; other expert tokens are never TP slices.
  CHECK(parse_tensor("A3{0-3}<+1/2><e1/4:out>").str() == "A3{0-3}<+1/2><e1/4:out>");
  CHECK_THROWS_WITH_AS(parse_tensor("A3{0-3}<+1/2><e1/4>"), doctest::Contains("only the experts' output"),
                       std::invalid_argument);
  CHECK_THROWS_AS(parse_tensor("A3{0-3}<1/2><e1/4:out>"), std::invalid_argument);
}

TEST_CASE("gen 3d --ep --etp: each expert slice split over its TP group, every schedule, on both engines") {
  // Megatron-LM's default expert TP (the TP size): stage index f = j + T·d holds TP slice j of expert slice d mod ep;
  // EP groups hold one TP index of ep TP groups.
  for (int dp : {2, 4})
    for (int ep : {2, 4})
      for (const char* schedule : {"1f1b", "interleaved-1f1b", "zbv", "dualpipev", "interleaved-zb"})
        for (int zero : {0, 1, 3})
          for (bool overlap : {false, true}) {
            const int tp = 2, pp = 2, dense = 1;
            if (dp % ep != 0) continue;
            if (overlap && (zero != 1 || dp != 4)) continue;  // (the overlap on one shape is enough)
            CAPTURE(dp);
            CAPTURE(ep);
            CAPTURE(schedule);
            CAPTURE(zero);
            CAPTURE(overlap);
            GenOptions o;
            o.tp = tp, o.sequence_parallel = true, o.pp = pp, o.dp = dp, o.ep = ep, o.etp = tp, o.schedule = schedule;
            o.zero = zero, o.dense_layers = dense, o.a2a_overlap = overlap;
            o.chunks = std::string(schedule).rfind("interleaved", 0) == 0 ? 2 : 1;
            o.layers = 2 * pp * o.chunks, o.microbatches = 2 * pp;
            Schedule s = generate("3d", o);
            check_round_trip_and_valid(s, "3d-ep-etp.sched");
            const int stage = tp * dp;
            // Every EP group holds one TP index; none crosses a stage.
            for (std::size_t g = 0; g < s.header.groups.size(); ++g) {
              if (s.header.group_names[g].rfind("ep", 0) != 0) continue;
              const std::vector<int>& members = s.header.groups[g];
              REQUIRE(static_cast<int>(members.size()) == ep);
              for (int r : members) CHECK(r % tp == members.front() % tp);
              for (int r : members) CHECK(r / stage == members.front() / stage);
            }
            for (int r = 0; r < s.header.world_size; ++r) {
              std::set<int> moe_layers;
              int a2a = 0, gathers = 0, expert_updates = 0;
              for (const Op& op : s.ranks[r]) {
                if (op.kind == OpKind::Forward && op.layer >= dense && !expert_weight(op)) moe_layers.insert(op.layer);
                if (op.kind == OpKind::AllToAll) ++a2a;
                if (op.kind == OpKind::AllGather && op.writes.front().route == Route::ExpertIn) ++gathers;
                if (op.kind == OpKind::Update && op.writes.front().expert()) {
                  ++expert_updates;
                  const Tensor& w = op.writes.front();
                  CHECK(w.ep_index == ((r % stage) / tp) % ep);
                  CHECK(w.ep_size == ep);
                  CHECK(w.tp_size == tp);
                  CHECK(w.tp_index() == r % tp);
                }
              }
              CHECK(a2a == 4 * static_cast<int>(moe_layers.size()) * o.microbatches);
              // (the tokens gathered for the forward and the grads for the backward, per microbatch and MoE layer)
              CHECK(gathers == 2 * static_cast<int>(moe_layers.size()) * o.microbatches);
              CHECK(expert_updates == static_cast<int>(moe_layers.size()));
            }
          }
}

TEST_CASE("gen 3d --etp: what it does not model is refused by name") {
  GenOptions o;
  o.tp = 2, o.sequence_parallel = true, o.pp = 1, o.dp = 4, o.ep = 2, o.etp = 2, o.layers = 2, o.microbatches = 2;
  CHECK_NOTHROW(generate("3d", o));
  auto refused = [](const std::string& kind, GenOptions x, const std::string& words) {
    CAPTURE(words);
    CHECK_THROWS_WITH_AS(generate(kind, x), doctest::Contains(words.c_str()), std::invalid_argument);
  };
  GenOptions x = o;
  x.tp = 4, x.etp = 2;
  refused("3d", x, "--etp is 1 (the experts whole beside TP) or --tp (4");
  x = o, x.ep = 1;
  refused("3d", x, "--etp 2 splits the expert slices of expert parallelism: give --ep above 1");
  x = o, x.ep = 8;
  refused("3d", x, "--ep 8 must divide --cp x --dp = 4: with --etp 2");
  x = o, x.etp = 1, x.ep = 3, x.dp = 3;
  refused("3d", x, "or give --etp 2");
  GenOptions e;
  e.dp = 4, e.ep = 2, e.etp = 2, e.layers = 2, e.microbatches = 2;
  refused("ep", e, "--etp splits experts over a TP group");
}

TEST_CASE("gen ep: every EP and data-parallel shape simulates under both engines and prints back byte for byte") {
  for (int dp : {1, 2, 4, 6})
    for (int ep : {1, 2, 3, 4})
      for (int dense : {0, 1}) {
        if (dp % ep != 0) continue;
        CAPTURE(dp);
        CAPTURE(ep);
        CAPTURE(dense);
        const int L = 3, m = 2;
        Schedule s = generate("ep", ep_options(dp, ep, L, dense, m));
        check_round_trip_and_valid(s, "ep.sched");
        // Per rank: four all-to-alls per MoE layer and microbatch; an update of each layer and of each expert slice.
        for (int r = 0; r < dp; ++r) {
          int a2a = 0, updates = 0, expert_updates = 0;
          for (const Op& op : s.ranks[r]) {
            a2a += op.kind == OpKind::AllToAll;
            if (op.kind != OpKind::Update) continue;
            ++updates;
            if (op.writes.front().expert()) {
              ++expert_updates;
              CHECK(op.writes.front().ep_index == r % ep);
              CHECK(op.writes.front().ep_size == ep);
            }
          }
          CHECK(a2a == 4 * (L - dense) * m);
          CHECK(expert_updates == L - dense);
          CHECK(updates == L + L - dense);
        }
      }
  CHECK_THROWS_WITH_AS(generate("ep", ep_options(4, 3, 2, 0, 1)), doctest::Contains("must divide --dp"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(generate("ep", ep_options(2, 2, 2, 2, 1)), doctest::Contains("no MoE layer"), std::invalid_argument);
}

TEST_CASE("gen 3d --ep: EP in every stage of every pipeline schedule, DDP, ZeRO-1 and FSDP, on both engines") {
  for (int pp : {1, 2})
    for (int dp : {2, 4})
      for (int ep : {2, 4})
        for (const char* schedule : {"1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev", "interleaved-zb"})
          for (int zero : {0, 1, 3})
            for (int dense : {0, 1}) {
              if (dp % ep != 0) continue;
              CAPTURE(pp);
              CAPTURE(dp);
              CAPTURE(ep);
              CAPTURE(schedule);
              CAPTURE(zero);
              CAPTURE(dense);
              GenOptions o;
              o.pp = pp, o.dp = dp, o.ep = ep, o.schedule = schedule, o.zero = zero, o.dense_layers = dense;
              o.chunks = std::string(schedule).rfind("interleaved", 0) == 0 ? 2 : 1;
              o.layers = 2 * pp * o.chunks, o.microbatches = 2 * pp;
              Schedule s = generate("3d", o);
              check_round_trip_and_valid(s, "3d-ep.sched");
              // Rank d + dp·stage holds expert slice (d mod ep) of each MoE layer of its stage: four all-to-alls per
              // MoE layer and microbatch, one update of each of its expert slices.
              for (int r = 0; r < s.header.world_size; ++r) {
                std::set<int> moe_layers;
                int a2a = 0, expert_updates = 0;
                for (const Op& op : s.ranks[r]) {
                  if (op.kind == OpKind::Forward && op.layer >= dense) moe_layers.insert(op.layer);
                  a2a += op.kind == OpKind::AllToAll;
                  if (op.kind == OpKind::Update && op.writes.front().expert()) {
                    ++expert_updates;
                    CHECK(op.writes.front().ep_index == (r % dp) % ep);
                    CHECK(op.writes.front().ep_size == ep);
                  }
                }
                CHECK(a2a == 4 * static_cast<int>(moe_layers.size()) * o.microbatches);
                CHECK(expert_updates == static_cast<int>(moe_layers.size()));
              }
            }
  GenOptions o;
  o.pp = 2, o.dp = 4, o.ep = 2, o.layers = 4, o.microbatches = 2;
  auto refused = [&](GenOptions bad, const char* words) {
    CAPTURE(words);
    CHECK_THROWS_WITH_AS(generate("3d", bad), doctest::Contains(words), std::invalid_argument);
  };
  GenOptions x = o;
  x.tp = 2;
  refused(x, "--ep with --tp 2 needs --sp");
  x.sequence_parallel = true, x.tp = 4;
  refused(x, "--ep 2 must be a multiple of --tp 4");
  x = o, x.cp = 2, x.ep = 8;  // (EP over CP x DP: 2 x 4 ranks of a stage)
  CHECK(simulate(generate("3d", x)).ok);
  x.ep = 16;
  refused(x, "--ep 16 must divide --tp x --cp x --dp = 8");
  x = o, x.ep = 3;
  refused(x, "--ep 3 must divide --tp x --cp x --dp = 4");
  x = o, x.dense_layers = 4;
  refused(x, "--dense-layers 4 leaves no MoE layer of the 4 layers");
  x = o, x.moe_imbalance = 1.5;
  CHECK(generate("3d", x).header.expert_load == std::vector<double>{1.5, 0.5});
}

TEST_CASE("gen 3d --ep --tp --sp: EP groups carved out of TP x DP, every schedule, on both engines") {
  // Megatron-Core's folded layout with expert TP 1: the rank of TP index j and DP index d in its stage (f = j + T·d)
  // holds expert slice f mod ep; each TP rank routes its sequence shard; EP may exceed DP.
  for (int dp : {1, 2, 4})
    for (int ep : {2, 4, 8})
      for (const char* schedule : {"1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev", "interleaved-zb"})
        for (int zero : {0, 1, 3}) {
          const int tp = 2, pp = 2, dense = 1;
          if ((tp * dp) % ep != 0) continue;
          CAPTURE(dp);
          CAPTURE(ep);
          CAPTURE(schedule);
          CAPTURE(zero);
          GenOptions o;
          o.tp = tp, o.sequence_parallel = true, o.pp = pp, o.dp = dp, o.ep = ep, o.schedule = schedule;
          o.zero = zero, o.dense_layers = dense;
          o.chunks = std::string(schedule).rfind("interleaved", 0) == 0 ? 2 : 1;
          o.layers = 2 * pp * o.chunks, o.microbatches = 2 * pp;
          Schedule s = generate("3d", o);
          check_round_trip_and_valid(s, "3d-ep-tp.sched");
          const int stage = tp * dp;
          for (int r = 0; r < s.header.world_size; ++r) {
            std::set<int> moe_layers;
            int a2a = 0, expert_updates = 0;
            for (const Op& op : s.ranks[r]) {
              if (op.kind == OpKind::Forward && op.layer >= dense && !expert_weight(op)) moe_layers.insert(op.layer);
              if (op.kind == OpKind::AllToAll) {
                ++a2a;
                // What it sends or gets back is its TP index's sequence shard of its microbatches.
                const Tensor& t = op.reads.front().expert() ? op.writes.front() : op.reads.front();
                CHECK(t.num_shards == tp);
                CHECK(t.shards == IdSet{r % tp});
              }
              if (op.kind == OpKind::Update && op.writes.front().expert()) {
                ++expert_updates;
                CHECK(op.writes.front().ep_index == (r % stage) % ep);
                CHECK(op.writes.front().ep_size == ep);
                CHECK(op.writes.front().tp_size == 1);  // the experts whole beside TP (expert TP 1)
              }
            }
            CHECK(a2a == 4 * static_cast<int>(moe_layers.size()) * o.microbatches);
            CHECK(expert_updates == static_cast<int>(moe_layers.size()));
          }
        }
}

TEST_CASE("gen 3d --ep --a2a-overlap: the same ops, forwards and backwards paired by phase, on both engines") {
  // Each pair: a forward run of MoE layers and the backward run after it, of another microbatch, interleaved so that
  // their all-to-alls (stream 2) fall between the other pass's compute; nothing added or lost.
  // A rank's ops as a multiset, streams aside, its frees as the multiset of what they free (a pair frees what its
  // sends sent together, after them).
  auto normalised = [](const Schedule& s, int r) {
    std::vector<std::string> ops;
    for (Op op : s.ranks[r]) {
      op.stream = 0;
      if (op.kind == OpKind::Free)
        for (const Tensor& t : op.reads) ops.push_back("free " + t.str());
      else
        ops.push_back(print_op(op, s.header));
    }
    std::sort(ops.begin(), ops.end());
    return ops;
  };
  for (int pp : {2, 3})
    for (int tp : {1, 2})
      for (const char* schedule : {"1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev", "interleaved-zb"}) {
        CAPTURE(pp);
        CAPTURE(tp);
        CAPTURE(schedule);
        GenOptions o;
        o.tp = tp, o.sequence_parallel = tp > 1, o.pp = pp, o.dp = 2, o.ep = 2 * tp, o.zero = 1, o.dense_layers = 1;
        o.schedule = schedule;
        o.chunks = std::string(schedule).rfind("interleaved", 0) == 0 ? 2 : 1;
        o.layers = 2 * pp * o.chunks, o.microbatches = 2 * pp;
        const Schedule alone = generate("3d", o);
        o.a2a_overlap = true;
        const Schedule paired = generate("3d", o);
        check_round_trip_and_valid(paired, "3d-ep-a2a.sched");
        int streamed = 0, interleaved = 0;
        for (int r = 0; r < paired.header.world_size; ++r) {
          CHECK(normalised(paired, r) == normalised(alone, r));
          int last_forward_layer = -1;
          for (const Op& op : paired.ranks[r]) {
            if (op.kind == OpKind::AllToAll) {
              CHECK(op.stream == 2);
              ++streamed;
            }
            // A backward's expert pass right after another microbatch's dense forward: a pair's phases.
            if (op.kind == OpKind::Forward && !expert_weight(op)) last_forward_layer = op.layer;
            else if (op.kind == OpKind::Backward && expert_weight(op) && last_forward_layer >= 0) ++interleaved;
            else if (is_compute(op.kind)) last_forward_layer = -1;
          }
        }
        CHECK(streamed > 0);
        CHECK(interleaved > 0);
      }
  GenOptions dense;
  dense.pp = 2, dense.dp = 2, dense.layers = 4, dense.microbatches = 4, dense.a2a_overlap = true;
  CHECK_THROWS_WITH_AS(generate("3d", dense), doctest::Contains("--a2a-overlap overlaps expert parallelism's all-to-alls"),
                       std::invalid_argument);
}

TEST_CASE("gen ep: the experts take 1/e of the EP group's tokens, so EP splits their time and memory") {
  // Unit costs: a dense forward of one microbatch takes as long as an expert slice's forward of the EP group's e.
  for (int ep : {1, 2, 4}) {
    CAPTURE(ep);
    Schedule s = generate("ep", ep_options(4, ep, 2, 0, 1));
    SimResult r = simulate(with_cost(s, "puzzle"));
    REQUIRE(r.ok);
    double dense = -1, expert = -1;
    for (const OpRun& run : r.trace.ranks[0]) {
      if (run.op.kind != OpKind::Forward) continue;
      (run.op.reads.front().expert() || run.op.reads.back().expert() ? expert : dense) = run.end - run.start;
    }
    CHECK(dense > 0);
    CHECK(expert == doctest::Approx(dense));
  }
  // An expert slice's weight is 1/e of a layer's in the puzzle model's memory.
  PuzzleCostModel puzzle;
  CHECK(puzzle.memory(expert_slice(weight_tensor(0), 0, 4)) == doctest::Approx(puzzle.memory(weight_tensor(0)) / 4));
}

TEST_CASE("MoE schedules that skip a step are refused by both engines, naming rank, op and line") {
  // One MoE layer (layer 1) over an EP group of two ranks, one microbatch each.
  const std::string text = print_schedule(generate("ep", ep_options(2, 2, 2, 1, 1)));
  SUBCASE("skipping the combine: the next op reads routed tokens") {
    std::string t = replaced(text, "  all-to-all L1 group 2 : A2{0}<routed> -> A2{0-1}<e0/2>\n  free : A2{0}<routed>\n"
                                   "  forward L1 {0-1} : A2{0-1}<e0/2> W1<e0/2> -> A2{0-1}<e0/2:out>\n"
                                   "  all-to-all L1 group 2 : A2{0-1}<e0/2:out> -> A2{0}\n  free : A2{0-1}<e0/2:out>\n",
                         "");
    t = replaced(t, "  loss {0}\n", "  loss {0} : A2{0}<routed>\n");
    const std::string e = both_refuse(t);
    CHECK(has(e, "rank 0: loss"));
    CHECK(has(e, "moe.sched:"));
    CHECK(has(e, "routed to experts that have not run"));
  }
  SUBCASE("routing to an expert slice the rank does not hold") {
    const std::string e =
        both_refuse(replaced(text, "forward L1 {0-1} : A2{0-1}<e1/2> W1<e1/2>", "forward L1 {0-1} : A2{0-1}<e1/2> W1<e0/2>"));
    CHECK(has(e, "rank 1: forward layer 1 batches {0-1} (moe.sched:"));
    CHECK(has(e, "not those of W1<e0/2>"));
  }
  SUBCASE("combining tokens the experts did not process") {
    std::string t = replaced(text, "  forward L1 {0-1} : A2{0-1}<e0/2> W1<e0/2> -> A2{0-1}<e0/2:out>\n", "");
    t = replaced(t, "all-to-all L1 group 2 : A2{0-1}<e0/2:out> -> A2{0}", "all-to-all L1 group 2 : A2{0-1}<e0/2> -> A2{0}");
    CHECK(has(both_refuse(t), "not their output"));
  }
  SUBCASE("an expert slice updated twice, or never") {
    const std::string update = "  update L1 : dW1{0-1}<e0/2> W1<e0/2> O1<e0/2>\n";
    std::string twice = replaced(text, update, update + "  update L1 : dW1{0-1}<e0/2> W1<e0/2>@1 O1<e0/2>@1\n");
    CHECK(has(both_refuse(twice), "layer 1's expert slice 0 of 2 is updated again"));
    std::string never = replaced(text, update, "");
    never = replaced(never, "  free : dW1{0-1}<e0/2> W1<e0/2> O1<e0/2>\n", "");
    CHECK(has(both_refuse(never), "layer 1: expert slice 0 of 2 is never updated"));
  }
  SUBCASE("an update of the dense weight with an expert's grad") {
    const std::string e = both_refuse(
        replaced(text, "  update L1 : dW1{0-1}<e0/2> W1<e0/2> O1<e0/2>\n", "  update L1 : dW1{0-1}<e0/2> W1@1 O1@1\n"));
    CHECK(has(e, "not one expert slice"));
  }
}

TEST_CASE("PyTorch's CSV refuses an all-to-all, Chakra traces carry it and read back") {
  Schedule s = generate("ep", ep_options(2, 2, 2, 0, 1));
  Schedule staged = s;
  staged.header.stage_map = {0, 0};  // (a CSV needs one; the all-to-all is what it cannot hold)
  CHECK_THROWS_WITH_AS(export_pytorch_csv(staged, CsvForm::ComputeComms), doctest::Contains("all-to-all"), std::invalid_argument);
  // Chakra carries them (ALL_TO_ALL collectives) and reads them back.
  const std::vector<ChakraRank> ranks = chakra_trace(s);
  std::vector<std::string> names;
  for (std::size_t r = 0; r < ranks.size(); ++r) names.push_back(fmt::format("t.{}.et", r));
  CHECK(print_schedule(schedule_from_chakra(ranks, names)) == print_schedule(s));
}

TEST_CASE("the command line: gen ep writes and simulates, replay refuses a dense model, the hardware model too, with a reason") {
  const auto dir = testing::fresh_dir("moe_cli");
  const std::string file = (dir / "ep.sched").string();
  auto r = testing::run_trainsim("gen ep --dp 4 --ep 2 --layers 3 --dense-layers 1 --microbatches 2 -o " + file);
  REQUIRE(r.exit_code == 0);
  r = testing::run_trainsim("sim " + file);
  CHECK(r.exit_code == 0);
  CHECK(has(r.out, "valid"));
  r = testing::run_trainsim("sim " + file + " --model llama3-8b --device h100-sxm --network nvlink8-ib400", true);
  CHECK(r.exit_code == 1);
  CHECK(has(r.out, "the schedule routes tokens to experts, but the model 'llama3-8b' has none"));
  r = testing::run_trainsim("replay " + file + " --model tiny --blocks 3 --steps 1", true);  // (a dense model)
  CHECK(r.exit_code == 1);
  CHECK(has(r.out, "the schedule has expert slices (layer 1, EP 2) but the model (tiny (modified)) has no experts"));
  r = testing::run_trainsim("gen ep --dp 4 --ep 3 -o -", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "--ep 3 must divide --dp 4"));
  r = testing::run_trainsim("gen --help");
  CHECK(has(r.out, "expert parallel (Mixture of Experts) ep"));
  CHECK(has(r.out, "--etp"));
  // Expert TP: simulated, and replayed (tests/test_exec_moe.cpp checks the training against one device).
  const std::string etp = (dir / "etp.sched").string();
  r = testing::run_trainsim("gen 3d --tp 2 --sp --dp 2 --ep 2 --etp 2 --layers 2 --microbatches 2 -o " + etp);
  REQUIRE(r.exit_code == 0);
  r = testing::run_trainsim("sim " + etp);
  CHECK(r.exit_code == 0);
  r = testing::run_trainsim("replay " + etp + " --model tiny-moe --steps 2 --check", true);
  INFO(r.out);
  CHECK(r.exit_code == 0);
  CHECK(has(r.out, "check against single-device training: largest relative difference"));
  r = testing::run_trainsim("gen 3d --tp 2 --sp --dp 2 --ep 2 --etp 3 -o -", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "--etp is 1 (the experts whole beside TP) or --tp (2"));
}

TEST_CASE("expert loads: the expert_load line round-trips, and is refused where it cannot hold") {
  GenOptions o = ep_options(4, 4, 2, 0, 1);
  o.expert_load = {1.5, 0.5, 1, 1};
  Schedule s = generate("ep", o);
  CHECK(s.header.expert_load == std::vector<double>{1.5, 0.5, 1, 1});
  const std::string text = print_schedule(s);
  CHECK(has(text, "\nexpert_load 1.5 0.5 1 1\n"));
  CHECK(print_schedule(parse_schedule(text, "load.sched")) == text);
  auto refused = [](const std::string& text, const std::string& words) {
    try {
      parse_schedule(text, "load.sched");
      FAIL("accepted");
    } catch (const ParseError& e) {
      CHECK(has(e.what(), words));
    }
  };
  const std::string head = "world_size 1\nlayers 1\nmicrobatches 1\ncost_model unit\n";
  refused("trainsim-schedule 2\n" + head + "expert_load 1 1\n", "load.sched:6:1: expert_load needs format version 3");
  refused("trainsim-schedule 3\n" + head + "expert_load\n", "one load per expert slice");
  for (const char* bad : {"0", "-1", "nan", "inf", "1e7", "x", "1.5.2"})
    refused("trainsim-schedule 3\n" + head + "expert_load 1 " + bad + "\n", "load.sched:6:15: expected a relative load");
  refused("trainsim-schedule 3\n" + head + "expert_load 1 1\n\nrank 0\n  load -> W0<e0/4>\n",
          "load.sched:9:11: W0<e0/4> is a slice of an EP degree of 4, but expert_load gives the loads of 2 slices");
  // gen's options.
  GenOptions both = ep_options(4, 4, 2, 0, 1);
  both.expert_load = {1, 1, 1, 1};
  both.moe_imbalance = 2;
  CHECK_THROWS_WITH_AS(generate("ep", both), doctest::Contains("give one of --expert-load, --expert-load-file and "
                                                                "--moe-imbalance"),
                       std::invalid_argument);
  GenOptions wrong = ep_options(4, 4, 2, 0, 1);
  wrong.expert_load = {1, 1};
  CHECK_THROWS_WITH_AS(generate("ep", wrong), doctest::Contains("gives 2 loads but --ep 4 has 4"), std::invalid_argument);
  for (double r : {0.5, 4.0, std::nan("")}) {
    GenOptions imbalance = ep_options(4, 4, 2, 0, 1);
    imbalance.moe_imbalance = r;
    CHECK_THROWS_WITH_AS(generate("ep", imbalance), doctest::Contains("below --ep (4)"), std::invalid_argument);
  }
}

TEST_CASE("expert loads per expert: read from a file, summed into the slices that hold them, refused by line") {
  // A router's tokens per expert (8 experts), with a comment, commas and lines; EP 4 holds experts 2j and 2j+1.
  const std::vector<double> loads =
      parse_expert_loads("# tokens per expert, layer mean\n300, 100\n200 200 # slice 1\n\t50 150\n400,200,\n", "r.txt");
  CHECK(loads == std::vector<double>{300, 100, 200, 200, 50, 150, 400, 200});
  CHECK(slice_loads(loads, 4) == std::vector<double>{1, 1, 0.5, 1.5});  // (each over the mean slice's 400)
  CHECK(slice_loads(loads, 8).front() == 300 / 200.0);
  CHECK(slice_loads(loads, 1) == std::vector<double>{1});
  CHECK_THROWS_WITH_AS(slice_loads(loads, 3), doctest::Contains("8 experts' loads do not split into 3 expert slices"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(slice_loads({0, 0, 1, 1}, 2), doctest::Contains("expert slice 0 of 2 (experts 0 to 1) gets no token"),
                       std::invalid_argument);
  for (const auto& [text, words] : std::vector<std::pair<std::string, std::string>>{
           {"1 2\n3 x4\n", "r.txt:2: 'x4' is not a number"},
           {"1\n-1\n", "r.txt:2: an expert's load is 0 to 1e15, got -1"},
           {"1 nan", "r.txt:1: an expert's load is 0 to 1e15, got nan"},
           {"1 inf", "r.txt:1: an expert's load is 0 to 1e15, got inf"},
           {"1 1e16", "r.txt:1: an expert's load is 0 to 1e15, got 1e16"},
           {"1 1e400", "r.txt:1: an expert's load is 0 to 1e15, got 1e400"},
           {"# nothing\n", "r.txt: no expert's load in it"},
           {"0 0 0", "r.txt: every expert's load is 0"},
           {std::string(100, '9'), "r.txt:1: '" + std::string(80, '9')}}) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(parse_expert_loads(text, "r.txt"), doctest::Contains(words.c_str()), std::invalid_argument);
  }
  std::string many;
  for (int i = 0; i < 65537; ++i) many += "1 ";
  CHECK_THROWS_WITH_AS(parse_expert_loads(many, "r.txt"), doctest::Contains("more than 65536 experts' loads"),
                       std::invalid_argument);
  // gen: the header's expert_load is the slices' loads; one of the three ways only.
  GenOptions o = ep_options(4, 4, 2, 0, 1);
  o.per_expert_load = loads;
  CHECK(generate("ep", o).header.expert_load == std::vector<double>{1, 1, 0.5, 1.5});
  o.moe_imbalance = 2;
  CHECK_THROWS_WITH_AS(generate("ep", o), doctest::Contains("give one of"), std::invalid_argument);
  o.moe_imbalance = 0, o.per_expert_load = {0, 0, 1, 1, 1, 1, 1, 1};
  CHECK_THROWS_WITH_AS(generate("ep", o), doctest::Contains("ep: --expert-load-file: expert slice 0 of 4"),
                       std::invalid_argument);
  // The command line: the file's experts must be the model's.
  const auto dir = testing::fresh_dir("expert-loads");
  const std::string file = testing::write(dir / "loads.txt", "300, 100\n200 200\n50 150\n400,200\n");
  testing::CommandResult r = testing::run_trainsim("gen 3d --dp 8 --ep 4 --microbatches 8 --model mixtral-8x7b "
                                          "--expert-load-file " + file + " -o -", true);
  CHECK(r.exit_code == 0);
  CHECK(has(r.out, "\nexpert_load 1 1 0.5 1.5\n"));
  r = testing::run_trainsim("gen 3d --dp 8 --ep 4 --microbatches 8 --model qwen3-30b-a3b --expert-load-file " + file +
                                " -o -", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "gives 8 experts' loads, but the model 'qwen3-30b-a3b' has 128 experts"));
  for (const char* line : {"gen 1f1b --expert-load 1,1", "gen 3d --dp 2 --moe-imbalance 1.5", "gen ddp --dp 2"}) {
    CAPTURE(line);
    r = testing::run_trainsim(std::string(line) + (has(line, "ddp") ? " --expert-load-file " + file : "") + " -o -", true);
    CHECK(r.exit_code == 2);
    CHECK(has(r.out, "the schedule has no expert slices to load (gen ep, or gen 3d --ep)"));
  }
  r = testing::run_trainsim("gen ep --dp 4 --ep 2 --expert-load-file " + (dir / "none.txt").string() + " -o -", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "--expert-load-file: " + (dir / "none.txt").string() + ": cannot open the file"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("expert loads: the busiest slice computes and holds its share, and the others wait for it at the combine") {
  const double r = 2.5;
  for (const char* cost : {"puzzle", "unit"}) {
    CAPTURE(cost);
    GenOptions o = ep_options(4, 4, 2, 0, 1);
    Schedule balanced = with_cost(generate("ep", o), cost);
    o.moe_imbalance = r;
    Schedule skewed = with_cost(generate("ep", o), cost);
    CHECK(skewed.header.expert_load == std::vector<double>{2.5, 0.5, 0.5, 0.5});
    SimResult b = simulate(balanced), k = simulate(skewed);
    REQUIRE(b.ok);
    REQUIRE(k.ok);
    // Each rank's expert forward takes its slice's share of the balanced time.
    auto expert_forward = [](const SimResult& res, int rank) {
      for (const OpRun& run : res.trace.ranks[rank])
        if (run.op.kind == OpKind::Forward && run.op.reads.front().expert()) return run.end - run.start;
      return Time{-1};
    };
    const Time one = expert_forward(b, 0);
    REQUIRE(one > 0);
    for (int rank = 1; rank < 4; ++rank) CHECK(expert_forward(b, rank) == one);
    CHECK(static_cast<double>(expert_forward(k, 0)) == doctest::Approx(r * static_cast<double>(one)));
    for (int rank = 1; rank < 4; ++rank)
      CHECK(static_cast<double>(expert_forward(k, rank)) == doctest::Approx(0.5 * static_cast<double>(one)));
    // The step waits for the busiest slice: longer than balanced, though the experts' total work is the same.
    CHECK(k.trace.makespan() > b.trace.makespan());
  }
  // Memory: the busiest slice's tokens are r times a balanced slice's.
  PuzzleCostModel puzzle;
  const Tensor tokens = routed_as(activation_tensor(1, IdSet::range(0, 4)), Route::ExpertIn, 0, 4);
  const double even = puzzle.memory(tokens);
  puzzle.set_expert_load({2.5, 0.5, 0.5, 0.5});
  CHECK(puzzle.memory(tokens) == doctest::Approx(2.5 * even));
  CHECK(puzzle.expert_load_factor(1, 4) == doctest::Approx(0.5));
  CHECK(puzzle.expert_load_factor(1, 8) == 1);  // loads of another EP degree do not apply
  // Loads are relative: 5, 1, 1, 1 is the same as 2.5, 0.5, 0.5, 0.5.
  puzzle.set_expert_load({5, 1, 1, 1});
  CHECK(puzzle.expert_load_factor(0, 4) == doctest::Approx(2.5));
  CHECK_THROWS_AS(puzzle.set_expert_load({1, 0}), std::invalid_argument);
}
