// The compute a backend provides to the model (DESIGN §5): GEMMs and the transformer's other kernels, on the
// backend's own memory. The model (exec/model.h) is written once against this interface; the CPU backend
// implements it with oneDNN's and OpenBLAS's GEMMs and its own kernels (exec/cpu/), the CUDA backend with cuBLAS
// and CUDA kernels.
//
// Every pointer is backend memory. Matrices are row-major. Shapes use n = rows (tokens), d = hidden size,
// B = sequences, T = sequence length, H = heads, hd = head size, f = FFN size, V = vocabulary. "(B,H,T,hd)"
// is a contiguous 4-D layout, heads split out of the hidden dimension.
// T (the scalar) is float for training; the CPU backend also instantiates double for the gradient check.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "exec/math.h"

namespace trainsim::exec {

template <typename T>
class Kernels {
 public:
  virtual ~Kernels() = default;

  /// C (M×N) = alpha·op(A)·op(B) + beta·C. op(A) is M×K (A is stored K×M when trans_a), op(B) is K×N.
  virtual void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
                    T beta, T* C, int ldc) = 0;
  /// `batch` GEMMs as above; matrix i of each operand starts `stride_*` elements after matrix i-1.
  virtual void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, long stride_a,
                            const T* B, int ldb, long stride_b, T beta, T* C, int ldc, long stride_c, int batch) = 0;

  /// out (n×d) = table rows of `tokens` (n).
  virtual void embedding_forward(const int* tokens, const T* table, T* out, long n, int d) = 0;
  /// dtable (V×d) += dout rows scattered to their tokens, in row order (deterministic).
  virtual void embedding_backward(const int* tokens, const T* dout, T* dtable, long n, int d) = 0;

  /// y = x / sqrt(mean(x²) + eps) ∘ g per row (Zhang & Sennrich 2019); rstd (n) keeps 1/sqrt(mean(x²)+eps).
  virtual void rmsnorm_forward(const T* x, const T* g, T* y, T* rstd, long n, int d, T eps) = 0;
  /// dx (n×d) += the input gradient of rmsnorm_forward given dy.
  virtual void rmsnorm_backward_input(const T* dy, const T* x, const T* g, const T* rstd, T* dx, long n, int d) = 0;
  /// dx (n×d) = res + the input gradient of rmsnorm_forward given dy (res, n×d, may be dx): a pre-norm block's
  /// residual grad plus the norm's, the same bits as rmsnorm_backward_input onto a copy of res. This default copies
  /// res first; the CPU backend reads res in the same pass (no copy).
  virtual void rmsnorm_backward_input_onto(const T* dy, const T* x, const T* g, const T* rstd, const T* res, T* dx,
                                           long n, int d) {
    if (res != dx) copy(res, dx, n * d);
    rmsnorm_backward_input(dy, x, g, rstd, dx, n, d);
  }
  /// dg (d) = Σ_rows dy ∘ x·rstd (overwrites dg).
  virtual void rmsnorm_backward_weight(const T* dy, const T* x, const T* rstd, T* dg, long n, int d) = 0;
  /// rmsnorm_backward_input_onto and rmsnorm_backward_weight on the same dy, x and rstd, with their bits: the
  /// whole backward's (the split one's backward-weight runs the second alone). This default calls the two; the
  /// CPU backend reads dy and x once for both.
  virtual void rmsnorm_backward(const T* dy, const T* x, const T* g, const T* rstd, const T* res, T* dx, T* dg, long n,
                                int d) {
    rmsnorm_backward_input_onto(dy, x, g, rstd, res, dx, n, d);
    rmsnorm_backward_weight(dy, x, rstd, dg, n, d);
  }

  /// qkv (B·T × 3d, [q | k | v] per row) -> q, k, v (B,H,T,hd), rotary embedding applied to q and k with the
  /// tables cos, sin (T × hd/2).
  virtual void split_heads_rope(const T* qkv, T* q, T* k, T* v, int B, int Tn, int H, int hd, const T* cos,
                                const T* sin) = 0;
  /// The backward of split_heads_rope: dq, dk, dv (B,H,T,hd) -> dqkv (B·T × 3d), rotations undone.
  virtual void merge_heads_rope_backward(const T* dq, const T* dk, const T* dv, T* dqkv, int B, int Tn, int H, int hd,
                                         const T* cos, const T* sin) = 0;
  /// o (B,H,T,hd) -> out (B·T × d).
  virtual void merge_heads(const T* o, T* out, int B, int Tn, int H, int hd) = 0;
  /// x (B·T × d) -> o (B,H,T,hd).
  virtual void split_heads(const T* x, T* o, int B, int Tn, int H, int hd) = 0;
  /// In place on `s` (count × T × T raw scores q·k): row t becomes softmax(scale·s[t, 0..t]) and zeros after t.
  virtual void causal_softmax_forward(T* s, int count, int Tn, T scale) = 0;
  /// In place on `dp` (count × T × T): dP -> dS·scale = P ∘ (dP − rowsum(P ∘ dP))·scale, zeros above the diagonal.
  virtual void causal_softmax_backward(const T* p, T* dp, int count, int Tn, T scale) = 0;

  /// Elements of T (backend memory, given by the caller) that attention_forward (backward = false) or
  /// attention_backward needs as scratch; 0: none (pass nullptr).
  virtual long attention_scratch_elements(int B, int Tn, int H, int hd, bool backward) const {
    const long n = static_cast<long>(B) * Tn * H * hd;
    return backward ? n + static_cast<long>(B) * H * Tn * Tn : n;
  }
  /// Causal multi-head attention (Vaswani et al. 2017): q, k, v (B,H,T,hd) -> probs (B,H,T,T) = causal
  /// softmax(scale·q·kᵀ), kept for attention_backward (a backend may leave entries above the diagonal unset: only
  /// attention_backward reads them), and out (B·T × H·hd) = probs·v, the heads merged. This default composes
  /// gemm_batched, causal_softmax_forward and merge_heads; the CPU backend computes by blocks of queries, only
  /// the key blocks at or below the diagonal, and writes `out` in place (no merge copy).
  virtual void attention_forward(const T* q, const T* k, const T* v, T* probs, T* out, T* scratch, int B, int Tn,
                                 int H, int hd, T scale) {
    const long tt = static_cast<long>(Tn) * Tn, th = static_cast<long>(Tn) * hd;
    gemm_batched(false, true, Tn, Tn, hd, T(1), q, hd, th, k, hd, th, T(0), probs, Tn, tt, B * H);
    causal_softmax_forward(probs, B * H, Tn, scale);
    gemm_batched(false, false, Tn, hd, Tn, T(1), probs, Tn, tt, v, hd, th, T(0), scratch, hd, th, B * H);
    merge_heads(scratch, out, B, Tn, H, hd);
  }
  /// The backward of attention_forward: dout (B·T × H·hd, heads merged) -> dq, dk, dv (B,H,T,hd), overwritten.
  virtual void attention_backward(const T* q, const T* k, const T* v, const T* probs, const T* dout, T* dq, T* dk,
                                  T* dv, T* scratch, int B, int Tn, int H, int hd, T scale) {
    const long tt = static_cast<long>(Tn) * Tn, th = static_cast<long>(Tn) * hd;
    T* d_o = scratch;
    T* dp = scratch + static_cast<long>(B) * H * th;
    split_heads(dout, d_o, B, Tn, H, hd);
    gemm_batched(false, true, Tn, Tn, hd, T(1), d_o, hd, th, v, hd, th, T(0), dp, Tn, tt, B * H);
    gemm_batched(true, false, Tn, hd, Tn, T(1), probs, Tn, tt, d_o, hd, th, T(0), dv, hd, th, B * H);
    causal_softmax_backward(probs, dp, B * H, Tn, scale);
    gemm_batched(false, false, Tn, hd, Tn, T(1), dp, Tn, tt, k, hd, th, T(0), dq, hd, th, B * H);
    gemm_batched(true, false, Tn, hd, Tn, T(1), dp, Tn, tt, q, hd, th, T(0), dk, hd, th, B * H);
  }

  /// h (n×f) = silu(a) ∘ b, where gu (n × 2f) holds [a | b] per row.
  virtual void swiglu_forward(const T* gu, T* h, long n, int f) = 0;
  /// dgu (n × 2f) = the gradient of swiglu_forward given dh (n×f).
  virtual void swiglu_backward(const T* gu, const T* dh, T* dgu, long n, int f) = 0;

  /// out = a + b, element-wise (out may be a or b).
  virtual void add(const T* a, const T* b, T* out, long n) = 0;
  virtual void copy(const T* src, T* dst, long n) = 0;
  virtual void fill(T* x, T value, long n) = 0;

  /// Softmax cross-entropy per row of logits (n×V) against targets (n). dlogits = (softmax − onehot)·scale;
  /// loss_sums[s] += Σ −log softmax[target] over rows [s·rows_per_segment, (s+1)·rows_per_segment) (double,
  /// backend memory). dlogits may alias logits.
  virtual void cross_entropy(const T* logits, const int* targets, T* dlogits, double* loss_sums, long n, int V,
                             long rows_per_segment, T scale) = 0;

  /// *acc += Σ x² (acc is one double in backend memory).
  virtual void sum_squares(const T* x, long n, double* acc) = 0;
  /// AdamW on n elements (exec/math.h adamw_element). The gradient is scaled by the clipping coefficient
  /// min(1, max_norm / (sqrt(*grad_norm_sq) + 1e-6)) (torch.nn.utils.clip_grad_norm_) when grad_norm_sq is
  /// not null (one double in backend memory). Outputs may alias inputs.
  virtual void adamw(const T* w, const T* g, const T* m, const T* v, T* w_out, T* m_out, T* v_out, long n,
                     const AdamWStep& step, const double* grad_norm_sq, float max_norm) = 0;

  // ---- tensor parallelism (Megatron-LM's vocabulary-parallel embedding and cross-entropy) ----
  // A backend without them cannot replay TP schedules: the defaults throw std::logic_error naming the kernel
  // (the replay refuses such a schedule before it starts; exec/backend.h LocalBackend::supports_tensor_parallel).

  /// out (n×d) = row (token − lo) of `table` (rows×d) for the tokens in [lo, lo+rows), zeros for the others.
  virtual void embedding_forward_range(const int* tokens, const T* table, T* out, long n, int d, int lo, int rows) {
    (void)tokens, (void)table, (void)out, (void)n, (void)d, (void)lo, (void)rows;
    missing("embedding_forward_range");
  }
  /// dtable (rows×d) += the dout rows of the tokens in [lo, lo+rows), scattered to row token − lo, in row order.
  virtual void embedding_backward_range(const int* tokens, const T* dout, T* dtable, long n, int d, int lo, int rows) {
    (void)tokens, (void)dout, (void)dtable, (void)n, (void)d, (void)lo, (void)rows;
    missing("embedding_backward_range");
  }
  /// row_max (n) = the largest element of each row of x (n×V).
  virtual void row_max(const T* x, T* row_max, long n, int V) {
    (void)x, (void)row_max, (void)n, (void)V;
    missing("row_max");
  }
  /// The vocabulary-parallel cross-entropy's local sums on a vocabulary slice (logits n×V, token ids from lo),
  /// with m_i the largest of maxes[q·n + i] over q < k (every slice's row maxima, member-major):
  /// stats[2i] = Σ_j exp(logits[i,j] − m_i), stats[2i+1] = logits[i, target_i − lo] − m_i when target_i is in
  /// [lo, lo+V), else 0 (doubles).
  virtual void vocab_parallel_ce_stats(const T* logits, const int* targets, const T* maxes, int k, double* stats,
                                       long n, int V, int lo) {
    (void)logits, (void)targets, (void)maxes, (void)k, (void)stats, (void)n, (void)V, (void)lo;
    missing("vocab_parallel_ce_stats");
  }
  /// With `stats` summed over the TP group (S_i, z_i): dlogits = (exp(logits − m_i) / S_i − onehot)·scale
  /// (dlogits may alias logits) and loss_sums[i / rows_per_segment] += log S_i − z_i.
  virtual void vocab_parallel_ce_finish(const T* logits, const int* targets, const T* maxes, int k, const double* stats,
                                        T* dlogits, double* loss_sums, long n, int V, int lo, long rows_per_segment,
                                        T scale) {
    (void)logits, (void)targets, (void)maxes, (void)k, (void)stats, (void)dlogits, (void)loss_sums, (void)n, (void)V,
        (void)lo, (void)rows_per_segment, (void)scale;
    missing("vocab_parallel_ce_finish");
  }

  // ---- Mixture of Experts (exec/moe.h) ----
  // A backend without them cannot replay MoE models: the defaults throw std::logic_error naming the kernel (the
  // replay refuses such a model before it starts; exec/backend.h LocalBackend::supports_moe). Index arrays are int32
  // in backend memory.

  /// Routing of n tokens (Mixtral's): idx (n×k) = the k largest of each row of logits (n×E), largest first, the
  /// lower expert first among equal logits; gates (n×k) = the softmax of those k logits.
  virtual void moe_topk(const T* logits, int* idx, T* gates, long n, int E, int k) {
    (void)logits, (void)idx, (void)gates, (void)n, (void)E, (void)k;
    missing_moe("moe_topk");
  }
  /// dlogits (n×E) = the gradient of moe_topk's gates given dgates (n×k): zero outside the selected experts,
  /// g_s·(dg_s − Σ_j g_j·dg_j) at expert idx[s].
  virtual void moe_topk_backward(const int* idx, const T* gates, const T* dgates, T* dlogits, long n, int E, int k) {
    (void)idx, (void)gates, (void)dgates, (void)dlogits, (void)n, (void)E, (void)k;
    missing_moe("moe_topk_backward");
  }
  /// The load-balancing auxiliary loss of n routed tokens (ModelConfig::aux_loss_coeff; Fedus et al. 2021, eq. 4):
  /// for row t of logits (n×E), in segment q = t / rows_per_segment (a microbatch's tokens), p = the softmax of
  /// the row over all E experts and s_t = Σ_e p_e·coeffs[q·E + e] (coeffs G×E: the segment's per-expert weights,
  /// α·E/k·count_e/n²); dlogits[t, e] += scale·p_e·(coeffs[q·E + e] − s_t), the gradient of scale·Σ_t s_t; and
  /// *loss_sum += Σ_t s_t in row order (one double; not when null). Softmax and sums in double.
  virtual void moe_aux_loss(const T* logits, const T* coeffs, T* dlogits, double* loss_sum, long n, int E,
                            long rows_per_segment, T scale) {
    (void)logits, (void)coeffs, (void)dlogits, (void)loss_sum, (void)n, (void)E, (void)rows_per_segment, (void)scale;
    missing_moe("moe_aux_loss");
  }
  /// out row i (d) = x row rows[i], for i < count.
  virtual void gather_rows(const T* x, const int* rows, T* out, long count, int d) {
    (void)x, (void)rows, (void)out, (void)count, (void)d;
    missing_moe("gather_rows");
  }
  /// The combine: out[t] = h[t] + Σ_{s<k} gates[t,s]·y[pair_row[t,s]] (rows of d; the sum in slot order). Here
  /// and below a pair_row of -1 is a dropped pair (token dropping): no term, no row, a zero gate grad.
  virtual void moe_combine(const T* h, const T* y, const int* pair_row, const T* gates, T* out, long n, int k, int d) {
    (void)h, (void)y, (void)pair_row, (void)gates, (void)out, (void)n, (void)k, (void)d;
    missing_moe("moe_combine");
  }
  /// The combine's gradient given dout (n×d): dy[pair_row[t,s]] = gates[t,s]·dout[t], dgates[t,s] = dout[t]·y[...].
  virtual void moe_combine_backward(const T* dout, const T* y, const int* pair_row, const T* gates, T* dy, T* dgates,
                                    long n, int k, int d) {
    (void)dout, (void)y, (void)pair_row, (void)gates, (void)dy, (void)dgates, (void)n, (void)k, (void)d;
    missing_moe("moe_combine_backward");
  }
  /// dx[t] = Σ_{s<k} dpairs[pair_row[t,s]] (rows of d, in slot order): a token's grad from its k experts.
  virtual void moe_sum_pairs(const T* dpairs, const int* pair_row, T* dx, long n, int k, int d) {
    (void)dpairs, (void)pair_row, (void)dx, (void)n, (void)k, (void)d;
    missing_moe("moe_sum_pairs");
  }
  /// Copies between backend and host memory (the routing's counts, which size the all-to-alls, are the host's).
  virtual void to_host(void* dst, const void* src, std::size_t bytes) {
    (void)dst, (void)src, (void)bytes;
    missing_moe("to_host");
  }
  virtual void to_device(void* dst, const void* src, std::size_t bytes) {
    (void)dst, (void)src, (void)bytes;
    missing_moe("to_device");
  }

 private:
  [[noreturn]] static void missing(const char* kernel) {
    throw std::logic_error(std::string("this backend has no ") + kernel +
                           " kernel, which tensor parallelism needs (the cpu backend has it)");
  }
  [[noreturn]] static void missing_moe(const char* kernel) {
    throw std::logic_error(std::string("this backend has no ") + kernel +
                           " kernel, which Mixture-of-Experts models need (the cpu backend has it)");
  }
};

}  // namespace trainsim::exec
