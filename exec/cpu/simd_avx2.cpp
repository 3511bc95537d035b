// exec/cpu/simd.h's kernels on AVX2 + FMA: a 16-lane vector is two __m256 (lanes 0-7 and 8-15), so that sums
// and tails are the same as on the AVX-512 path. Compiled with -mavx2 -mfma -ffp-contract=off (CMakeLists.txt);
// run only where simd::table() found the CPU has them. No standard header here (see simd_avx512.cpp).
#if defined(__x86_64__)
#include <immintrin.h>
#include <sleef.h>

#include "exec/cpu/simd.h"

namespace trainsim::exec::simd {
namespace avx2 {
namespace {

__m256i lane_mask(int n) {  // lanes below n all ones (n may be <= 0 or >= 8)
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

struct V {
  __m256 lo, hi;
  static V load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static V load_n(const float* p, int n, float pad) {
    __m256i m0 = lane_mask(n), m1 = lane_mask(n - 8);
    __m256 fill = _mm256_set1_ps(pad);
    return {_mm256_blendv_ps(fill, _mm256_maskload_ps(p, m0), _mm256_castsi256_ps(m0)),
            _mm256_blendv_ps(fill, _mm256_maskload_ps(p + 8, m1), _mm256_castsi256_ps(m1))};
  }
  void store(float* p) const { _mm256_storeu_ps(p, lo), _mm256_storeu_ps(p + 8, hi); }
  void store_n(float* p, int n) const { _mm256_maskstore_ps(p, lane_mask(n), lo), _mm256_maskstore_ps(p + 8, lane_mask(n - 8), hi); }
  static V set1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
  friend V operator+(V a, V b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
  friend V operator-(V a, V b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
  friend V operator*(V a, V b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  friend V operator/(V a, V b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
  friend V fma(V a, V b, V c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
  friend V max(V a, V b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
  friend V exp(V a) { return {Sleef_finz_expf8_u10avx2(a.lo), Sleef_finz_expf8_u10avx2(a.hi)}; }
  // The 16 lanes in double, e^x of each by SLEEF's deterministic fp64 exp, stored to out[0..16).
  friend void exp_double(V a, double* out) {
    _mm256_storeu_pd(out, Sleef_finz_expd4_u10avx2(_mm256_cvtps_pd(_mm256_castps256_ps128(a.lo))));
    _mm256_storeu_pd(out + 4, Sleef_finz_expd4_u10avx2(_mm256_cvtps_pd(_mm256_extractf128_ps(a.lo, 1))));
    _mm256_storeu_pd(out + 8, Sleef_finz_expd4_u10avx2(_mm256_cvtps_pd(_mm256_castps256_ps128(a.hi))));
    _mm256_storeu_pd(out + 12, Sleef_finz_expd4_u10avx2(_mm256_cvtps_pd(_mm256_extractf128_ps(a.hi, 1))));
  }
  friend V sqrt(V a) { return {_mm256_sqrt_ps(a.lo), _mm256_sqrt_ps(a.hi)}; }
  friend V swap_pairs(V a) { return {_mm256_permute_ps(a.lo, 0xB1), _mm256_permute_ps(a.hi, 0xB1)}; }
  float sum() const {
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
  float hmax() const {
    __m256 s8 = _mm256_max_ps(lo, hi);
    __m128 s4 = _mm_max_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_max_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_max_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
};

#include "exec/cpu/simd_kernels.inl"

}  // namespace
}  // namespace avx2

const Table& avx2_table() {
  static const Table t = avx2::make_table("avx2");
  return t;
}

}  // namespace trainsim::exec::simd
#else
#include "exec/cpu/simd.h"
namespace trainsim::exec::simd {
const Table& avx2_table() { return generic_table(); }  // never chosen off x86-64
}  // namespace trainsim::exec::simd
#endif
