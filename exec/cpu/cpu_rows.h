// Helpers of the CPU kernels (cpu_kernels.cpp, cpu_attention.cpp), not a public interface: the GEMMs
// (exec/cpu/cpu_gemm.h) and the causal softmax on rows, in fp32 through exec/cpu/simd.h and in fp64 as plain loops.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "exec/cpu/cpu_gemm.h"
#include "exec/cpu/simd.h"

namespace trainsim::exec::cpu_detail {

/// simd::Table::causal_softmax_rows for T (rows r of s, stride ld: query t0 + r against keys [0, width)).
template <typename T>
void causal_softmax_rows(T* s, long ld, int rows, int t0, int width, T scale) {
  if constexpr (std::is_same_v<T, float>) {
    simd::table().causal_softmax_rows(s, ld, rows, t0, width, scale);
  } else {
    for (int r = 0; r < rows; ++r) {
      T* row = s + r * ld;
      const int len = std::min(t0 + r + 1, width);
      T mx = row[0] * scale;
      for (int j = 1; j < len; ++j) mx = std::max(mx, row[j] * scale);
      T sum = 0;
      for (int j = 0; j < len; ++j) sum += row[j] = std::exp(row[j] * scale - mx);
      const T inv = T(1) / sum;
      for (int j = 0; j < len; ++j) row[j] *= inv;
      std::fill(row + len, row + width, T(0));
    }
  }
}

/// simd::Table::causal_softmax_backward_rows for T.
template <typename T>
void causal_softmax_backward_rows(const T* p, long ldp, T* dp, long ldd, int rows, int t0, int width, T scale) {
  if constexpr (std::is_same_v<T, float>) {
    simd::table().causal_softmax_backward_rows(p, ldp, dp, ldd, rows, t0, width, scale);
  } else {
    for (int r = 0; r < rows; ++r) {
      const T* pr = p + r * ldp;
      T* dr = dp + r * ldd;
      const int len = std::min(t0 + r + 1, width);
      T dot = 0;
      for (int j = 0; j < len; ++j) dot += pr[j] * dr[j];
      for (int j = 0; j < len; ++j) dr[j] = pr[j] * (dr[j] - dot) * scale;
      std::fill(dr + len, dr + width, T(0));
    }
  }
}

}  // namespace trainsim::exec::cpu_detail
