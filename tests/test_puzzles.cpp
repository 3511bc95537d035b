// The eight puzzles: reference solutions pass, exercises fail cleanly, broken programs are caught.
#include <doctest/doctest.h>

#include <tuple>

#include "puzzles/runner.h"

using namespace trainsim;
using namespace trainsim::puzzles;

namespace {
const Puzzle& puzzle(const char* name) {
  const Puzzle* p = find_puzzle(name);
  REQUIRE(p != nullptr);
  return *p;
}
// Programs note values here; CHECK runs outside the coroutine (g++ 12 rejects doctest macros inside one).
std::vector<double> noted;
}  // namespace

TEST_CASE("every reference solution is correct and within its targets") {
  REQUIRE(catalog().size() == 10);  // the original eight, then tensor and expert parallelism
  for (const Puzzle& p : catalog()) {
    CAPTURE(p.name);
    PuzzleResult r = run_puzzle(p);
    CHECK(r.error == "");
    CHECK(r.correct);
    CHECK(std::floor(to_seconds(r.timesteps)) <= p.target_time);
    CHECK(r.peak.memory <= p.target_memory);
    CHECK(r.passed());
    CHECK(r.trace.world_size == p.ranks);
    // Timesteps is the start of the last op, as the puzzles count it.
    Time last_start = 0;
    for (const auto& runs : r.trace.ranks)
      if (!runs.empty()) last_start = std::max(last_start, runs.back().start);
    CHECK(r.timesteps == last_start);
  }
}

TEST_CASE("every exercise fails cleanly until it is written") {
  for (const Puzzle& p : catalog()) {
    CAPTURE(p.name);
    PuzzleResult r = run_puzzle(p, /*exercise=*/true);
    CHECK_FALSE(r.correct);
    CHECK_FALSE(r.passed());
    CHECK(r.error.find("not implemented: write your solution between TODO and END TODO in " + p.exercise_file) !=
          std::string::npos);
  }
}

TEST_CASE("an update without every batch's gradient is refused") {
  PuzzleResult r = run_program(puzzle("basic"), [](Model& model) -> Task {
    auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    std::tie(weights[0], opt_states[0]) = model.load_weights(0);
    std::tie(weights[1], opt_states[1]) = model.load_weights(1);
    activations[0] = model.get_activation({0});
    activations[1] = model.forward(0, activations[0], weights[0]);
    activations[2] = model.forward(1, activations[1], weights[1]);
    grad_activations[2] = model.loss(activations[2]);
    std::tie(grad_weights[1], grad_activations[1]) = model.backward(1, activations[1], grad_activations[2], weights[1]);
    std::tie(weights[1], opt_states[1]) = model.update(1, grad_weights[1], weights[1], opt_states[1]);
    co_return;
  });
  CHECK_FALSE(r.correct);
  CHECK(r.error.find("rank 0: update layer 1 at tests/test_puzzles.cpp:") == 0);
  CHECK(r.error.find("the weight grad dW1{0} is missing batches {1-3}") != std::string::npos);
}

TEST_CASE("a forward with an incomplete weight is refused") {
  PuzzleResult r = run_program(puzzle("wsdp"), [](Model& model) -> Task {
    auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    std::tie(weights[0], opt_states[0]) = model.load_weights(0, model.rank(), model.ranks());
    activations[0] = model.get_activation({model.rank()});
    activations[1] = model.forward(0, activations[0], weights[0]);
    co_return;
  });
  CHECK_FALSE(r.correct);
  CHECK(r.error.find("forward layer 0") != std::string::npos);
  CHECK(r.error.find("the weight W0[0/4] is not complete (holds shards 0 of 4); all-gather it first") !=
        std::string::npos);
}

TEST_CASE("two ranks that both receive first are reported as a deadlock, not hung") {
  PuzzleResult r = run_program(puzzle("ddp"), [](Model& model) -> Task {
    auto& acts = model.storage().activations;
    acts[0] = model.get_activation({model.rank()});
    acts[1] = co_await model.receive();
    co_await model.pass_to((model.rank() + 1) % model.ranks(), acts[0]);
  });
  CHECK_FALSE(r.correct);
  CHECK(r.error.find("deadlock: no event is left at t=0 and ranks 0, 1, 2, 3 are blocked") == 0);
  CHECK(r.error.find("rank 2 at t=0: recv from any rank (tests/test_puzzles.cpp:") != std::string::npos);
  // Every rank waits to receive from any rank: no cycle is made up, the report says no rank can send.
  CHECK(r.error.find("no rank can send: every blocked rank waits to receive from any rank") != std::string::npos);
  CHECK(r.error.find("wait-for cycle") == std::string::npos);
}

TEST_CASE("a collective called by only some ranks is reported") {
  PuzzleResult r = run_program(puzzle("ddp"), [](Model& model) -> Task {
    auto& grads = model.storage().grad_weights;
    grads[0] = model.fake_grad(0, {model.rank()});
    if (model.rank() != 3) grads[0] = co_await model.allreduce(grads[0], 0);
  });
  CHECK_FALSE(r.correct);
  CHECK(r.error.find("rank 0 at t=0: all-reduce layer 0 (tests/test_puzzles.cpp:") != std::string::npos);
  CHECK(r.error.find("waiting for rank 3 (rank 3 finished without it)") != std::string::npos);
}

TEST_CASE("memory is what the five stores hold, before and after deletes") {
  noted.clear();
  PuzzleResult r = run_program(puzzle("basic"), [](Model& model) -> Task {
    auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    noted.push_back(model.memory());
    std::tie(weights[0], opt_states[0]) = model.load_weights(0);
    noted.push_back(model.memory());
    activations[0] = model.get_activation({0, 1});
    activations[{0, 1}] = activations[0];  // a second entry holding the same tensor counts twice
    noted.push_back(model.memory());
    activations.erase(0);
    noted.push_back(model.memory());
    weights[0] = model.load_weights(0, 1, 4).first;  // replacing an entry releases the old tensor
    noted.push_back(model.memory());
    co_return;
  });
  const double w = 512.0 * 512, a = 512.0 * 256;
  REQUIRE(noted.size() == 5);
  CHECK(noted[0] == 0);
  CHECK(noted[1] == 2 * w);
  CHECK(noted[2] == 2 * w + 2 * (2 * a));
  CHECK(noted[3] == 2 * w + 2 * a);
  CHECK(noted[4] == w / 4 + w + 2 * a);
}

// Source lines noted by the programs below (a Program is a plain function: no captures).
int del_line = 0, read_line = 0, line = 0;

TEST_CASE("deleting an empty entry or reading one is an error naming the store and key") {
  del_line = 0;
  PuzzleResult del = run_program(puzzle("basic"), [](Model& model) -> Task {
    del_line = __LINE__ + 1;
    model.storage().activations.erase({3, 1});
    co_return;
  });
  CHECK(del.error.find("rank 0: del activations[{3, 1}] at tests/test_puzzles.cpp:" + std::to_string(del_line) +
                       ": nothing is stored there") == 0);
  CHECK(del.error.find("delete each entry once, after its last use") != std::string::npos);
  read_line = 0;
  PuzzleResult read = run_program(puzzle("basic"), [](Model& model) -> Task {
    auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    std::tie(weights[0], opt_states[0]) = model.load_weights(0);
    read_line = __LINE__ + 1;
    activations[1] = model.forward(0, activations[0], weights[0]);
    co_return;
  });
  CHECK(read.error.find("rank 0: read activations[0] at tests/test_puzzles.cpp:" + std::to_string(read_line) +
                        ": it is empty: it was never set on this rank, or was deleted; store a tensor there first "
                        "(activations[0] = ...)") == 0);
}

TEST_CASE("deleting an entry twice names the line of the second delete") {
  line = 0;
  PuzzleResult r = run_program(puzzle("basic"), [](Model& model) -> Task {
    auto& activations = model.storage().activations;
    activations[{0, 1}] = model.get_activation({1});
    activations.erase({0, 1});
    line = __LINE__ + 1;
    activations.erase({0, 1});
    co_return;
  });
  CHECK(r.error.find("rank 0: del activations[{0, 1}] at tests/test_puzzles.cpp:" + std::to_string(line)) == 0);
}

TEST_CASE("adding a batch's weight grad twice names the rank, the op, the line and what to do") {
  line = 0;
  PuzzleResult r = run_program(puzzle("grad_accum"), [](Model& model) -> Task {
    auto& grad_weights = model.storage().grad_weights;
    grad_weights[0] = model.fake_grad(0, {0});
    grad_weights[{0, 1}] = model.fake_grad(0, {0, 1});
    line = __LINE__ + 1;
    grad_weights[0] = grad_weights[0] + grad_weights[{0, 1}];
    co_return;
  });
  CHECK_FALSE(r.correct);
  CHECK(r.error.find("rank 0: add weight grads (+) layer 0 at tests/test_puzzles.cpp:" + std::to_string(line) +
                     ": adding weight grads that both hold batches {0}") == 0);
  CHECK(r.error.find("each batch's grad is added once") != std::string::npos);
  // Disjoint batches add up, as before.
  PuzzleResult ok = run_program(puzzle("grad_accum"), [](Model& model) -> Task {
    auto& grad_weights = model.storage().grad_weights;
    grad_weights[0] = model.fake_grad(0, {0});
    grad_weights[{0, 1}] = model.fake_grad(0, {1});
    grad_weights[0] = grad_weights[0] + grad_weights[{0, 1}];
    if (grad_weights[0]->batches.str() != "0-1") throw std::logic_error("the sum lost a batch");
    co_return;
  });
  CHECK(ok.error.find("the sum lost a batch") == std::string::npos);
}

TEST_CASE("inputs must be held in a store (the puzzles allow no local variables)") {
  PuzzleResult r = run_program(puzzle("basic"), [](Model& model) -> Task {
    auto& weights = model.storage().weights;
    weights[0] = model.load_weights(0).first;
    Activation local = model.get_activation({0});
    model.forward(0, local, weights[0]);
    co_return;
  });
  CHECK(r.error.find("its input A0{0} (activation) is not held in any store") != std::string::npos);
}

TEST_CASE("a received tensor stored in the wrong store names the receive's line and the right store") {
  line = 0;
  PuzzleResult r = run_program(puzzle("ddp"), [](Model& model) -> Task {
    auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    if (model.rank() == 0) {
      activations[0] = model.get_activation({0});
      co_await model.pass_to(1, activations[0]);
    } else if (model.rank() == 1) {
      line = __LINE__ + 1;
      grad_activations[0] = co_await model.receive();
    }
  });
  CHECK(r.error == "rank 1: receive at tests/test_puzzles.cpp:" + std::to_string(line) +
                       ": the message from rank 0 is an activation (A0{0}), but it was stored in grad_activations; "
                       "store it in activations (activations[...] = co_await model.receive())");
}

TEST_CASE("the final check wants every layer updated exactly once, over all shards") {
  SUBCASE("a layer never updated") {
    PuzzleResult r = run_program(puzzle("basic"), [](Model& model) -> Task {
      model.set_final_weight(0, Weight(weight_tensor(0, {0}, 1, 1)));
      co_return;
    });
    CHECK(r.error == "check: no rank set a final weight for layer 1");
  }
  SUBCASE("a weight not updated") {
    PuzzleResult r = run_program(puzzle("basic"), [](Model& model) -> Task {
      auto& weights = model.storage().weights;
      for (int l = 0; l < 2; ++l) weights[l] = model.load_weights(l).first;
      for (int l = 0; l < 2; ++l) model.set_final_weight(l, weights[l]);
      co_return;
    });
    CHECK(r.error == "check: layer 0 on rank 0 was updated 0 times; every weight is updated exactly once");
  }
  SUBCASE("shards missing") {
    PuzzleResult r = run_program(puzzle("ddp"), [](Model& model) -> Task {
      if (model.rank() < 2)
        for (int l = 0; l < 2; ++l) model.set_final_weight(l, Weight(weight_tensor(l, {model.rank()}, 4, 1)));
      co_return;
    });
    CHECK(r.error == "check: the final weights of layer 0 hold shards 0-1 of 4 only; every shard must be updated");
  }
}

TEST_CASE("the same puzzle gives the same trace twice") {
  for (const char* name : {"gpipe", "pipeline_fsdp"}) {
    PuzzleResult a = run_puzzle(puzzle(name)), b = run_puzzle(puzzle(name));
    REQUIRE(a.trace.op_count() == b.trace.op_count());
    for (std::size_t r = 0; r < a.trace.ranks.size(); ++r)
      for (std::size_t i = 0; i < a.trace.ranks[r].size(); ++i) {
        CHECK(a.trace.ranks[r][i].start == b.trace.ranks[r][i].start);
        CHECK(a.trace.ranks[r][i].memory == b.trace.ranks[r][i].memory);
      }
  }
}
