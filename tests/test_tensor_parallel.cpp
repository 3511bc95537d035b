// Tensor parallelism in the tensor algebra, the schedule format and the simulator's checks (docs/design.md,
// "Tensor parallelism"): TP slices, partial sums and their all-reduce (Shoeybi et al. 2019, Megatron-LM).
#include <doctest/doctest.h>

#include <regex>

#include "schedules/replay.h"
#include "schedules/text_format.h"
#include "sim/algebra.h"

using namespace trainsim;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// One TP rank's step of a 2-layer model over a TP group of 2 (group 1): the first layer's row-parallel output
// is a partial sum all-reduced before the second layer reads it; the last layer's LM head is column-parallel,
// so the loss reads this rank's vocabulary slice; backward all-reduces the input grad's partial sum.
std::string tp_rank(int j) {
  const std::string s = "<" + std::to_string(j) + "/2>", p = "<+" + std::to_string(j) + "/2>";
  return "  load -> W0" + s + " O0" + s + " W1" + s + " O1" + s + " A0{0}\n" +
         "  forward L0 {0} : A0{0} W0" + s + " -> A1{0}" + p + "\n" +
         "  all-reduce group 1 : A1{0}" + p + " -> A1{0}\n" +
         "  forward L1 {0} : A1{0} W1" + s + " -> A2{0}" + s + "\n" +
         "  loss {0} : A2{0}" + s + " -> dA2{0}" + s + "\n" +
         "  backward L1 {0} : A1{0} dA2{0}" + s + " W1" + s + " -> dW1{0}" + s + " dA1{0}" + p + "\n" +
         "  all-reduce group 1 : dA1{0}" + p + " -> dA1{0}\n" +
         "  backward L0 {0} : A0{0} dA1{0} W0" + s + " -> dW0{0}" + s + " dA0{0}" + p + "\n" +
         "  update L0 : dW0{0}" + s + " W0" + s + " O0" + s + " -> W0" + s + "@1 O0" + s + "@1\n" +
         "  update L1 : dW1{0}" + s + " W1" + s + " O1" + s + " -> W1" + s + "@1 O1" + s + "@1\n";
}

std::string tp_schedule(const std::string& rank0, const std::string& rank1) {
  return "trainsim-schedule 2\nworld_size 2\nlayers 2\nmicrobatches 1\ncost_model unit\np2p per-pair\ngroup 1 tp0 0 1\n"
         "rank 0\n" + rank0 + "rank 1\n" + rank1;
}

std::string sim_error(const std::string& text) {
  Schedule s = parse_schedule(text, "tp.sched");
  SimResult r = simulate(s);
  return r.ok ? "ok" : r.error;
}

// `text` with the first match of `pattern` replaced.
std::string edit(const std::string& text, const std::string& pattern, const std::string& with) {
  return std::regex_replace(text, std::regex(pattern), with, std::regex_constants::format_first_only);
}

}  // namespace

TEST_CASE("TP slices and partial sums: names, sums and what does not mix") {
  const Tensor w = tp_slice(weight_tensor(3), 1, 4);
  CHECK(w.str() == "W3<1/4>");
  CHECK(w.tp_sliced());
  CHECK(w.tp_index() == 1);
  CHECK(tp_slice(weight_tensor(3, {0}, 8), 1, 4).str() == "W3<1/4>[0/8]");
  const Tensor p0 = tp_partial(activation_tensor(2, {0}), 0, 2), p1 = tp_partial(activation_tensor(2, {0}), 1, 2);
  CHECK(p0.str() == "A2{0}<+0/2>");
  // The sum over every slice is the plain, complete tensor; a slice summed twice is an error.
  CHECK(sum(p0, p1) == activation_tensor(2, {0}));
  CHECK(sum(p1, p0) == activation_tensor(2, {0}));
  CHECK_THROWS_WITH_AS(sum(p0, p0), doctest::Contains("both hold TP slices 0"), TensorError);
  // A partial sum of 3 slices of 4 is still partial.
  Tensor q = tp_partial(activation_tensor(2, {0}), 0, 4);
  q = sum(q, tp_partial(activation_tensor(2, {0}), 1, 4));
  q = sum(q, tp_partial(activation_tensor(2, {0}), 3, 4));
  CHECK(q.partial);
  CHECK(q.str() == "A2{0}<+0-1,3/4>");
  CHECK_THROWS_AS(shard(q, 0, 2), TensorError);
  // Slices are different parameters: their grads do not add, their shards do not combine.
  const Tensor g0 = tp_slice(weight_grad_tensor(1, {0}), 0, 2), g1 = tp_slice(weight_grad_tensor(1, {1}), 1, 2);
  CHECK_THROWS_WITH_AS(sum(g0, g1), doctest::Contains("different TP slices"), TensorError);
  CHECK(sum(g0, tp_slice(weight_grad_tensor(1, {1}), 0, 2)).batches == IdSet{0, 1});
  CHECK_THROWS_AS(combine(tp_slice(weight_tensor(0, {0}, 2), 0, 2), tp_slice(weight_tensor(0, {1}, 2), 1, 2)),
                  TensorError);
  CHECK_THROWS_AS(tp_slice(w, 0, 2), TensorError);       // already sliced
  CHECK_THROWS_AS(tp_slice(weight_tensor(0), 2, 2), TensorError);
  CHECK_THROWS_AS(tp_slice(weight_tensor(0), 0, 65), TensorError);
  CHECK_THROWS_AS(tp_partial(weight_tensor(0), 0, 2), TensorError);  // only activations are partial sums
}

TEST_CASE("TP tensors in the schedule format: version 2, round trip, clear errors") {
  for (const char* name : {"W3<1/4>", "W3<1/4>[0-1/8]@2", "A2{0-3}<+1/4>", "dA2{1}<+0,2/4>", "A4{0}<3/4>",
                           "dW1{0-3}<63/64>[1/4]"})
    CHECK(parse_tensor(name).str() == name);
  CHECK_THROWS_WITH_AS(parse_tensor("W3<1/1>"), doctest::Contains("TP degree from 2"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_tensor("W3<4/4>"), doctest::Contains("out of range"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_tensor("W3<0-1/4>"), doctest::Contains("one TP slice"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_tensor("W3<+1/4>"), doctest::Contains("only activations"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_tensor("A3{0}<+0-1/2>"), doctest::Contains("complete tensor"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_tensor("W3<1/99>"), doctest::Contains("TP degree from 2 to 64"), std::invalid_argument);
  CHECK_THROWS_AS(parse_tensor("W3<1/4"), std::invalid_argument);
  // A version 1 file keeps version 1's grammar.
  const std::string v2 = tp_schedule(tp_rank(0), tp_rank(1));
  const std::string v1 = edit(edit(v2, "trainsim-schedule 2", "trainsim-schedule 1"), "group 1 tp0", "group 1");
  try {
    parse_schedule(v1, "v1.sched");
    FAIL("a TP slice parsed in a version 1 file");
  } catch (const ParseError& e) {
    CHECK(has(e.what(), "v1.sched:9"));
    CHECK(has(e.what(), "need format version 2"));
  }
  // Version 2 prints back byte for byte as it was read, every op with its tensors.
  Schedule s = parse_schedule(v2, "tp.sched");
  CHECK(print_schedule(s).find(print_op(s.ranks[1][1], s.header)) != std::string::npos);
  CHECK(print_op(s.ranks[1][1], s.header) == "forward L0 {0} : A0{0} W0<1/2> -> A1{0}<+1/2>");
  CHECK(print_schedule(parse_schedule(print_schedule(s), "again.sched")) == print_schedule(s));
}

TEST_CASE("groups have names in version 2, a rank's TP group is the group named tp... that holds it") {
  Schedule s = parse_schedule(tp_schedule(tp_rank(0), tp_rank(1)), "tp.sched");
  REQUIRE(s.header.group_names == std::vector<std::string>{"tp0"});
  CHECK(tp_groups_by_rank(s.header) == std::vector<int>{1, 1});
  CHECK(has(print_schedule(s), "\ngroup 1 tp0 0 1\n"));
  CHECK(is_tp_group_name("tp"));
  CHECK(is_tp_group_name("tp_3"));
  CHECK(!is_tp_group_name("tpx"));
  CHECK(!is_tp_group_name("dp0"));
  const std::string header = "trainsim-schedule 2\nworld_size 4\nlayers 1\nmicrobatches 1\n";
  auto error = [](const std::string& text) {
    try {
      parse_schedule(text, "g.sched");
    } catch (const ParseError& e) {
      return std::string(e.what());
    }
    return std::string("parsed");
  };
  // Unnamed groups keep no names; a later name gives the earlier ones "".
  Schedule mixed = parse_schedule(header + "group 1 0 1\ngroup 2 dp0 0 2\nrank 0\nrank 1\nrank 2\nrank 3\n", "m.sched");
  CHECK(mixed.header.group_names == std::vector<std::string>{"", "dp0"});
  CHECK(parse_schedule(header + "group 1 0 1\nrank 0\nrank 1\nrank 2\nrank 3\n", "u.sched").header.group_names.empty());
  CHECK(has(error(header + "group 1 tp0 0 1\ngroup 2 tp1 1 2\n"), "rank 1 is in two TP groups"));
  // The error points at the later group's name, on its line (the check runs once, when the header ends).
  CHECK(error(header + "group 1 tp0 0 1\ngroup 2 dp0 0 2\ngroup 3 tp1 1 2\nrank 0\n") ==
        "g.sched:7:9: rank 1 is in two TP groups, 1 ('tp0') and 3 ('tp1')");
  CHECK(error(header + "group 1 tp0 0 1\ngroup 2 tp1 2 3\ngroup 3 tp2 3 0\n") ==
        "g.sched:7:9: rank 3 is in two TP groups, 2 ('tp1') and 3 ('tp2')");
  CHECK(has(error(header + "group 1 tp0 0 1\ngroup 2 tp0 2 3\n"), "given twice"));
  CHECK(has(error(header + "group 1 t!p 0 1\n"), "a group name is a letter"));
  CHECK(has(error("trainsim-schedule 1\nworld_size 2\nlayers 1\nmicrobatches 1\ngroup 1 tp0 0 1\n"),
            "g.sched:5"));
}

TEST_CASE("tp_groups_by_rank: each rank's TP group in one pass, a rank in two TP groups is refused, naming both") {
  ScheduleHeader h;
  h.version = 2;
  h.world_size = 6;
  h.groups = {{0, 1}, {0, 2, 4}, {2, 3}, {4, 5}};
  h.group_names = {"tp0", "dp0", "tp1"};  // group 4 has no name: not a TP group
  CHECK(tp_groups_by_rank(h) == std::vector<int>{1, 1, 3, 3, 0, 0});
  h.group_names = {};
  CHECK(tp_groups_by_rank(h) == std::vector<int>(6, 0));
  h.group_names = {"tp0", "tp_x", "tp1"};
  try {
    tp_groups_by_rank(h);
    FAIL("rank 0 in two TP groups was accepted");
  } catch (const TpGroupConflict& e) {
    CHECK(std::string(e.what()) == "rank 0 is in two TP groups, 1 ('tp0') and 2 ('tp_x')");
    CHECK(e.rank == 0);
    CHECK(e.first == 1);
    CHECK(e.second == 2);
  }
  CHECK_THROWS_AS(tp_groups_by_rank(h), std::invalid_argument);  // callers catch it as one
}

TEST_CASE("a TP step over two ranks passes the simulator's checks") {
  CHECK(sim_error(tp_schedule(tp_rank(0), tp_rank(1))) == "ok");
}

TEST_CASE("TP schedules that break Megatron's rules are refused, naming rank, op and line") {
  const std::string r0 = tp_rank(0), r1 = tp_rank(1);
  SUBCASE("a forward skips the all-reduce of the partial sum") {
    // Both ranks drop the forward all-reduce and read the partial sum as the next layer's input.
    auto skip = [](const std::string& r) {
      std::string out = edit(r, "  all-reduce group 1 : A1\\{0\\}<\\+[01]/2> -> A1\\{0\\}\n", "");
      return std::regex_replace(out, std::regex("forward L1 \\{0\\} : A1\\{0\\} "),
                                "forward L1 {0} : A1{0}<+" + std::string(1, r[r.find("W0<") + 3]) + "/2> ");
    };
    std::string e = sim_error(tp_schedule(skip(r0), skip(r1)));
    CHECK(has(e, "rank 0"));
    CHECK(has(e, "forward layer 1"));
    CHECK(has(e, "tp.sched:11"));
    CHECK(has(e, "partial sum"));
    CHECK(has(e, "all-reduce it over the TP group first"));
  }
  SUBCASE("the backward skips the all-reduce of the input grad") {
    std::string e = sim_error(tp_schedule(edit(edit(r0, "  all-reduce group 1 : dA1\\{0\\}<\\+0/2> -> dA1\\{0\\}\n", ""),
                                               "A0\\{0\\} dA1\\{0\\} W0", "A0{0} dA1{0}<+0/2> W0"),
                                          r1));
    CHECK(has(e, "rank 0"));
    CHECK(has(e, "backward layer 0"));
    CHECK(has(e, "partial sum"));
  }
  SUBCASE("both ranks compute slice 0: the all-reduce adds slice 0 twice") {
    std::string r1_as_0 = std::regex_replace(r1, std::regex("<1/2>"), "<0/2>");
    r1_as_0 = std::regex_replace(r1_as_0, std::regex("<\\+1/2>"), "<+0/2>");
    std::string e = sim_error(tp_schedule(r0, r1_as_0));
    CHECK(has(e, "all-reduce"));
    CHECK(has(e, "both hold TP slices 0"));
  }
  SUBCASE("the forward claims a complete output from a TP slice") {
    std::string e = sim_error(tp_schedule(edit(r0, "-> A1\\{0\\}<\\+0/2>", "-> A1{0}"), r1));
    CHECK(has(e, "rank 0"));
    CHECK(has(e, "forward layer 0"));
    CHECK(has(e, "A1{0}<+0/2>"));
  }
  SUBCASE("an update mixes TP slices") {
    std::string e = sim_error(tp_schedule(edit(r0, "update L1 : dW1\\{0\\}<0/2>", "update L1 : dW1{0}<1/2>"), r1));
    CHECK(has(e, "rank 0"));
    CHECK(has(e, "update layer 1"));
    CHECK(has(e, "not one TP slice"));
  }
  SUBCASE("slice 1 of a layer is never updated") {
    std::string e = sim_error(tp_schedule(r0, edit(r1, "  update L1 [^\n]*\n", "")));
    CHECK(has(e, "layer 1: TP slice 1 of 2 is never updated"));
  }
  SUBCASE("the loss reads another slice's logits") {
    std::string e = sim_error(tp_schedule(edit(r0, "backward L1 \\{0\\} : A1\\{0\\} dA2\\{0\\}<0/2>",
                                               "backward L1 {0} : A1{0} dA2{0}<1/2>"),
                                          r1));
    CHECK(has(e, "rank 0"));
    CHECK(has(e, "backward layer 1"));
  }
}

TEST_CASE("the op algebra with TP slices, op by op") {
  auto forward = [](Tensor a, Tensor w, Tensor out) {
    Op op;
    op.kind = OpKind::Forward;
    op.layer = w.layer;
    op.batches = a.batches;
    op.reads = {a, w};
    op.writes = {out};
    return algebra_problem(op, 4, 1);
  };
  const Tensor a1 = activation_tensor(1, {0});
  const Tensor w1 = tp_slice(weight_tensor(1), 1, 2);
  CHECK(forward(a1, w1, tp_partial(activation_tensor(2, {0}), 1, 2)) == "");
  CHECK(has(forward(a1, w1, tp_partial(activation_tensor(2, {0}), 0, 2)), "it writes"));
  // The last layer's column-parallel LM head gives a vocabulary slice, not a partial sum.
  const Tensor w3 = tp_slice(weight_tensor(3), 1, 2);
  CHECK(forward(activation_tensor(3, {0}), w3, tp_slice(activation_tensor(4, {0}), 1, 2)) == "");
  // An input with a sequence shard only (sequence parallelism) must be all-gathered first.
  CHECK(has(forward(shard(a1, 0, 2), w1, tp_partial(activation_tensor(2, {0}), 1, 2)), "all-gather it first"));
  // An FSDP shard of a TP slice is not the complete weight.
  CHECK(has(forward(a1, tp_slice(weight_tensor(1, {0}, 2), 1, 2), tp_partial(activation_tensor(2, {0}), 1, 2)),
            "all-gather it first"));
  // Model inputs are loaded whole; a partial sum is never loaded.
  CHECK(is_loadable(tp_slice(weight_tensor(0), 0, 2)));
  CHECK(!is_loadable(tp_partial(activation_tensor(0, {0}), 0, 2)));
}
