// exec/cpu/simd.h's kernels in portable C++, for CPUs without AVX2 + FMA (and for A/B runs, TRAINSIM_SIMD=generic):
// 16 lanes as an array, the fused multiply-add as std::fma (correctly rounded: the same bits as the FMA
// instruction; a library call where the CPU has none) and exp as SLEEF's deterministic scalar expf without FMA
// (`cinz_`, pure C). SLEEF's FMA variant (`finz_`, which the vector paths use) is not callable here: it needs the
// FMA instruction. So this path gives the vector paths' bits in every kernel but those that take an exp (SwiGLU,
// softmax, cross-entropy), where an exp may differ from theirs in its last bit (both within 1 ulp).
#include <sleef.h>

#include <cmath>

#include "exec/cpu/simd.h"

namespace trainsim::exec::simd {
namespace generic {
namespace {

struct V {
  float l[16];
  static V load(const float* p) {
    V r;
    for (int i = 0; i < 16; ++i) r.l[i] = p[i];
    return r;
  }
  static V load_n(const float* p, int n, float pad) {
    V r;
    for (int i = 0; i < 16; ++i) r.l[i] = i < n ? p[i] : pad;
    return r;
  }
  void store(float* p) const {
    for (int i = 0; i < 16; ++i) p[i] = l[i];
  }
  void store_n(float* p, int n) const {
    for (int i = 0; i < n; ++i) p[i] = l[i];
  }
  static V set1(float x) {
    V r;
    for (float& e : r.l) e = x;
    return r;
  }
  template <typename F>
  static V map(const V& a, const V& b, F f) {
    V r;
    for (int i = 0; i < 16; ++i) r.l[i] = f(a.l[i], b.l[i]);
    return r;
  }
  friend V operator+(V a, V b) { return map(a, b, [](float x, float y) { return x + y; }); }
  friend V operator-(V a, V b) { return map(a, b, [](float x, float y) { return x - y; }); }
  friend V operator*(V a, V b) { return map(a, b, [](float x, float y) { return x * y; }); }
  friend V operator/(V a, V b) { return map(a, b, [](float x, float y) { return x / y; }); }
  // x86 max: the second operand when either is NaN or both are zeros (as _mm*_max_ps)
  friend V max(V a, V b) { return map(a, b, [](float x, float y) { return x > y ? x : y; }); }
  friend V fma(V a, V b, V c) {
    V r;
    for (int i = 0; i < 16; ++i) r.l[i] = std::fma(a.l[i], b.l[i], c.l[i]);
    return r;
  }
  friend V exp(V a) {
    V r;
    for (int i = 0; i < 16; ++i) r.l[i] = Sleef_cinz_expf1_u10purec(a.l[i]);
    return r;
  }
  // The 16 lanes in double, e^x of each by SLEEF's deterministic fp64 exp (without FMA), stored to out[0..16).
  friend void exp_double(V a, double* out) {
    for (int i = 0; i < 16; ++i) out[i] = Sleef_cinz_expd1_u10purec(static_cast<double>(a.l[i]));
  }
  friend V sqrt(V a) {
    V r;
    for (int i = 0; i < 16; ++i) r.l[i] = std::sqrt(a.l[i]);
    return r;
  }
  friend V swap_pairs(V a) {
    V r;
    for (int i = 0; i < 16; i += 2) r.l[i] = a.l[i + 1], r.l[i + 1] = a.l[i];
    return r;
  }
  template <typename F>
  float reduce(F f) const {
    float s[16];
    for (int i = 0; i < 16; ++i) s[i] = l[i];
    for (int w = 8; w >= 1; w /= 2)
      for (int i = 0; i < w; ++i) s[i] = f(s[i], s[i + w]);
    return s[0];
  }
  float sum() const { return reduce([](float x, float y) { return x + y; }); }
  float hmax() const { return reduce([](float x, float y) { return x > y ? x : y; }); }
};

#include "exec/cpu/simd_kernels.inl"

}  // namespace
}  // namespace generic

const Table& generic_table() {
  static const Table t = generic::make_table("generic");
  return t;
}

}  // namespace trainsim::exec::simd
