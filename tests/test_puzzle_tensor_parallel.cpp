// The ninth puzzle, tensor parallelism (an addition to the original eight): its reference run, its recorded
// schedule, and the errors a learner meets (reading a partial sum, all-reducing the wrong thing), each naming
// the line of the learner's code.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "puzzles/runner.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::puzzles;

namespace {
const Puzzle& tp_puzzle() {
  const Puzzle* p = find_puzzle("tensor_parallel");
  REQUIRE(p != nullptr);
  return *p;
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
std::string at(int line) { return "tests/test_puzzle_tensor_parallel.cpp:" + std::to_string(line); }

// (Messages name files as the compiler does: "tests/x.cpp" on main, "../../tests/x.cpp" in a worktree build with
// CCACHE_BASEDIR; the checks below hold for both.)
// Source lines noted by the programs below (a Program is a plain function: no captures).
int line = 0;

// Every batch, and this rank's slice of every layer (the exercise's set-up).
void set_up(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  std::vector<int> every(model.batches());
  std::iota(every.begin(), every.end(), 0);
  activations[0] = model.get_activation(every);
  for (int l = 0; l < model.layers(); ++l)
    std::tie(weights[l], opt_states[l]) = model.load_slice(l, model.tp_rank(), model.tp());
}
}  // namespace

TEST_CASE("the tensor-parallel puzzle: its reference run, numbers and targets") {
  const Puzzle& p = tp_puzzle();
  CHECK(p.title == "Puzzle 8 - Tensor Parallelism");
  CHECK(p.tp == 4);
  CHECK(&p == &catalog()[8]);  // after the original eight, which keep their places
  PuzzleResult r = run_puzzle(p);
  CHECK(r.error == "");
  REQUIRE(r.passed());
  // Forward: 4 layers of 1 step (4 batches at 1/4 of a step on a slice) and 3 all-reduces of 0.3; the loss
  // takes no time; backward the same; 4 updates of 0.5, the last starting at 11.3.
  CHECK(r.timesteps == seconds(11.3));
  CHECK(r.makespan == seconds(11.8));
  // The targets are the reference's: its Timesteps rounded down, its peak rounded up to the next 100,000.
  CHECK(p.target_time == std::floor(to_seconds(r.timesteps)));
  CHECK(p.target_memory == std::ceil(r.peak.memory / 100'000) * 100'000);
  // Each rank holds a quarter of every weight and optimizer state, and runs every layer for every batch.
  for (int rank = 0; rank < p.ranks; ++rank) {
    int forwards = 0, allreduces = 0;
    for (const auto& run : r.trace.ranks[rank]) {
      if (run.op.kind == OpKind::Forward) {
        ++forwards;
        CHECK(run.op.reads[1].str() == fmt::format("W{}<{}/4>", run.op.layer, rank));
        CHECK(run.end - run.start == seconds(1));
      }
      if (run.op.kind == OpKind::AllReduce) {
        ++allreduces;
        CHECK(run.op.group == 1);
      }
    }
    CHECK(forwards == 4);
    CHECK(allreduces == 6);  // 3 forward, 3 backward: the logits slice and the input's grad are not reduced
  }
}

TEST_CASE("the tensor-parallel puzzle's recorded schedule is version 2, with its TP group, and replays op for op") {
  PuzzleResult r = run_puzzle(tp_puzzle(), false, true);
  REQUIRE(r.schedule);
  const std::string text = print_schedule(*r.schedule);
  CHECK(text.rfind("trainsim-schedule 2\n", 0) == 0);
  CHECK(has(text, "\ngroup 1 tp0 0 1 2 3\n"));
  CHECK(has(text, "forward L0 {0-3} : A0{0-3} W0<1/4> -> A1{0-3}<+1/4>"));
  CHECK(has(text, "all-reduce L0 group 1 : A1{0-3}<+1/4> -> A1{0-3}"));
  CHECK(has(text, "forward L3 {0-3} : A3{0-3} W3<2/4> -> A4{0-3}<2/4>"));
  Schedule s = parse_schedule(text, "tensor_parallel.sched");
  CHECK(tp_groups_by_rank(s.header) == std::vector<int>{1, 1, 1, 1});
  SimResult sim = simulate(s);
  CHECK(sim.error == "");
  CHECK(sim.trace.timesteps() == r.trace.timesteps());
  CHECK(sim.trace.peak().memory == r.trace.peak().memory);
}

TEST_CASE("reading a partial sum as complete is an error naming the learner's line and the all-reduce to add") {
  SUBCASE("forward") {
    line = 0;
    PuzzleResult r = run_program(tp_puzzle(), [](Model& model) -> Task {
      set_up(model);
      auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
      activations[1] = model.forward(0, activations[0], weights[0]);
      line = __LINE__ + 1;
      activations[2] = model.forward(1, activations[1], weights[1]);
      co_return;
    });
    CHECK_FALSE(r.correct);
    CHECK(r.error.rfind("rank 0: forward layer 1 at ", 0) == 0);
    CHECK(has(r.error, at(line) + ": its input A1{0-3}<+0/4> is a partial sum: this rank's term of the output of "
                       "layer 0 on its TP slice, not the activation; all-reduce it over the TP group before anything "
                       "reads it (activations[1] = co_await model.allreduce(activations[1], 0))"));
  }
  SUBCASE("backward") {
    line = 0;
    PuzzleResult r = run_program(tp_puzzle(), [](Model& model) -> Task {
      set_up(model);
      auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
      for (int l = 0; l < 4; ++l) {
        activations[l + 1] = model.forward(l, activations[l], weights[l]);
        if (l < 3) activations[l + 1] = co_await model.allreduce(activations[l + 1], l);
      }
      grad_activations[4] = model.loss(activations[4]);
      std::tie(grad_weights[3], grad_activations[3]) = model.backward(3, activations[3], grad_activations[4], weights[3]);
      line = __LINE__ + 1;
      std::tie(grad_weights[2], grad_activations[2]) = model.backward(2, activations[2], grad_activations[3], weights[2]);
    });
    // Whichever rank gets there first (the last to arrive at an all-reduce goes on first).
    CHECK(has(r.error, ": backward layer 2 at "));
    CHECK(has(r.error, at(line) + ": its input dA3{0-3}<+"));
    CHECK(has(r.error, "/4> is a partial sum: this rank's term of the input grad of layer 3 on its TP slice, not the "
                       "activation grad; all-reduce it over the TP group before anything reads it"));
    CHECK(has(r.error, "(grad_activations[3] = co_await model.allreduce(grad_activations[3], 3))"));
  }
}

TEST_CASE("the activation all-reduce takes only a partial sum, from the layer that made it") {
  SUBCASE("the logits' vocabulary slice") {
    line = 0;
    PuzzleResult r = run_program(tp_puzzle(), [](Model& model) -> Task {
      set_up(model);
      auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
      for (int l = 0; l < 4; ++l) {
        activations[l + 1] = model.forward(l, activations[l], weights[l]);
        line = __LINE__ + 1;
        activations[l + 1] = co_await model.allreduce(activations[l + 1], l);
      }
    });
    CHECK(has(r.error, ": allreduce layer 3 at "));
    CHECK(has(r.error, at(line) + ": A4{0-3}<"));
    CHECK(has(r.error, "/4> is this rank's vocabulary slice of the logits, not a partial sum: the loss reads it as it is"));
  }
  SUBCASE("a complete activation") {
    PuzzleResult r = run_program(tp_puzzle(), [](Model& model) -> Task {
      set_up(model);
      auto& activations = model.storage().activations;
      activations[0] = co_await model.allreduce(activations[0], 0);
    });
    CHECK(has(r.error, "A0{0-3} is complete already, not a partial sum"));
  }
  SUBCASE("the wrong layer") {
    PuzzleResult r = run_program(tp_puzzle(), [](Model& model) -> Task {
      set_up(model);
      auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
      activations[1] = model.forward(0, activations[0], weights[0]);
      activations[1] = co_await model.allreduce(activations[1], 1);
    });
    CHECK(has(r.error, "allreduce layer 1 at "));
    CHECK(has(r.error, "tests/test_puzzle_tensor_parallel.cpp:"));
    CHECK(has(r.error, "A1{0-3}<+0/4> is the output of layer 0, not of layer 1: pass layer 0"));
  }
  SUBCASE("a puzzle without tensor parallelism") {
    PuzzleResult r = run_program(*find_puzzle("ddp"), [](Model& model) -> Task {
      auto& activations = model.storage().activations;
      activations[0] = model.get_activation({model.rank()});
      activations[0] = co_await model.allreduce(activations[0], 0);
    });
    CHECK(has(r.error, "this puzzle has no tensor parallelism"));
  }
}

TEST_CASE("slices are different parameters: their grads do not all-reduce, and every slice must be updated") {
  SUBCASE("all-reducing the weight grads of different slices") {
    PuzzleResult r = run_program(tp_puzzle(), [](Model& model) -> Task {
      set_up(model);
      auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
      for (int l = 0; l < 4; ++l) {
        activations[l + 1] = model.forward(l, activations[l], weights[l]);
        if (l < 3) activations[l + 1] = co_await model.allreduce(activations[l + 1], l);
      }
      grad_activations[4] = model.loss(activations[4]);
      std::tie(grad_weights[3], grad_activations[3]) = model.backward(3, activations[3], grad_activations[4], weights[3]);
      grad_weights[3] = co_await model.allreduce(grad_weights[3], 3);
    });
    CHECK(has(r.error, "all-reduce layer 3 (collective #0 of group 0): rank 1 ("));
    CHECK(has(r.error, "tests/test_puzzle_tensor_parallel.cpp:"));
    CHECK(has(r.error, "different TP slices"));
  }
  SUBCASE("a slice never updated") {
    PuzzleResult r = run_program(tp_puzzle(), [](Model& model) -> Task {
      if (model.rank() != 2)
        for (int l = 0; l < 4; ++l)
          model.set_final_weight(l, Weight(tp_slice(weight_tensor(l, {0}, 1, 1), model.rank(), 4)));
      co_return;
    });
    CHECK(r.error == "check: no rank set a final weight for TP slice 2 of 4 of layer 0; every slice must be updated");
  }
  SUBCASE("whole weights and slices mixed") {
    PuzzleResult r = run_program(tp_puzzle(), [](Model& model) -> Task {
      for (int l = 0; l < 4; ++l)
        model.set_final_weight(l, model.rank() == 0 ? Weight(weight_tensor(l, {0}, 1, 1))
                                                    : Weight(tp_slice(weight_tensor(l, {0}, 1, 1), model.rank(), 4)));
      co_return;
    });
    CHECK(r.error == "check: layer 0 on rank 1: its final weight W0<1/4>@1 is split over 4 TP slices, another rank's over 1");
  }
}

TEST_CASE("load_slice: the puzzle's TP degree and a slice in range") {
  PuzzleResult wrong = run_program(tp_puzzle(), [](Model& model) -> Task {
    model.storage().weights[0] = model.load_slice(0, 0, 2).first;
    co_return;
  });
  CHECK(has(wrong.error, "load_slice layer 0 at "));
  CHECK(has(wrong.error, "tests/test_puzzle_tensor_parallel.cpp:"));
  CHECK(has(wrong.error, "slice 0 of 2: this puzzle's TP groups have 4 ranks"));
  PuzzleResult none = run_program(*find_puzzle("fsdp"), [](Model& model) -> Task {
    model.storage().weights[0] = model.load_slice(0, 0, 4).first;
    co_return;
  });
  CHECK(has(none.error, "this puzzle has no tensor parallelism (its TP degree is 1)"));
  // A slice holds a quarter of the weight's memory; a partial sum is a whole activation.
  static double noted[4][2];
  PuzzleResult mem = run_program(tp_puzzle(), [](Model& model) -> Task {
    auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    weights[0] = model.load_slice(0, model.tp_rank(), 4).first;
    noted[model.rank()][0] = model.memory();
    activations[0] = model.get_activation({0});
    activations[1] = model.forward(0, activations[0], weights[0]);
    noted[model.rank()][1] = model.memory();
    co_return;
  });
  CHECK(has(mem.error, "check: no rank set a final weight for layer 0"));  // it stops before any update
  const double w = 512.0 * 512, a = 512.0 * 256;
  for (int rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    CHECK(noted[rank][0] == w / 4);
    CHECK(noted[rank][1] == w / 4 + 2 * a);
  }
}

TEST_CASE("the original eight keep their numbers exactly beside the ninth") {
  struct Numbers {
    const char* name;
    double timesteps, makespan, peak;
  };
  // As `trainsim puzzles` printed them before the ninth puzzle was added.
  const Numbers eight[] = {{"basic", 16.5, 17, 2'097'152},   {"grad_accum", 16.5, 17, 1'966'080},
                           {"ddp", 5.1, 5.6, 1'572'864},     {"wsdp", 19.9, 20.4, 2'621'440},
                           {"fsdp", 19.9, 20.4, 1'966'080},  {"pipeline", 66.9, 67.4, 2'621'440},
                           {"gpipe", 33.3, 33.8, 2'883'584}, {"pipeline_fsdp", 15.5, 16, 704'512}};
  REQUIRE(catalog().size() == 10);
  for (std::size_t i = 0; i < 8; ++i) {
    const Puzzle& p = catalog()[i];
    CAPTURE(p.name);
    CHECK(p.name == eight[i].name);
    CHECK(p.tp == 1);
    PuzzleResult r = run_puzzle(p);
    CHECK(r.timesteps == seconds(eight[i].timesteps));
    CHECK(r.makespan == seconds(eight[i].makespan));
    CHECK(r.peak.memory == eight[i].peak);
  }
}
