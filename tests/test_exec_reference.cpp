// The executor's reference trainer (exec/reference.h): its microbatches run on several threads at once and are
// summed in microbatch order, so any thread count gives the bits of one thread.
#include <doctest/doctest.h>

#include <cstring>

#include "exec/data.h"
#include "exec/reference.h"
#include "exec_helpers.h"

using namespace trainsim;
using namespace trainsim::testing;

TEST_CASE("exec reference: one thread and several give the same losses and weights, bit for bit") {
  exec::ModelConfig model = exec::preset("tiny");
  model.blocks = 2;
  exec::OptimizerConfig opt;
  exec::TokenData data({test_corpus()});
  // 5 microbatches: on 2 and 3 threads the last wave is partial
  exec::ReferenceTrainer one(model, opt, 3, 7, data, 5, true, 1), two(model, opt, 3, 7, data, 5, true, 2),
      three(model, opt, 3, 7, data, 5, true, 3);
  for (int step = 0; step < 3; ++step) {
    const double l1 = one.step(step), l2 = two.step(step), l3 = three.step(step);
    CHECK(std::memcmp(&l1, &l2, sizeof l1) == 0);
    CHECK(std::memcmp(&l1, &l3, sizeof l1) == 0);
  }
  const auto p1 = one.parameters(), p2 = two.parameters(), p3 = three.parameters();
  REQUIRE(p1.size() == p2.size());
  for (const auto& [name, w] : p1) {
    INFO(name);
    REQUIRE(p2.at(name).size() == w.size());
    CHECK(std::memcmp(p2.at(name).data(), w.data(), w.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(p3.at(name).data(), w.data(), w.size() * sizeof(float)) == 0);
  }
  // (and the weights moved: the comparison is of trained weights, not of the initialisation)
  exec::ReferenceTrainer fresh(model, opt, 3, 7, data, 5, true, 1);
  CHECK(std::memcmp(fresh.parameters().begin()->second.data(), p1.begin()->second.data(),
                    p1.begin()->second.size() * sizeof(float)) != 0);
}
