#include <doctest/doctest.h>

#include "puzzles/runner.h"

TEST_CASE("reference solutions run") {
  for (const auto& p : trainsim::puzzles::catalog()) {
    auto r = trainsim::puzzles::run_puzzle(p);
    MESSAGE(p.name << " " << r.error << " t=" << trainsim::to_seconds(r.timesteps) << " mem=" << r.peak.memory);
  }
}
