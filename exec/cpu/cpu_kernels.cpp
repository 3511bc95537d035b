#include "exec/cpu/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "exec/cpu/cpu_rows.h"
#include "exec/cpu/simd.h"

namespace trainsim::exec {

template <typename T>
CpuKernels<T>::CpuKernels() {
  if constexpr (std::is_same_v<T, float>) cpu_detail::gemm_library();  // an unknown TRAINSIM_GEMM fails here, early
}

using cpu_detail::blas_gemm;

// fp32 runs the vectorised kernels (exec/cpu/simd.h), fp64 the loops below.
template <typename T>
constexpr bool kSimd = std::is_same_v<T, float>;

template <typename T>
void CpuKernels<T>::gemm(bool ta, bool tb, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
                         T beta, T* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // BLAS leaves C untouched for K = 0 only when beta = 1; make it explicit
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) C[static_cast<long>(i) * ldc + j] = beta == T(0) ? T(0) : beta * C[static_cast<long>(i) * ldc + j];
    return;
  }
  blas_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <typename T>
void CpuKernels<T>::gemm_batched(bool ta, bool tb, int M, int N, int K, T alpha, const T* A, int lda, long sa,
                                 const T* B, int ldb, long sb, T beta, T* C, int ldc, long sc, int batch) {
  for (int i = 0; i < batch; ++i) gemm(ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
}

template <typename T>
void CpuKernels<T>::embedding_forward(const int* tokens, const T* table, T* out, long n, int d) {
  for (long i = 0; i < n; ++i) std::memcpy(out + i * d, table + static_cast<long>(tokens[i]) * d, sizeof(T) * d);
}

template <typename T>
void CpuKernels<T>::embedding_backward(const int* tokens, const T* dout, T* dtable, long n, int d) {
  for (long i = 0; i < n; ++i) {
    T* row = dtable + static_cast<long>(tokens[i]) * d;
    const T* g = dout + i * d;
    for (int j = 0; j < d; ++j) row[j] += g[j];
  }
}

template <typename T>
void CpuKernels<T>::rmsnorm_forward(const T* x, const T* g, T* y, T* rstd, long n, int d, T eps) {
  if constexpr (kSimd<T>) return simd::table().rmsnorm_forward(x, g, y, rstd, n, d, eps);
  for (long i = 0; i < n; ++i) {
    const T* xi = x + i * d;
    T ss = 0;
    for (int j = 0; j < d; ++j) ss += xi[j] * xi[j];
    T r = T(1) / std::sqrt(ss / T(d) + eps);
    rstd[i] = r;
    T* yi = y + i * d;
    for (int j = 0; j < d; ++j) yi[j] = xi[j] * r * g[j];
  }
}

template <typename T>
void CpuKernels<T>::rmsnorm_backward_input(const T* dy, const T* x, const T* g, const T* rstd, T* dx, long n, int d) {
  rmsnorm_backward_input_onto(dy, x, g, rstd, dx, dx, n, d);
}

template <typename T>
void CpuKernels<T>::rmsnorm_backward_input_onto(const T* dy, const T* x, const T* g, const T* rstd, const T* res, T* dx,
                                                long n, int d) {
  if constexpr (kSimd<T>) return simd::table().rmsnorm_backward_input(dy, x, g, rstd, res, dx, n, d);
  for (long i = 0; i < n; ++i) {
    const T *dyi = dy + i * d, *xi = x + i * d;
    T r = rstd[i];
    T dot = 0;  // Σ (g∘dy) ∘ x̂
    for (int j = 0; j < d; ++j) dot += g[j] * dyi[j] * xi[j] * r;
    dot /= T(d);
    const T* resi = res + i * d;
    T* dxi = dx + i * d;
    for (int j = 0; j < d; ++j) dxi[j] = resi[j] + r * (g[j] * dyi[j] - xi[j] * r * dot);
  }
}

template <typename T>
void CpuKernels<T>::rmsnorm_backward(const T* dy, const T* x, const T* g, const T* rstd, const T* res, T* dx, T* dg,
                                     long n, int d) {
  if constexpr (kSimd<T>) return simd::table().rmsnorm_backward(dy, x, g, rstd, res, dx, dg, n, d);
  Kernels<T>::rmsnorm_backward(dy, x, g, rstd, res, dx, dg, n, d);
}

template <typename T>
void CpuKernels<T>::rmsnorm_backward_weight(const T* dy, const T* x, const T* rstd, T* dg, long n, int d) {
  if constexpr (kSimd<T>) return simd::table().rmsnorm_backward_weight(dy, x, rstd, dg, n, d);
  std::fill(dg, dg + d, T(0));
  for (long i = 0; i < n; ++i) {
    const T *dyi = dy + i * d, *xi = x + i * d;
    T r = rstd[i];
    for (int j = 0; j < d; ++j) dg[j] += dyi[j] * xi[j] * r;
  }
}

template <typename T>
void CpuKernels<T>::split_heads_rope(const T* qkv, T* q, T* k, T* v, int B, int Tn, int H, int hd, const T* cos,
                                     const T* sin) {
  if constexpr (kSimd<T>) {
    std::vector<float> C(static_cast<std::size_t>(Tn) * hd), S(C.size());
    simd::rope_lanes(cos, sin, Tn, hd, 1.0f, C.data(), S.data());
    return simd::table().split_heads_rope(qkv, q, k, v, B, Tn, H, hd, C.data(), S.data());
  }
  const long d = static_cast<long>(H) * hd;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      const T* row = qkv + (static_cast<long>(b) * Tn + t) * 3 * d;
      for (int h = 0; h < H; ++h) {
        long o = ((static_cast<long>(b) * H + h) * Tn + t) * hd;
        for (int i = 0; i < hd; i += 2) {
          T c = cos[static_cast<long>(t) * (hd / 2) + i / 2], s = sin[static_cast<long>(t) * (hd / 2) + i / 2];
          T qa = row[h * hd + i], qb = row[h * hd + i + 1];
          rope_rotate(qa, qb, c, s, T(1));
          q[o + i] = qa, q[o + i + 1] = qb;
          T ka = row[d + h * hd + i], kb = row[d + h * hd + i + 1];
          rope_rotate(ka, kb, c, s, T(1));
          k[o + i] = ka, k[o + i + 1] = kb;
          v[o + i] = row[2 * d + h * hd + i], v[o + i + 1] = row[2 * d + h * hd + i + 1];
        }
      }
    }
}

template <typename T>
void CpuKernels<T>::merge_heads_rope_backward(const T* dq, const T* dk, const T* dv, T* dqkv, int B, int Tn, int H,
                                              int hd, const T* cos, const T* sin) {
  if constexpr (kSimd<T>) {
    std::vector<float> C(static_cast<std::size_t>(Tn) * hd), S(C.size());
    simd::rope_lanes(cos, sin, Tn, hd, -1.0f, C.data(), S.data());
    return simd::table().merge_heads_rope_backward(dq, dk, dv, dqkv, B, Tn, H, hd, C.data(), S.data());
  }
  const long d = static_cast<long>(H) * hd;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      T* row = dqkv + (static_cast<long>(b) * Tn + t) * 3 * d;
      for (int h = 0; h < H; ++h) {
        long o = ((static_cast<long>(b) * H + h) * Tn + t) * hd;
        for (int i = 0; i < hd; i += 2) {
          T c = cos[static_cast<long>(t) * (hd / 2) + i / 2], s = sin[static_cast<long>(t) * (hd / 2) + i / 2];
          T qa = dq[o + i], qb = dq[o + i + 1];
          rope_rotate(qa, qb, c, s, T(-1));
          row[h * hd + i] = qa, row[h * hd + i + 1] = qb;
          T ka = dk[o + i], kb = dk[o + i + 1];
          rope_rotate(ka, kb, c, s, T(-1));
          row[d + h * hd + i] = ka, row[d + h * hd + i + 1] = kb;
          row[2 * d + h * hd + i] = dv[o + i], row[2 * d + h * hd + i + 1] = dv[o + i + 1];
        }
      }
    }
}

template <typename T>
void CpuKernels<T>::merge_heads(const T* o, T* out, int B, int Tn, int H, int hd) {
  const long d = static_cast<long>(H) * hd;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < Tn; ++t)
        std::memcpy(out + (static_cast<long>(b) * Tn + t) * d + h * hd, o + ((static_cast<long>(b) * H + h) * Tn + t) * hd,
                    sizeof(T) * hd);
}

template <typename T>
void CpuKernels<T>::split_heads(const T* x, T* o, int B, int Tn, int H, int hd) {
  const long d = static_cast<long>(H) * hd;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < Tn; ++t)
        std::memcpy(o + ((static_cast<long>(b) * H + h) * Tn + t) * hd, x + (static_cast<long>(b) * Tn + t) * d + h * hd,
                    sizeof(T) * hd);
}

template <typename T>
void CpuKernels<T>::causal_softmax_forward(T* s, int count, int Tn, T scale) {
  const long tt = static_cast<long>(Tn) * Tn;
  for (long m = 0; m < count; ++m) cpu_detail::causal_softmax_rows(s + m * tt, Tn, Tn, 0, Tn, scale);
}

template <typename T>
void CpuKernels<T>::causal_softmax_backward(const T* p, T* dp, int count, int Tn, T scale) {
  const long tt = static_cast<long>(Tn) * Tn;
  for (long m = 0; m < count; ++m) cpu_detail::causal_softmax_backward_rows(p + m * tt, Tn, dp + m * tt, Tn, Tn, 0, Tn, scale);
}

template <typename T>
void CpuKernels<T>::swiglu_forward(const T* gu, T* h, long n, int f) {
  if constexpr (kSimd<T>) return simd::table().swiglu_forward(gu, h, n, f);
  for (long i = 0; i < n; ++i) {
    const T* a = gu + i * 2 * f;
    const T* b = a + f;
    T* hi = h + i * f;
    for (int j = 0; j < f; ++j) hi[j] = silu(a[j]) * b[j];
  }
}

template <typename T>
void CpuKernels<T>::swiglu_backward(const T* gu, const T* dh, T* dgu, long n, int f) {
  if constexpr (kSimd<T>) return simd::table().swiglu_backward(gu, dh, dgu, n, f);
  for (long i = 0; i < n; ++i) {
    const T* a = gu + i * 2 * f;
    const T* b = a + f;
    const T* g = dh + i * f;
    T* da = dgu + i * 2 * f;
    T* db = da + f;
    for (int j = 0; j < f; ++j) {
      T aj = a[j], bj = b[j], gj = g[j];
      da[j] = gj * bj * silu_grad(aj);
      db[j] = gj * silu(aj);
    }
  }
}

template <typename T>
void CpuKernels<T>::add(const T* a, const T* b, T* out, long n) {
  if constexpr (kSimd<T>) return simd::table().add(a, b, out, n);
  for (long i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void CpuKernels<T>::copy(const T* src, T* dst, long n) {
  if (src != dst) std::memmove(dst, src, sizeof(T) * n);
}

template <typename T>
void CpuKernels<T>::fill(T* x, T value, long n) {
  std::fill(x, x + n, value);
}

template <typename T>
void CpuKernels<T>::cross_entropy(const T* logits, const int* targets, T* dlogits, double* loss_sums, long n, int V,
                                  long rows_per_segment, T scale) {
  if constexpr (kSimd<T>) {
    std::vector<double> e((static_cast<std::size_t>(V) + 15) / 16 * 16);  // (rounded up: the last chunk's lanes)
    return simd::table().cross_entropy(logits, targets, dlogits, loss_sums, e.data(), n, V, rows_per_segment, scale);
  }
  std::vector<double> e(static_cast<std::size_t>(V));  // one row's exponentials, each computed once
  for (long i = 0; i < n; ++i) {
    const T* row = logits + i * V;
    T* drow = dlogits + i * V;
    T mx = row[0];
    for (int j = 1; j < V; ++j) mx = std::max(mx, row[j]);
    double sum = 0;
    for (int j = 0; j < V; ++j) sum += e[j] = std::exp(static_cast<double>(row[j] - mx));
    const int y = targets[i];
    double loss = std::log(sum) - static_cast<double>(row[y] - mx);
    loss_sums[i / rows_per_segment] += loss;
    const double inv = 1.0 / sum;
    for (int j = 0; j < V; ++j) {
      double p = e[j] * inv;
      drow[j] = static_cast<T>((p - (j == y ? 1.0 : 0.0)) * static_cast<double>(scale));
    }
  }
}

template <typename T>
void CpuKernels<T>::sum_squares(const T* x, long n, double* acc) {
  // 16 running sums, element i into sum i mod 16, then added pairwise in a fixed order: independent additions the
  // compiler may run in vector lanes, where one running sum waited on each addition's latency (3.5 M elements of
  // `small`'s gradient: about 10 ms a step). The order is written here, so the bits do not depend on the compiler's
  // choice (a float's square is exact in double).
  constexpr int L = 16;
  double part[L] = {};
  long i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) part[l] += static_cast<double>(x[i + l]) * static_cast<double>(x[i + l]);
  for (int l = 0; i < n; ++i, ++l) part[l] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  for (int width = L / 2; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) part[l] += part[l + width];
  *acc += part[0];
}

template <typename T>
void CpuKernels<T>::adamw(const T* w, const T* g, const T* m, const T* v, T* w_out, T* m_out, T* v_out, long n,
                          const AdamWStep& step, const double* grad_norm_sq, float max_norm) {
  float coef = 1.0f;
  if (grad_norm_sq) coef = static_cast<float>(std::min(1.0, max_norm / (std::sqrt(*grad_norm_sq) + 1e-6)));
  if constexpr (kSimd<T>) {
    // adamw_element's scalars, by its own expressions (exec/math.h)
    const simd::AdamW s{coef,
                        1.0f - step.lr * step.weight_decay,
                        step.beta1,
                        1.0f - step.beta1,
                        step.beta2,
                        1.0f - step.beta2,
                        step.bias_correction2_sqrt,
                        step.eps,
                        step.lr / step.bias_correction1};
    return simd::table().adamw(w, g, m, v, w_out, m_out, v_out, n, s);
  }
  for (long i = 0; i < n; ++i) {
    float wi = static_cast<float>(w[i]), mi = static_cast<float>(m[i]), vi = static_cast<float>(v[i]);
    adamw_element(wi, mi, vi, static_cast<float>(g[i]) * coef, step);
    w_out[i] = static_cast<T>(wi), m_out[i] = static_cast<T>(mi), v_out[i] = static_cast<T>(vi);
  }
}

template <typename T>
void CpuKernels<T>::embedding_forward_range(const int* tokens, const T* table, T* out, long n, int d, int lo, int rows) {
  for (long i = 0; i < n; ++i) {
    const long r = static_cast<long>(tokens[i]) - lo;
    if (r >= 0 && r < rows) std::memcpy(out + i * d, table + r * d, sizeof(T) * d);
    else std::fill(out + i * d, out + (i + 1) * d, T(0));
  }
}

template <typename T>
void CpuKernels<T>::embedding_backward_range(const int* tokens, const T* dout, T* dtable, long n, int d, int lo,
                                             int rows) {
  for (long i = 0; i < n; ++i) {
    const long r = static_cast<long>(tokens[i]) - lo;
    if (r < 0 || r >= rows) continue;
    T* row = dtable + r * d;
    const T* g = dout + i * d;
    for (int j = 0; j < d; ++j) row[j] += g[j];
  }
}

template <typename T>
void CpuKernels<T>::row_max(const T* x, T* out, long n, int V) {
  for (long i = 0; i < n; ++i) out[i] = *std::max_element(x + i * V, x + (i + 1) * V);
}

namespace {

template <typename T>
T max_over(const T* maxes, int k, long n, long i) {
  T m = maxes[i];
  for (int q = 1; q < k; ++q) m = std::max(m, maxes[q * n + i]);
  return m;
}

}  // namespace

template <typename T>
void CpuKernels<T>::vocab_parallel_ce_stats(const T* logits, const int* targets, const T* maxes, int k, double* stats,
                                            long n, int V, int lo) {
  for (long i = 0; i < n; ++i) {
    const T* row = logits + i * V;
    const T mx = max_over(maxes, k, n, i);
    double sum = 0;
    for (int j = 0; j < V; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
    const long y = static_cast<long>(targets[i]) - lo;
    stats[2 * i] = sum;
    stats[2 * i + 1] = y >= 0 && y < V ? static_cast<double>(row[y] - mx) : 0.0;
  }
}

template <typename T>
void CpuKernels<T>::vocab_parallel_ce_finish(const T* logits, const int* targets, const T* maxes, int k,
                                             const double* stats, T* dlogits, double* loss_sums, long n, int V, int lo,
                                             long rows_per_segment, T scale) {
  for (long i = 0; i < n; ++i) {
    const T* row = logits + i * V;
    T* drow = dlogits + i * V;
    const T mx = max_over(maxes, k, n, i);
    const double sum = stats[2 * i];
    loss_sums[i / rows_per_segment] += std::log(sum) - stats[2 * i + 1];
    const long y = static_cast<long>(targets[i]) - lo;
    const double inv = 1.0 / sum;
    for (int j = 0; j < V; ++j) {
      double p = std::exp(static_cast<double>(row[j] - mx)) * inv;
      drow[j] = static_cast<T>((p - (j == y ? 1.0 : 0.0)) * static_cast<double>(scale));
    }
  }
}

// ---- Mixture of Experts ----

template <typename T>
void CpuKernels<T>::moe_topk(const T* logits, int* idx, T* gates, long n, int E, int k) {
  std::vector<int> order(E);
  for (long t = 0; t < n; ++t) {
    const T* z = logits + t * E;
    for (int e = 0; e < E; ++e) order[e] = e;
    // largest first; equal logits: the lower expert first (deterministic)
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [z](int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
    const T top = z[order[0]];
    T sum = 0;
    for (int s = 0; s < k; ++s) {
      idx[t * k + s] = order[s];
      gates[t * k + s] = std::exp(z[order[s]] - top);
      sum += gates[t * k + s];
    }
    for (int s = 0; s < k; ++s) gates[t * k + s] /= sum;
  }
}

template <typename T>
void CpuKernels<T>::moe_topk_backward(const int* idx, const T* gates, const T* dgates, T* dlogits, long n, int E, int k) {
  std::fill(dlogits, dlogits + n * E, T(0));
  for (long t = 0; t < n; ++t) {
    const T* g = gates + t * k;
    const T* dg = dgates + t * k;
    T dot = 0;
    for (int s = 0; s < k; ++s) dot += g[s] * dg[s];
    for (int s = 0; s < k; ++s) dlogits[t * E + idx[t * k + s]] = g[s] * (dg[s] - dot);
  }
}

template <typename T>
void CpuKernels<T>::moe_aux_loss(const T* logits, const T* coeffs, T* dlogits, double* loss_sum, long n, int E,
                                 long rows_per_segment, T scale) {
  if (rows_per_segment <= 0) throw std::invalid_argument("moe_aux_loss: rows_per_segment must be positive");
  std::vector<double> p(E);
  double total = 0;
  for (long t = 0; t < n; ++t) {
    const T* z = logits + t * E;
    const T* c = coeffs + (t / rows_per_segment) * E;
    double top = z[0], sum = 0, s = 0;
    for (int e = 1; e < E; ++e) top = std::max(top, static_cast<double>(z[e]));
    for (int e = 0; e < E; ++e) sum += p[e] = std::exp(static_cast<double>(z[e]) - top);
    for (int e = 0; e < E; ++e) s += (p[e] /= sum) * static_cast<double>(c[e]);
    for (int e = 0; e < E; ++e)
      dlogits[t * E + e] += static_cast<T>(static_cast<double>(scale) * p[e] * (static_cast<double>(c[e]) - s));
    total += s;
  }
  if (loss_sum) *loss_sum += total;
}

template <typename T>
void CpuKernels<T>::gather_rows(const T* x, const int* rows, T* out, long count, int d) {
  for (long i = 0; i < count; ++i) std::copy(x + static_cast<long>(rows[i]) * d, x + static_cast<long>(rows[i] + 1) * d, out + i * d);
}

template <typename T>
void CpuKernels<T>::moe_combine(const T* h, const T* y, const int* pair_row, const T* gates, T* out, long n, int k, int d) {
  for (long t = 0; t < n; ++t) {
    T* o = out + t * d;
    std::copy(h + t * d, h + (t + 1) * d, o);
    for (int s = 0; s < k; ++s) {
      if (pair_row[t * k + s] < 0) continue;  // (dropped)
      const T g = gates[t * k + s];
      const T* row = y + static_cast<long>(pair_row[t * k + s]) * d;
      for (int c = 0; c < d; ++c) o[c] += g * row[c];
    }
  }
}

template <typename T>
void CpuKernels<T>::moe_combine_backward(const T* dout, const T* y, const int* pair_row, const T* gates, T* dy, T* dgates,
                                         long n, int k, int d) {
  for (long t = 0; t < n; ++t) {
    const T* go = dout + t * d;
    for (int s = 0; s < k; ++s) {
      const long r = pair_row[t * k + s];
      if (r < 0) {  // (dropped: the output does not depend on its gate)
        dgates[t * k + s] = T(0);
        continue;
      }
      const T g = gates[t * k + s];
      const T* row = y + r * d;
      T* drow = dy + r * d;
      T dot = 0;
      for (int c = 0; c < d; ++c) {
        drow[c] = g * go[c];
        dot += go[c] * row[c];
      }
      dgates[t * k + s] = dot;
    }
  }
}

template <typename T>
void CpuKernels<T>::moe_sum_pairs(const T* dpairs, const int* pair_row, T* dx, long n, int k, int d) {
  for (long t = 0; t < n; ++t) {
    T* o = dx + t * d;
    std::fill(o, o + d, T(0));
    for (int s = 0; s < k; ++s) {
      if (pair_row[t * k + s] < 0) continue;  // (dropped)
      const T* row = dpairs + static_cast<long>(pair_row[t * k + s]) * d;
      for (int c = 0; c < d; ++c) o[c] += row[c];
    }
  }
}

template <typename T>
void CpuKernels<T>::to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

template <typename T>
void CpuKernels<T>::to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

template class CpuKernels<float>;
template class CpuKernels<double>;

}  // namespace trainsim::exec
