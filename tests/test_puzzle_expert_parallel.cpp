// The tenth puzzle, expert parallelism (an addition to the original eight and tensor parallelism): its
// reference run, its recorded schedule, and the errors a learner meets (reading routed tokens, running the
// experts on the wrong tokens, a backward that skipped the experts, an expert slice never updated), each naming
// the line of the learner's code and what to add.
#include <doctest/doctest.h>

#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "puzzles/runner.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::puzzles;

namespace {
const Puzzle& ep_puzzle() {
  const Puzzle* p = find_puzzle("expert_parallel");
  REQUIRE(p != nullptr);
  return *p;
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
std::string at(int line) { return "tests/test_puzzle_expert_parallel.cpp:" + std::to_string(line); }

// Source lines noted by the programs below (a Program is a plain function: no captures).
int line = 0;

// This rank's batch, every layer's weight and this rank's expert slice of it (the exercise's set-up).
void set_up(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  activations[0] = model.get_activation({model.rank()});
  for (int l = 0; l < model.layers(); ++l) {
    std::tie(weights[l], opt_states[l]) = model.load_weights(l);
    std::tie(weights[{l, 1}], opt_states[{l, 1}]) = model.load_experts(l, model.ep_rank(), model.ep());
  }
}
}  // namespace

TEST_CASE("the expert-parallel puzzle: its reference run, numbers and targets") {
  const Puzzle& p = ep_puzzle();
  CHECK(p.title == "Puzzle 9 - Expert Parallelism");
  CHECK(p.ep == 4);
  CHECK(p.tp == 1);
  CHECK(&p == &catalog().back());
  CHECK(&p == &catalog()[9]);  // after the original eight and tensor parallelism, which keep their places
  PuzzleResult r = run_puzzle(p);
  CHECK(r.error == "");
  REQUIRE(r.passed());
  // Forward per layer: attention and router 1 step, dispatch 0.3, experts 1 (4 batches at 1/4), combine 0.3;
  // backward per layer the same plus the all-reduce of the layer's grad (0.3); 8 updates of 0.5, the last
  // starting at 4 x 2.6 + 4 x 2.9 + 7 x 0.5 = 25.5.
  CHECK(r.timesteps == seconds(25.5));
  CHECK(r.makespan == seconds(26));
  CHECK(p.target_time == std::floor(to_seconds(r.timesteps)));
  CHECK(p.target_memory == std::ceil(r.peak.memory / 100'000) * 100'000);
  for (int rank = 0; rank < p.ranks; ++rank) {
    int expert_forwards = 0, alltoalls = 0;
    for (const auto& run : r.trace.ranks[rank]) {
      if (run.op.kind == OpKind::Forward && run.op.reads[1].expert()) {
        ++expert_forwards;
        CHECK(run.op.reads[1].str() == fmt::format("W{}<e{}/4>", run.op.layer, rank));
        CHECK(run.op.batches == IdSet::range(0, 4));  // every rank's tokens for this slice
        CHECK(run.end - run.start == seconds(1));
      }
      if (run.op.kind == OpKind::AllToAll) {
        ++alltoalls;
        CHECK(run.op.group == 1);
      }
    }
    CHECK(expert_forwards == 4);
    CHECK(alltoalls == 16);  // dispatch and combine, forward and backward, in each of 4 layers
  }
}

TEST_CASE("the expert-parallel puzzle's recorded schedule is version 3, with its EP group, and replays op for op") {
  PuzzleResult r = run_puzzle(ep_puzzle(), false, true);
  REQUIRE(r.schedule);
  const std::string text = print_schedule(*r.schedule);
  CHECK(text.rfind("trainsim-schedule 3\n", 0) == 0);
  CHECK(has(text, "\ngroup 1 ep0 0 1 2 3\n"));
  CHECK(has(text, "forward L0 {1} -> A1{1}<routed>"));
  CHECK(has(text, "all-to-all L0 group 1 : A1{1}<routed> -> A1{0-3}<e1/4>"));
  CHECK(has(text, "forward L0 {0-3} : A1{0-3}<e1/4> W0<e1/4> -> A1{0-3}<e1/4:out>"));
  CHECK(has(text, "all-to-all L0 group 1 : A1{0-3}<e1/4:out> -> A1{1}"));
  Schedule s = parse_schedule(text, "expert_parallel.sched");
  CHECK(print_schedule(s) == text);
  SimResult sim = simulate(s);
  CHECK(sim.error == "");
  CHECK(sim.trace.timesteps() == r.trace.timesteps());
  CHECK(sim.trace.peak().memory == r.trace.peak().memory);
  // The stream engine accepts it too (unit costs).
  s.header.cost_model = "unit";
  SimResult streams = simulate(s);
  CHECK(streams.error == "");
}

TEST_CASE("expert parallelism's learner errors name the line and what to add") {
  SUBCASE("reading routed tokens: the dispatch, experts and combine are missing") {
    line = 0;
    PuzzleResult r = run_program(ep_puzzle(), [](Model& model) -> Task {
      set_up(model);
      auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
      activations[1] = model.forward(0, activations[0], weights[0]);
      line = __LINE__ + 1;
      activations[2] = model.forward(1, activations[1], weights[1]);
      co_return;
    });
    CHECK_FALSE(r.correct);
    CHECK(r.error.rfind("rank 0: forward layer 1 at ", 0) == 0);
    CHECK(has(r.error, at(line) + ": its input A1{0}<routed> holds this rank's tokens routed to layer 0's experts, "
                       "which have not run: dispatch them to the experts' ranks (activations[{1, 1}] = co_await "
                       "model.alltoall(activations[1], 0))"));
    CHECK(has(r.error, "model.forward(0, activations[{1, 1}], weights[{0, 1}])"));
  }
  SUBCASE("the experts run on tokens that were not dispatched") {
    line = 0;
    PuzzleResult r = run_program(ep_puzzle(), [](Model& model) -> Task {
      set_up(model);
      auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
      activations[1] = model.forward(0, activations[0], weights[0]);
      line = __LINE__ + 1;
      activations[{1, 2}] = model.forward(0, activations[1], weights[{0, 1}]);
      co_return;
    });
    CHECK(has(r.error, at(line) + ": the experts W0<e0/4> run on the tokens a dispatch gives this rank"));
  }
  SUBCASE("the layer's backward reads a grad that skipped the experts") {
    line = 0;
    PuzzleResult r = run_program(ep_puzzle(), [](Model& model) -> Task {
      set_up(model);
      auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
      for (int l = 0; l < 4; ++l) {
        activations[l + 1] = model.forward(l, activations[l], weights[l]);
        activations[{l + 1, 1}] = co_await model.alltoall(activations[l + 1], l);
        activations[{l + 1, 2}] = model.forward(l, activations[{l + 1, 1}], weights[{l, 1}]);
        activations[l + 1] = co_await model.alltoall(activations[{l + 1, 2}], l);
      }
      grad_activations[4] = model.loss(activations[4]);
      line = __LINE__ + 1;
      std::tie(grad_weights[3], grad_activations[3]) = model.backward(3, activations[3], grad_activations[4], weights[3]);
    });
    CHECK(has(r.error, at(line) + ": the grad dA4{"));
    CHECK(has(r.error, "has not been through layer 3's experts: dispatch it (grad_activations[{4, 1}] = co_await "
                       "model.alltoall(grad_activations[4], 3))"));
  }
  SUBCASE("the all-to-all of the wrong layer") {
    line = 0;
    PuzzleResult r = run_program(ep_puzzle(), [](Model& model) -> Task {
      set_up(model);
      auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
      activations[1] = model.forward(0, activations[0], weights[0]);
      line = __LINE__ + 1;
      activations[{1, 1}] = co_await model.alltoall(activations[1], 1);
    });
    CHECK(has(r.error, at(line) + ": A1{0}<routed> is the tokens of layer 0's output, not of layer 1's: pass layer 0"));
  }
}

TEST_CASE("every expert slice must be updated once: a run that forgets one fails the final check") {
  PuzzleResult r = run_program(ep_puzzle(), [](Model& model) -> Task {
    co_await reference::expert_parallel(model);
  });
  CHECK(r.passed());
  // The reference, but rank 2 records its experts of layer 1 as they were loaded (never updated).
  PuzzleResult forgot = run_program(ep_puzzle(), [](Model& model) -> Task {
    co_await reference::expert_parallel(model);
    if (model.rank() == 2) model.set_final_experts(1, Weight(expert_slice(weight_tensor(1), 2, 4)));
  });
  CHECK_FALSE(forgot.correct);
  CHECK(has(forgot.error, "check: the experts of layer 1 on rank 2 (W1<e2/4>) were updated 0 times; every expert "
                          "slice is updated exactly once"));
}
