// Shared set-up of the executor tests: the tiny model sized to a schedule, and a replay of it on the test
// corpus (tests/data/corpus.txt) with the comparison against single-device training.
#pragma once

#include <string>

#include "exec/training.h"

namespace trainsim::testing {

inline std::string test_corpus() { return std::string(TRAINSIM_SOURCE_DIR) + "/tests/data/corpus.txt"; }

/// Options for a short replay of `s` with the tiny model (one block per schedule layer) on the test corpus.
inline exec::ReplayOptions tiny_options(const Schedule& s, int steps = 3) {
  exec::ReplayOptions o;
  o.model = exec::preset("tiny");
  o.model.blocks = s.header.layers;
  o.steps = steps;
  o.data_files = {test_corpus()};
  o.timeout_seconds = 60;
  return o;
}

}  // namespace trainsim::testing
