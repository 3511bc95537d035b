// Random kernel inputs for the kernel tests (tests/test_exec_simd.cpp, tests/gpu/test_cuda_kernels.cpp).
#pragma once

#include <cstddef>
#include <random>
#include <vector>

namespace trainsim::testing {

/// n floats drawn uniformly from [lo, hi) by a Mersenne twister seeded with `seed` (the same on every run).
inline std::vector<float> rnd(std::size_t n, unsigned seed, float lo = -1, float hi = 1) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

}  // namespace trainsim::testing
