// libFuzzer target: the per-expert load file (gen and plan --expert-load-file; schedules/generators.h). Parsing
// may throw std::invalid_argument (a bad file); nothing else may escape, and what it accepts holds its contract:
// 1 to 65,536 loads, each finite and in [0, 1e15], not all 0, whose slices (one, and one per expert) average 1.
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "fuzz/common.h"
#include "schedules/generators.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<double> loads;
  try {
    loads = trainsim::parse_expert_loads(trainsim::fuzz::text_of(data, size), "fuzz.txt");
  } catch (const std::invalid_argument&) {
    return 0;
  }
  double total = 0;
  for (double v : loads) {
    if (!std::isfinite(v) || v < 0 || v > 1e15) std::abort();
    total += v;
  }
  if (loads.empty() || loads.size() > 65536 || !(total > 0)) std::abort();
  if (trainsim::slice_loads(loads, 1) != std::vector<double>{1.0}) std::abort();
  try {  // (one slice per expert: refused only for an expert of load 0)
    double sum = 0;
    for (double v : trainsim::slice_loads(loads, static_cast<int>(loads.size()))) sum += v;
    if (std::abs(sum / static_cast<double>(loads.size()) - 1) > 1e-9) std::abort();
  } catch (const std::invalid_argument&) {
    bool zero = false;
    for (double v : loads) zero = zero || v == 0;
    if (!zero) std::abort();
  }
  return 0;
}
