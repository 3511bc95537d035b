// CpuKernels' sum of squares (the gradient norm): against a long double loop written here, within the worst-case
// bound of any order of n double additions, n · 2^-53 · Σ x² (Higham §3.1; each float's square is exact in double),
// on lengths that do and do not fill its 16 running sums; it adds to what the accumulator held.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "exec/cpu/cpu_kernels.h"
#include "random_inputs.h"

using namespace trainsim::exec;
using trainsim::testing::rnd;

TEST_CASE("exec cpu: sum_squares within the fp64 summation bound of a long double loop, added to the accumulator") {
  CpuKernels<float> k;
  for (long n : {0L, 1L, 15L, 16L, 17L, 1000L, 1000003L}) {
    INFO("n = " << n);
    const std::vector<float> x = rnd(n, 11);
    long double ref = 0;
    for (float v : x) ref += static_cast<long double>(v) * v;
    double got = 0;
    k.sum_squares(x.data(), n, &got);
    const double bound = (n + 2) * std::ldexp(1.0, -53) * static_cast<double>(ref);
    CHECK(std::abs(got - static_cast<double>(ref)) <= bound);
    double acc = 0.25;  // (the norm's parts are added into one accumulator)
    k.sum_squares(x.data(), n, &acc);
    CHECK(acc == 0.25 + got);
  }
}
