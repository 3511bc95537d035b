// CUDA kernels of the "cuda" backend (see cuda_kernels.h). Each mirrors the CPU kernel of the same name in
// exec/cpu/cpu_kernels.cpp, expression for expression, so that with --fmad=false (CMakeLists.txt) the
// per-element results round the same way; only the order of sums within a row differs (a block-wide tree).
// The tensor-parallel kernels (the vocabulary-parallel embedding and cross-entropy) follow the same rule.
// NOT YET RUN ON A GPU.
#include "exec/cuda/cuda_kernels.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "exec/cuda/cuda_check.h"

namespace trainsim::exec::cuda {

namespace {

constexpr int kThreads = 256;  // every kernel's block size (a power of two: the reductions rely on it)

void check_blas(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw CudaError(std::string("cuBLAS error ") + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ") in " +
                    call + " at " + file + ":" + std::to_string(line));
}
#define TS_CUBLAS(call) check_blas((call), #call, __FILE__, __LINE__)
#define TS_LAUNCHED() TS_CUDA(cudaGetLastError())

// Blocks for a grid-stride loop over n elements (capped: the loop covers the rest).
unsigned grid_for(long n) { return static_cast<unsigned>(std::clamp<long>((n + kThreads - 1) / kThreads, 1, 1L << 16)); }

#define GRID_STRIDE(i, n) \
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += static_cast<long>(gridDim.x) * blockDim.x)

// Block-wide reductions over kThreads threads: every thread gets the result. The tree is fixed, so results
// do not vary between runs.
template <typename T>
__device__ T block_sum(T v, T* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  T r = sh[0];
  __syncthreads();
  return r;
}

__device__ float block_max(float v, float* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

__global__ void scale_matrix_k(float* C, int M, int N, int ldc, float beta) {
  GRID_STRIDE(e, static_cast<long>(M) * N) {
    float& c = C[(e / N) * ldc + e % N];
    c = beta == 0.0f ? 0.0f : beta * c;
  }
}

__global__ void embedding_forward_k(const int* tokens, const float* table, float* out, long n, int d) {
  GRID_STRIDE(e, n * d) out[e] = table[static_cast<long>(tokens[e / d]) * d + e % d];
}

// One thread per column, rows in order: the CPU's order of additions into each table row.
__global__ void embedding_backward_k(const int* tokens, const float* dout, float* dtable, long n, int d) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  for (long i = 0; i < n; ++i) dtable[static_cast<long>(tokens[i]) * d + j] += dout[i * d + j];
}

// One block per row.
__global__ void rmsnorm_forward_k(const float* x, const float* g, float* y, float* rstd, int d, float eps) {
  __shared__ float sh[kThreads];
  const long i = blockIdx.x;
  const float* xi = x + i * d;
  float ss = 0;
  for (int j = threadIdx.x; j < d; j += kThreads) ss += xi[j] * xi[j];
  ss = block_sum(ss, sh);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  if (threadIdx.x == 0) rstd[i] = r;
  float* yi = y + i * d;
  for (int j = threadIdx.x; j < d; j += kThreads) yi[j] = xi[j] * r * g[j];
}

__global__ void rmsnorm_backward_input_k(const float* dy, const float* x, const float* g, const float* rstd, float* dx,
                                         int d) {
  __shared__ float sh[kThreads];
  const long i = blockIdx.x;
  const float *dyi = dy + i * d, *xi = x + i * d;
  const float r = rstd[i];
  float dot = 0;
  for (int j = threadIdx.x; j < d; j += kThreads) dot += g[j] * dyi[j] * xi[j] * r;
  dot = block_sum(dot, sh);
  dot /= static_cast<float>(d);
  float* dxi = dx + i * d;
  for (int j = threadIdx.x; j < d; j += kThreads) dxi[j] += r * (g[j] * dyi[j] - xi[j] * r * dot);
}

// One thread per column, rows in order (the CPU's order).
__global__ void rmsnorm_backward_weight_k(const float* dy, const float* x, const float* rstd, float* dg, long n, int d) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  float acc = 0;
  for (long i = 0; i < n; ++i) acc += dy[i * d + j] * x[i * d + j] * rstd[i];
  dg[j] = acc;
}

// One thread per (b, t, h, pair). sign = 1: qkv -> q, k, v; sign = -1: dq, dk, dv -> dqkv.
__global__ void rope_k(const float* qkv_in, float* q, float* k, float* v, float* qkv_out, const float* dq,
                       const float* dk, const float* dv, int B, int Tn, int H, int hd, const float* cos,
                       const float* sin, float sign) {
  const long d = static_cast<long>(H) * hd;
  const int half = hd / 2;
  GRID_STRIDE(e, static_cast<long>(B) * Tn * H * half) {
    const int p = static_cast<int>(e % half);
    long rest = e / half;
    const int h = static_cast<int>(rest % H);
    rest /= H;
    const int t = static_cast<int>(rest % Tn);
    const long b = rest / Tn;
    const int i = 2 * p;
    const long o = ((b * H + h) * Tn + t) * hd;
    const float c = cos[static_cast<long>(t) * half + p], s = sin[static_cast<long>(t) * half + p];
    if (sign > 0) {
      const float* row = qkv_in + (b * Tn + t) * 3 * d;
      float qa = row[h * hd + i], qb = row[h * hd + i + 1];
      rope_rotate(qa, qb, c, s, 1.0f);
      q[o + i] = qa, q[o + i + 1] = qb;
      float ka = row[d + h * hd + i], kb = row[d + h * hd + i + 1];
      rope_rotate(ka, kb, c, s, 1.0f);
      k[o + i] = ka, k[o + i + 1] = kb;
      v[o + i] = row[2 * d + h * hd + i], v[o + i + 1] = row[2 * d + h * hd + i + 1];
    } else {
      float* row = qkv_out + (b * Tn + t) * 3 * d;
      float qa = dq[o + i], qb = dq[o + i + 1];
      rope_rotate(qa, qb, c, s, -1.0f);
      row[h * hd + i] = qa, row[h * hd + i + 1] = qb;
      float ka = dk[o + i], kb = dk[o + i + 1];
      rope_rotate(ka, kb, c, s, -1.0f);
      row[d + h * hd + i] = ka, row[d + h * hd + i + 1] = kb;
      row[2 * d + h * hd + i] = dv[o + i], row[2 * d + h * hd + i + 1] = dv[o + i + 1];
    }
  }
}

// to_heads: x (B·T × d) -> o (B,H,T,hd); otherwise the reverse.
__global__ void heads_k(const float* src, float* dst, int B, int Tn, int H, int hd, bool to_heads) {
  const long d = static_cast<long>(H) * hd;
  GRID_STRIDE(e, static_cast<long>(B) * Tn * d) {  // e indexes the (B·T × d) side
    const int j = static_cast<int>(e % hd);
    long rest = e / hd;
    const int h = static_cast<int>(rest % H);
    rest /= H;
    const int t = static_cast<int>(rest % Tn);
    const long b = rest / Tn;
    const long flat = (b * Tn + t) * d + static_cast<long>(h) * hd + j, split = ((b * H + h) * Tn + t) * hd + j;
    if (to_heads)
      dst[split] = src[flat];
    else
      dst[flat] = src[split];
  }
}

// One block per row of count·T rows.
__global__ void causal_softmax_forward_k(float* s, int Tn, float scale) {
  __shared__ float sh[kThreads];
  const long r = blockIdx.x;
  const int t = static_cast<int>(r % Tn);
  float* row = s + r * Tn;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += kThreads) mx = fmaxf(mx, row[j] * scale);
  mx = block_max(mx, sh);
  float sum = 0;
  for (int j = threadIdx.x; j <= t; j += kThreads) {
    row[j] = expf(row[j] * scale - mx);
    sum += row[j];
  }
  sum = block_sum(sum, sh);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j <= t; j += kThreads) row[j] *= inv;
  for (int j = t + 1 + threadIdx.x; j < Tn; j += kThreads) row[j] = 0;
}

__global__ void causal_softmax_backward_k(const float* p, float* dp, int Tn, float scale) {
  __shared__ float sh[kThreads];
  const long r = blockIdx.x;
  const int t = static_cast<int>(r % Tn);
  const float* pr = p + r * Tn;
  float* dr = dp + r * Tn;
  float dot = 0;
  for (int j = threadIdx.x; j <= t; j += kThreads) dot += pr[j] * dr[j];
  dot = block_sum(dot, sh);
  for (int j = threadIdx.x; j <= t; j += kThreads) dr[j] = pr[j] * (dr[j] - dot) * scale;
  for (int j = t + 1 + threadIdx.x; j < Tn; j += kThreads) dr[j] = 0;
}

__global__ void swiglu_forward_k(const float* gu, float* h, long n, int f) {
  GRID_STRIDE(e, n * f) {
    const long i = e / f;
    const int j = static_cast<int>(e % f);
    const float* a = gu + i * 2 * f;
    h[e] = silu(a[j]) * a[f + j];
  }
}

__global__ void swiglu_backward_k(const float* gu, const float* dh, float* dgu, long n, int f) {
  GRID_STRIDE(e, n * f) {
    const long i = e / f;
    const int j = static_cast<int>(e % f);
    const float aj = gu[i * 2 * f + j], bj = gu[i * 2 * f + f + j], gj = dh[e];
    dgu[i * 2 * f + j] = gj * bj * silu_grad(aj);
    dgu[i * 2 * f + f + j] = gj * silu(aj);
  }
}

__global__ void add_k(const float* a, const float* b, float* out, long n) {
  GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void fill_k(float* x, float value, long n) {
  GRID_STRIDE(i, n) x[i] = value;
}

// One block per row: the row's loss into row_loss[i], its gradient into dlogits (which may alias logits).
__global__ void cross_entropy_rows_k(const float* logits, const int* targets, float* dlogits, double* row_loss, int V,
                                     float scale) {
  __shared__ float shf[kThreads];
  __shared__ double shd[kThreads];
  const long i = blockIdx.x;
  const float* row = logits + i * V;
  float* drow = dlogits + i * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += kThreads) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, shf);
  double sum = 0;
  for (int j = threadIdx.x; j < V; j += kThreads) sum += exp(static_cast<double>(row[j] - mx));
  sum = block_sum(sum, shd);
  const int y = targets[i];
  if (threadIdx.x == 0) row_loss[i] = log(sum) - static_cast<double>(row[y] - mx);
  __syncthreads();  // row[y] is read before anyone overwrites it (dlogits may alias logits)
  const double inv = 1.0 / sum;
  for (int j = threadIdx.x; j < V; j += kThreads) {
    const double p = exp(static_cast<double>(row[j] - mx)) * inv;
    drow[j] = static_cast<float>((p - (j == y ? 1.0 : 0.0)) * static_cast<double>(scale));
  }
}

// One thread per segment, rows in order (the CPU's order of additions into loss_sums).
__global__ void segment_sums_k(const double* row_loss, double* loss_sums, long n, long rows_per_segment) {
  const long s = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long begin = s * rows_per_segment;
  if (begin >= n) return;
  const long end = begin + rows_per_segment < n ? begin + rows_per_segment : n;
  double acc = loss_sums[s];
  for (long i = begin; i < end; ++i) acc += row_loss[i];
  loss_sums[s] = acc;
}

// Stage 1 of sum_squares: a fixed grid, one partial sum per block.
__global__ void sum_squares_partial_k(const float* x, long n, double* partial) {
  __shared__ double sh[kThreads];
  double s = 0;
  GRID_STRIDE(i, n) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// Stage 2: one block adds the partial sums (fixed tree) to *acc.
__global__ void sum_squares_final_k(const double* partial, int count, double* acc) {
  __shared__ double sh[kThreads];
  double s = 0;
  for (int i = threadIdx.x; i < count; i += kThreads) s += partial[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) *acc += s;
}

__global__ void adamw_k(const float* w, const float* g, const float* m, const float* v, float* w_out, float* m_out,
                        float* v_out, long n, AdamWStep step, const double* grad_norm_sq, float max_norm) {
  float coef = 1.0f;  // torch.nn.utils.clip_grad_norm_'s coefficient, as the CPU computes it
  if (grad_norm_sq) coef = static_cast<float>(fmin(1.0, max_norm / (sqrt(*grad_norm_sq) + 1e-6)));
  GRID_STRIDE(i, n) {
    float wi = w[i], mi = m[i], vi = v[i];
    adamw_element(wi, mi, vi, g[i] * coef, step);
    w_out[i] = wi, m_out[i] = mi, v_out[i] = vi;
  }
}

// ---- tensor parallelism: Megatron-LM's vocabulary-parallel embedding and cross-entropy (exec/kernels.h) ----
// Each mirrors the CPU kernel of the same name (exec/cpu/cpu_kernels.cpp, its CPU reference); a vocabulary
// slice holds token ids [lo, lo + rows) (the embedding) or [lo, lo + V) (the logits' columns).

// CpuKernels::embedding_forward_range: row token − lo of the slice's table, zeros for tokens outside it.
__global__ void embedding_forward_range_k(const int* tokens, const float* table, float* out, long n, int d, int lo,
                                          int rows) {
  GRID_STRIDE(e, n * d) {
    const long r = static_cast<long>(tokens[e / d]) - lo;
    out[e] = r >= 0 && r < rows ? table[r * d + e % d] : 0.0f;
  }
}

// CpuKernels::embedding_backward_range: one thread per column, rows in order (the CPU's order of additions
// into each table row); rows of tokens outside the slice are skipped.
__global__ void embedding_backward_range_k(const int* tokens, const float* dout, float* dtable, long n, int d, int lo,
                                           int rows) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  for (long i = 0; i < n; ++i) {
    const long r = static_cast<long>(tokens[i]) - lo;
    if (r >= 0 && r < rows) dtable[r * d + j] += dout[i * d + j];
  }
}

// CpuKernels::row_max: one block per row (the largest element does not depend on the order).
__global__ void row_max_k(const float* x, float* out, int V) {
  __shared__ float sh[kThreads];
  const long i = blockIdx.x;
  const float* row = x + i * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += kThreads) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, sh);
  if (threadIdx.x == 0) out[i] = mx;
}

// The largest of every slice's maximum of row i (maxes: k × n, member-major), in member order as the CPU's
// max_over takes it.
__device__ float max_over_slices(const float* maxes, int k, long n, long i) {
  float m = maxes[i];
  for (int q = 1; q < k; ++q) m = fmaxf(m, maxes[q * n + i]);
  return m;
}

// CpuKernels::vocab_parallel_ce_stats: one block per row; the sum of exponentials in a fixed tree (as
// cross_entropy_rows_k), the target logit where the target lies in the slice.
__global__ void vocab_parallel_ce_stats_k(const float* logits, const int* targets, const float* maxes, int k,
                                          double* stats, long n, int V, int lo) {
  __shared__ double sh[kThreads];
  const long i = blockIdx.x;
  const float* row = logits + i * V;
  const float mx = max_over_slices(maxes, k, n, i);
  double sum = 0;
  for (int j = threadIdx.x; j < V; j += kThreads) sum += exp(static_cast<double>(row[j] - mx));
  sum = block_sum(sum, sh);
  if (threadIdx.x == 0) {
    const long y = static_cast<long>(targets[i]) - lo;
    stats[2 * i] = sum;
    stats[2 * i + 1] = y >= 0 && y < V ? static_cast<double>(row[y] - mx) : 0.0;
  }
}

// CpuKernels::vocab_parallel_ce_finish, one block per row: the row's loss log S_i − z_i into row_loss[i] (summed
// into the segments in row order by segment_sums_k), the slice's gradient into dlogits (which may alias logits:
// each element is read and then written by the same thread, and nothing else of the row is read).
__global__ void vocab_parallel_ce_finish_k(const float* logits, const int* targets, const float* maxes, int k,
                                           const double* stats, float* dlogits, double* row_loss, long n, int V, int lo,
                                           float scale) {
  const long i = blockIdx.x;
  const float* row = logits + i * V;
  float* drow = dlogits + i * V;
  const float mx = max_over_slices(maxes, k, n, i);
  const double sum = stats[2 * i];
  if (threadIdx.x == 0) row_loss[i] = log(sum) - stats[2 * i + 1];
  const long y = static_cast<long>(targets[i]) - lo;
  const double inv = 1.0 / sum;
  for (int j = threadIdx.x; j < V; j += kThreads) {
    const double p = exp(static_cast<double>(row[j] - mx)) * inv;
    drow[j] = static_cast<float>((p - (j == y ? 1.0 : 0.0)) * static_cast<double>(scale));
  }
}

constexpr int kMaxInputs = 16;
struct Inputs {
  const void* p[kMaxInputs];
};

// ---- Mixture of Experts ----

__global__ void moe_topk_k(const float* logits, int* idx, float* gates, long n, int E, int k) {
  GRID_STRIDE(t, n) {
    const float* z = logits + t * E;
    int* id = idx + t * k;
    for (int s = 0; s < k; ++s) {  // the s-th largest: the lower expert first among equal logits
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int q = 0; q < s; ++q) taken = taken || id[q] == e;
        if (!taken && (best < 0 || z[e] > z[best])) best = e;
      }
      id[s] = best;
    }
    const float top = z[id[0]];
    float sum = 0;
    for (int s = 0; s < k; ++s) {
      gates[t * k + s] = expf(z[id[s]] - top);
      sum += gates[t * k + s];
    }
    for (int s = 0; s < k; ++s) gates[t * k + s] /= sum;
  }
}

__global__ void moe_topk_backward_k(const int* idx, const float* gates, const float* dgates, float* dlogits, long n,
                                    int E, int k) {
  GRID_STRIDE(t, n) {
    const float* g = gates + t * k;
    const float* dg = dgates + t * k;
    float dot = 0;
    for (int s = 0; s < k; ++s) dot += g[s] * dg[s];
    for (int e = 0; e < E; ++e) dlogits[t * E + e] = 0;
    for (int s = 0; s < k; ++s) dlogits[t * E + idx[t * k + s]] = g[s] * (dg[s] - dot);
  }
}

// One thread per token: the softmax of its row in double, its term s_t into row_loss (summed in row order by
// segment_sums_k, as the CPU's), its gradient added to dlogits.
__global__ void moe_aux_loss_k(const float* logits, const float* coeffs, float* dlogits, double* row_loss, long n, int E,
                               long rows_per_segment, float scale) {
  GRID_STRIDE(t, n) {
    const float* z = logits + t * E;
    const float* c = coeffs + (t / rows_per_segment) * E;
    double top = z[0], sum = 0, s = 0;
    for (int e = 1; e < E; ++e) top = fmax(top, static_cast<double>(z[e]));
    for (int e = 0; e < E; ++e) sum += exp(static_cast<double>(z[e]) - top);
    for (int e = 0; e < E; ++e) s += exp(static_cast<double>(z[e]) - top) / sum * static_cast<double>(c[e]);
    for (int e = 0; e < E; ++e) {
      const double p = exp(static_cast<double>(z[e]) - top) / sum;
      dlogits[t * E + e] += static_cast<float>(static_cast<double>(scale) * p * (static_cast<double>(c[e]) - s));
    }
    row_loss[t] = s;
  }
}

__global__ void gather_rows_k(const float* x, const int* rows, float* out, long count, int d) {
  GRID_STRIDE(e, count * d) out[e] = x[static_cast<long>(rows[e / d]) * d + e % d];
}

__global__ void moe_combine_k(const float* h, const float* y, const int* pair_row, const float* gates, float* out,
                              long n, int k, int d) {
  GRID_STRIDE(e, n * d) {
    const long t = e / d, c = e % d;
    float o = h[e];
    for (int s = 0; s < k; ++s)
      if (pair_row[t * k + s] >= 0) o += gates[t * k + s] * y[static_cast<long>(pair_row[t * k + s]) * d + c];
    out[e] = o;  // (a pair_row of -1: a dropped pair, no term)
  }
}

__global__ void moe_scale_pairs_k(const float* dout, const int* pair_row, const float* gates, float* dy, long n, int k,
                                  int d) {
  GRID_STRIDE(e, n * k * d) {
    const long ts = e / d, c = e % d, t = ts / k;
    if (pair_row[ts] >= 0) dy[static_cast<long>(pair_row[ts]) * d + c] = gates[ts] * dout[t * d + c];
  }
}

__global__ void moe_gate_grads_k(const float* dout, const float* y, const int* pair_row, float* dgates, long n, int k,
                                 int d) {
  GRID_STRIDE(ts, n * k) {
    if (pair_row[ts] < 0) {  // (dropped)
      dgates[ts] = 0;
      continue;
    }
    const float* go = dout + (ts / k) * d;
    const float* row = y + static_cast<long>(pair_row[ts]) * d;
    float dot = 0;
    for (int c = 0; c < d; ++c) dot += go[c] * row[c];
    dgates[ts] = dot;
  }
}

__global__ void moe_sum_pairs_k(const float* dpairs, const int* pair_row, float* dx, long n, int k, int d) {
  GRID_STRIDE(e, n * d) {
    const long t = e / d, c = e % d;
    float o = 0;
    for (int s = 0; s < k; ++s)
      if (pair_row[t * k + s] >= 0) o += dpairs[static_cast<long>(pair_row[t * k + s]) * d + c];
    dx[e] = o;
  }
}

template <typename T>
__global__ void sum_inputs_k(Inputs in, int k, std::size_t offset, std::size_t count, T* out, bool accumulate) {
  GRID_STRIDE(e, static_cast<long>(count)) {
    T acc = accumulate ? out[e] : static_cast<const T*>(in.p[0])[offset + e];
    for (int j = accumulate ? 0 : 1; j < k; ++j) acc += static_cast<const T*>(in.p[j])[offset + e];
    out[e] = acc;
  }
}

// Device scratch for one call, freed in stream order after the kernels that use it.
struct Scratch {
  void* p = nullptr;
  cudaStream_t stream;
  Scratch(std::size_t bytes, cudaStream_t s) : stream(s) { TS_CUDA(cudaMallocAsync(&p, bytes, s)); }
  ~Scratch() { cudaFreeAsync(p, stream); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

}  // namespace

CudaKernels::CudaKernels(cudaStream_t stream) : stream_(stream) {
  TS_CUBLAS(cublasCreate(&blas_));
  TS_CUBLAS(cublasSetStream(blas_, stream_));
  // fp32 GEMMs in fp32: no TF32 tensor-core rounding, for equivalence with the CPU backend.
  TS_CUBLAS(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
}

CudaKernels::~CudaKernels() {
  if (blas_) cublasDestroy(blas_);
}

// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: the operands swap, the leading dimensions stay.
void CudaKernels::gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                       int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // as the CPU backend: C = beta·C, zeros when beta = 0
    scale_matrix_k<<<grid_for(static_cast<long>(M) * N), kThreads, 0, stream_>>>(C, M, N, ldc, beta);
    TS_LAUNCHED();
    return;
  }
  TS_CUBLAS(cublasSgemm(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb,
                        A, lda, &beta, C, ldc));
}

void CudaKernels::gemm_batched(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, long sa,
                               const float* B, int ldb, long sb, float beta, float* C, int ldc, long sc, int batch) {
  if (batch == 0 || M == 0 || N == 0) return;
  if (K == 0) {
    for (int i = 0; i < batch; ++i) gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C + i * sc, ldc);
    return;
  }
  TS_CUBLAS(cublasSgemmStridedBatched(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                                      &alpha, B, ldb, sb, A, lda, sa, &beta, C, ldc, sc, batch));
}

void CudaKernels::embedding_forward(const int* tokens, const float* table, float* out, long n, int d) {
  if (n * d == 0) return;
  embedding_forward_k<<<grid_for(n * d), kThreads, 0, stream_>>>(tokens, table, out, n, d);
  TS_LAUNCHED();
}

void CudaKernels::embedding_backward(const int* tokens, const float* dout, float* dtable, long n, int d) {
  if (n == 0 || d == 0) return;
  embedding_backward_k<<<(d + kThreads - 1) / kThreads, kThreads, 0, stream_>>>(tokens, dout, dtable, n, d);
  TS_LAUNCHED();
}

void CudaKernels::rmsnorm_forward(const float* x, const float* g, float* y, float* rstd, long n, int d, float eps) {
  if (n == 0) return;
  rmsnorm_forward_k<<<static_cast<unsigned>(n), kThreads, 0, stream_>>>(x, g, y, rstd, d, eps);
  TS_LAUNCHED();
}

void CudaKernels::rmsnorm_backward_input(const float* dy, const float* x, const float* g, const float* rstd, float* dx,
                                         long n, int d) {
  if (n == 0) return;
  rmsnorm_backward_input_k<<<static_cast<unsigned>(n), kThreads, 0, stream_>>>(dy, x, g, rstd, dx, d);
  TS_LAUNCHED();
}

void CudaKernels::rmsnorm_backward_weight(const float* dy, const float* x, const float* rstd, float* dg, long n, int d) {
  if (d == 0) return;
  rmsnorm_backward_weight_k<<<(d + kThreads - 1) / kThreads, kThreads, 0, stream_>>>(dy, x, rstd, dg, n, d);
  TS_LAUNCHED();
}

void CudaKernels::split_heads_rope(const float* qkv, float* q, float* k, float* v, int B, int Tn, int H, int hd,
                                   const float* cos, const float* sin) {
  const long pairs = static_cast<long>(B) * Tn * H * (hd / 2);
  if (pairs == 0) return;
  rope_k<<<grid_for(pairs), kThreads, 0, stream_>>>(qkv, q, k, v, nullptr, nullptr, nullptr, nullptr, B, Tn, H, hd, cos,
                                                    sin, 1.0f);
  TS_LAUNCHED();
}

void CudaKernels::merge_heads_rope_backward(const float* dq, const float* dk, const float* dv, float* dqkv, int B, int Tn,
                                            int H, int hd, const float* cos, const float* sin) {
  const long pairs = static_cast<long>(B) * Tn * H * (hd / 2);
  if (pairs == 0) return;
  rope_k<<<grid_for(pairs), kThreads, 0, stream_>>>(nullptr, nullptr, nullptr, nullptr, dqkv, dq, dk, dv, B, Tn, H, hd,
                                                    cos, sin, -1.0f);
  TS_LAUNCHED();
}

void CudaKernels::merge_heads(const float* o, float* out, int B, int Tn, int H, int hd) {
  const long n = static_cast<long>(B) * Tn * H * hd;
  if (n == 0) return;
  heads_k<<<grid_for(n), kThreads, 0, stream_>>>(o, out, B, Tn, H, hd, false);
  TS_LAUNCHED();
}

void CudaKernels::split_heads(const float* x, float* o, int B, int Tn, int H, int hd) {
  const long n = static_cast<long>(B) * Tn * H * hd;
  if (n == 0) return;
  heads_k<<<grid_for(n), kThreads, 0, stream_>>>(x, o, B, Tn, H, hd, true);
  TS_LAUNCHED();
}

void CudaKernels::causal_softmax_forward(float* s, int count, int Tn, float scale) {
  const long rows = static_cast<long>(count) * Tn;
  if (rows == 0) return;
  causal_softmax_forward_k<<<static_cast<unsigned>(rows), kThreads, 0, stream_>>>(s, Tn, scale);
  TS_LAUNCHED();
}

void CudaKernels::causal_softmax_backward(const float* p, float* dp, int count, int Tn, float scale) {
  const long rows = static_cast<long>(count) * Tn;
  if (rows == 0) return;
  causal_softmax_backward_k<<<static_cast<unsigned>(rows), kThreads, 0, stream_>>>(p, dp, Tn, scale);
  TS_LAUNCHED();
}

void CudaKernels::swiglu_forward(const float* gu, float* h, long n, int f) {
  if (n * f == 0) return;
  swiglu_forward_k<<<grid_for(n * f), kThreads, 0, stream_>>>(gu, h, n, f);
  TS_LAUNCHED();
}

void CudaKernels::swiglu_backward(const float* gu, const float* dh, float* dgu, long n, int f) {
  if (n * f == 0) return;
  swiglu_backward_k<<<grid_for(n * f), kThreads, 0, stream_>>>(gu, dh, dgu, n, f);
  TS_LAUNCHED();
}

void CudaKernels::add(const float* a, const float* b, float* out, long n) {
  if (n == 0) return;
  add_k<<<grid_for(n), kThreads, 0, stream_>>>(a, b, out, n);
  TS_LAUNCHED();
}

void CudaKernels::copy(const float* src, float* dst, long n) {
  if (src == dst || n == 0) return;
  if (src < dst + n && dst < src + n) throw std::invalid_argument("CudaKernels::copy: the ranges overlap");
  TS_CUDA(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, stream_));
}

void CudaKernels::fill(float* x, float value, long n) {
  if (n == 0) return;
  fill_k<<<grid_for(n), kThreads, 0, stream_>>>(x, value, n);
  TS_LAUNCHED();
}

void CudaKernels::cross_entropy(const float* logits, const int* targets, float* dlogits, double* loss_sums, long n,
                                int V, long rows_per_segment, float scale) {
  if (n == 0) return;
  if (rows_per_segment <= 0) throw std::invalid_argument("cross_entropy: rows_per_segment must be positive");
  Scratch row_loss(sizeof(double) * n, stream_);
  cross_entropy_rows_k<<<static_cast<unsigned>(n), kThreads, 0, stream_>>>(logits, targets, dlogits,
                                                                           row_loss.as<double>(), V, scale);
  TS_LAUNCHED();
  const long segments = (n + rows_per_segment - 1) / rows_per_segment;
  segment_sums_k<<<static_cast<unsigned>((segments + kThreads - 1) / kThreads), kThreads, 0, stream_>>>(
      row_loss.as<double>(), loss_sums, n, rows_per_segment);
  TS_LAUNCHED();
}

void CudaKernels::sum_squares(const float* x, long n, double* acc) {
  if (n == 0) return;
  const unsigned blocks = std::min(grid_for(n), 1024u);  // depends on n only: the same tree in every run
  Scratch partial(sizeof(double) * blocks, stream_);
  sum_squares_partial_k<<<blocks, kThreads, 0, stream_>>>(x, n, partial.as<double>());
  TS_LAUNCHED();
  sum_squares_final_k<<<1, kThreads, 0, stream_>>>(partial.as<double>(), static_cast<int>(blocks), acc);
  TS_LAUNCHED();
}

void CudaKernels::adamw(const float* w, const float* g, const float* m, const float* v, float* w_out, float* m_out,
                        float* v_out, long n, const AdamWStep& step, const double* grad_norm_sq, float max_norm) {
  if (n == 0) return;
  adamw_k<<<grid_for(n), kThreads, 0, stream_>>>(w, g, m, v, w_out, m_out, v_out, n, step, grad_norm_sq, max_norm);
  TS_LAUNCHED();
}

void CudaKernels::embedding_forward_range(const int* tokens, const float* table, float* out, long n, int d, int lo,
                                          int rows) {
  if (n * d == 0) return;
  embedding_forward_range_k<<<grid_for(n * d), kThreads, 0, stream_>>>(tokens, table, out, n, d, lo, rows);
  TS_LAUNCHED();
}

void CudaKernels::embedding_backward_range(const int* tokens, const float* dout, float* dtable, long n, int d, int lo,
                                           int rows) {
  if (n == 0 || d == 0) return;
  embedding_backward_range_k<<<(d + kThreads - 1) / kThreads, kThreads, 0, stream_>>>(tokens, dout, dtable, n, d, lo,
                                                                                       rows);
  TS_LAUNCHED();
}

void CudaKernels::row_max(const float* x, float* out, long n, int V) {
  if (n == 0) return;
  if (V <= 0) throw std::invalid_argument("row_max: a row needs at least one element");
  row_max_k<<<static_cast<unsigned>(n), kThreads, 0, stream_>>>(x, out, V);
  TS_LAUNCHED();
}

void CudaKernels::vocab_parallel_ce_stats(const float* logits, const int* targets, const float* maxes, int k,
                                          double* stats, long n, int V, int lo) {
  if (n == 0) return;
  vocab_parallel_ce_stats_k<<<static_cast<unsigned>(n), kThreads, 0, stream_>>>(logits, targets, maxes, k, stats, n, V,
                                                                                lo);
  TS_LAUNCHED();
}

void CudaKernels::vocab_parallel_ce_finish(const float* logits, const int* targets, const float* maxes, int k,
                                           const double* stats, float* dlogits, double* loss_sums, long n, int V, int lo,
                                           long rows_per_segment, float scale) {
  if (n == 0) return;
  if (rows_per_segment <= 0) throw std::invalid_argument("vocab_parallel_ce_finish: rows_per_segment must be positive");
  Scratch row_loss(sizeof(double) * n, stream_);
  vocab_parallel_ce_finish_k<<<static_cast<unsigned>(n), kThreads, 0, stream_>>>(
      logits, targets, maxes, k, stats, dlogits, row_loss.as<double>(), n, V, lo, scale);
  TS_LAUNCHED();
  const long segments = (n + rows_per_segment - 1) / rows_per_segment;
  segment_sums_k<<<static_cast<unsigned>((segments + kThreads - 1) / kThreads), kThreads, 0, stream_>>>(
      row_loss.as<double>(), loss_sums, n, rows_per_segment);
  TS_LAUNCHED();
}

void CudaKernels::moe_topk(const float* logits, int* idx, float* gates, long n, int E, int k) {
  if (n == 0) return;
  moe_topk_k<<<grid_for(n), kThreads, 0, stream_>>>(logits, idx, gates, n, E, k);
  TS_LAUNCHED();
}

void CudaKernels::moe_topk_backward(const int* idx, const float* gates, const float* dgates, float* dlogits, long n,
                                    int E, int k) {
  if (n == 0) return;
  moe_topk_backward_k<<<grid_for(n), kThreads, 0, stream_>>>(idx, gates, dgates, dlogits, n, E, k);
  TS_LAUNCHED();
}

void CudaKernels::moe_aux_loss(const float* logits, const float* coeffs, float* dlogits, double* loss_sum, long n,
                               int E, long rows_per_segment, float scale) {
  if (n == 0) return;
  if (rows_per_segment <= 0) throw std::invalid_argument("moe_aux_loss: rows_per_segment must be positive");
  Scratch row_loss(sizeof(double) * n, stream_);
  moe_aux_loss_k<<<grid_for(n), kThreads, 0, stream_>>>(logits, coeffs, dlogits, row_loss.as<double>(), n, E,
                                                        rows_per_segment, scale);
  TS_LAUNCHED();
  if (!loss_sum) return;
  segment_sums_k<<<1, 1, 0, stream_>>>(row_loss.as<double>(), loss_sum, n, n);  // (one segment: row order)
  TS_LAUNCHED();
}

void CudaKernels::gather_rows(const float* x, const int* rows, float* out, long count, int d) {
  if (count == 0 || d == 0) return;
  gather_rows_k<<<grid_for(count * d), kThreads, 0, stream_>>>(x, rows, out, count, d);
  TS_LAUNCHED();
}

void CudaKernels::moe_combine(const float* h, const float* y, const int* pair_row, const float* gates, float* out, long n,
                              int k, int d) {
  if (n == 0) return;
  moe_combine_k<<<grid_for(n * d), kThreads, 0, stream_>>>(h, y, pair_row, gates, out, n, k, d);
  TS_LAUNCHED();
}

void CudaKernels::moe_combine_backward(const float* dout, const float* y, const int* pair_row, const float* gates,
                                       float* dy, float* dgates, long n, int k, int d) {
  if (n == 0) return;
  moe_scale_pairs_k<<<grid_for(n * k * d), kThreads, 0, stream_>>>(dout, pair_row, gates, dy, n, k, d);
  TS_LAUNCHED();
  moe_gate_grads_k<<<grid_for(n * k), kThreads, 0, stream_>>>(dout, y, pair_row, dgates, n, k, d);
  TS_LAUNCHED();
}

void CudaKernels::moe_sum_pairs(const float* dpairs, const int* pair_row, float* dx, long n, int k, int d) {
  if (n == 0) return;
  moe_sum_pairs_k<<<grid_for(n * d), kThreads, 0, stream_>>>(dpairs, pair_row, dx, n, k, d);
  TS_LAUNCHED();
}

void CudaKernels::to_host(void* dst, const void* src, std::size_t bytes) {
  if (!bytes) return;
  TS_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  TS_CUDA(cudaStreamSynchronize(stream_));
}

void CudaKernels::to_device(void* dst, const void* src, std::size_t bytes) {
  if (!bytes) return;
  TS_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  TS_CUDA(cudaStreamSynchronize(stream_));  // (`src` is the caller's host buffer)
}

void sum_inputs(const void* const* inputs, int k, std::size_t offset, std::size_t count, void* out, bool is_double,
                cudaStream_t stream) {
  if (count == 0 || k == 0) return;
  const unsigned grid = grid_for(static_cast<long>(count));
  for (int first = 0; first < k; first += kMaxInputs) {  // chunks of 16 members: the same order of additions
    Inputs in{};
    const int m = std::min(kMaxInputs, k - first);
    for (int j = 0; j < m; ++j) in.p[j] = inputs[first + j];
    if (is_double)
      sum_inputs_k<double><<<grid, kThreads, 0, stream>>>(in, m, offset, count, static_cast<double*>(out), first > 0);
    else
      sum_inputs_k<float><<<grid, kThreads, 0, stream>>>(in, m, offset, count, static_cast<float*>(out), first > 0);
    TS_LAUNCHED();
  }
}

}  // namespace trainsim::exec::cuda
