// exec/cpu/simd.h's kernels on AVX-512F+DQ: one __m512 per 16-lane vector. Compiled with -mavx512f -mavx512dq
// -mavx2 -mfma -ffp-contract=off (CMakeLists.txt); run only where simd::table() found the CPU has them. This file
// includes no standard header, so that no inline function of another translation unit is compiled here with
// AVX-512 instructions.
#if defined(__x86_64__)
#include <immintrin.h>
#include <sleef.h>

#include "exec/cpu/simd.h"

namespace trainsim::exec::simd {
namespace avx512 {
namespace {

struct V {
  __m512 v;
  static V load(const float* p) { return {_mm512_loadu_ps(p)}; }
  // n (1..16) lanes from p, the others `pad`.
  static V load_n(const float* p, int n, float pad) {
    return {_mm512_mask_loadu_ps(_mm512_set1_ps(pad), static_cast<__mmask16>((1u << n) - 1), p)};
  }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  void store_n(float* p, int n) const { _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v); }
  static V set1(float x) { return {_mm512_set1_ps(x)}; }
  friend V operator+(V a, V b) { return {_mm512_add_ps(a.v, b.v)}; }
  friend V operator-(V a, V b) { return {_mm512_sub_ps(a.v, b.v)}; }
  friend V operator*(V a, V b) { return {_mm512_mul_ps(a.v, b.v)}; }
  friend V operator/(V a, V b) { return {_mm512_div_ps(a.v, b.v)}; }
  friend V fma(V a, V b, V c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  friend V max(V a, V b) { return {_mm512_max_ps(a.v, b.v)}; }
  friend V exp(V a) { return {Sleef_finz_expf16_u10avx512f(a.v)}; }
  // The 16 lanes in double, e^x of each by SLEEF's deterministic fp64 exp, stored to out[0..16).
  friend void exp_double(V a, double* out) {
    _mm512_storeu_pd(out, Sleef_finz_expd8_u10avx512f(_mm512_cvtps_pd(_mm512_castps512_ps256(a.v))));
    _mm512_storeu_pd(out + 8, Sleef_finz_expd8_u10avx512f(_mm512_cvtps_pd(_mm512_extractf32x8_ps(a.v, 1))));
  }
  friend V sqrt(V a) { return {_mm512_sqrt_ps(a.v)}; }
  // lanes (0,1)(2,3)... swapped
  friend V swap_pairs(V a) { return {_mm512_permute_ps(a.v, 0xB1)}; }
  // Σ of the lanes in the fixed order of simd_kernels.inl (l[i] + l[i+8], then +4, +2, +1).
  float sum() const {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
  float hmax() const {
    __m256 s8 = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s4 = _mm_max_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_max_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_max_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
};

#include "exec/cpu/simd_kernels.inl"

}  // namespace
}  // namespace avx512

const Table& avx512_table() {
  static const Table t = avx512::make_table("avx512");
  return t;
}

}  // namespace trainsim::exec::simd
#else
#include "exec/cpu/simd.h"
namespace trainsim::exec::simd {
const Table& avx512_table() { return generic_table(); }  // never chosen off x86-64
}  // namespace trainsim::exec::simd
#endif
