// The CPU backend's kernels: GEMMs through exec/cpu/cpu_gemm.h (fp32 oneDNN, fp64 OpenBLAS; one GEMM thread per
// calling thread, so each rank's thread runs its own single-threaded GEMMs and results do not depend on the
// number of cores); in fp32 the
// element-wise kernels are exec/cpu/simd.h's vectorised ones (the same bits on every CPU), in fp64 plain loops;
// attention by blocks of queries (cpu_attention.cpp). Instantiated for float (training) and double (the
// gradient check).
#pragma once

#include "exec/kernels.h"

namespace trainsim::exec {

/// Queries per block of CpuKernels::attention_forward/backward.
inline constexpr int kAttentionBlock = 64;

template <typename T>
class CpuKernels : public Kernels<T> {
 public:
  /// Reads TRAINSIM_GEMM for fp32 (exec/cpu/cpu_gemm.h): throws std::runtime_error if it names no library.
  CpuKernels();

  void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb, T beta,
            T* C, int ldc) override;
  void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, long stride_a,
                    const T* B, int ldb, long stride_b, T beta, T* C, int ldc, long stride_c, int batch) override;
  void embedding_forward(const int* tokens, const T* table, T* out, long n, int d) override;
  void embedding_backward(const int* tokens, const T* dout, T* dtable, long n, int d) override;
  void rmsnorm_forward(const T* x, const T* g, T* y, T* rstd, long n, int d, T eps) override;
  void rmsnorm_backward_input(const T* dy, const T* x, const T* g, const T* rstd, T* dx, long n, int d) override;
  void rmsnorm_backward(const T* dy, const T* x, const T* g, const T* rstd, const T* res, T* dx, T* dg, long n,
                        int d) override;
  void rmsnorm_backward_input_onto(const T* dy, const T* x, const T* g, const T* rstd, const T* res, T* dx, long n,
                                   int d) override;
  void rmsnorm_backward_weight(const T* dy, const T* x, const T* rstd, T* dg, long n, int d) override;
  void split_heads_rope(const T* qkv, T* q, T* k, T* v, int B, int Tn, int H, int hd, const T* cos,
                        const T* sin) override;
  void merge_heads_rope_backward(const T* dq, const T* dk, const T* dv, T* dqkv, int B, int Tn, int H, int hd,
                                 const T* cos, const T* sin) override;
  void merge_heads(const T* o, T* out, int B, int Tn, int H, int hd) override;
  void split_heads(const T* x, T* o, int B, int Tn, int H, int hd) override;
  void causal_softmax_forward(T* s, int count, int Tn, T scale) override;
  void causal_softmax_backward(const T* p, T* dp, int count, int Tn, T scale) override;
  /// One query row block's scores at a time: scratch Tn × Tn for the backward (one head's dS), none forward.
  long attention_scratch_elements(int B, int Tn, int H, int hd, bool backward) const override;
  /// By blocks of kAttentionBlock queries, each against the keys up to its last query only (the causal mask
  /// skips the blocks above the diagonal: about half the FLOPs of the full T × T product at long sequences);
  /// probs above the diagonal blocks are left unset. out is written in its merged layout directly.
  void attention_forward(const T* q, const T* k, const T* v, T* probs, T* out, T* scratch, int B, int Tn, int H,
                         int hd, T scale) override;
  /// The same blocks backward; dout is read in its merged layout (no split copy).
  void attention_backward(const T* q, const T* k, const T* v, const T* probs, const T* dout, T* dq, T* dk, T* dv,
                          T* scratch, int B, int Tn, int H, int hd, T scale) override;
  void swiglu_forward(const T* gu, T* h, long n, int f) override;
  void swiglu_backward(const T* gu, const T* dh, T* dgu, long n, int f) override;
  void add(const T* a, const T* b, T* out, long n) override;
  void copy(const T* src, T* dst, long n) override;
  void fill(T* x, T value, long n) override;
  void cross_entropy(const T* logits, const int* targets, T* dlogits, double* loss_sums, long n, int V,
                     long rows_per_segment, T scale) override;
  void sum_squares(const T* x, long n, double* acc) override;
  void adamw(const T* w, const T* g, const T* m, const T* v, T* w_out, T* m_out, T* v_out, long n, const AdamWStep& step,
             const double* grad_norm_sq, float max_norm) override;
  void embedding_forward_range(const int* tokens, const T* table, T* out, long n, int d, int lo, int rows) override;
  void embedding_backward_range(const int* tokens, const T* dout, T* dtable, long n, int d, int lo, int rows) override;
  void row_max(const T* x, T* row_max, long n, int V) override;
  void vocab_parallel_ce_stats(const T* logits, const int* targets, const T* maxes, int k, double* stats, long n, int V,
                               int lo) override;
  void vocab_parallel_ce_finish(const T* logits, const int* targets, const T* maxes, int k, const double* stats,
                                T* dlogits, double* loss_sums, long n, int V, int lo, long rows_per_segment,
                                T scale) override;
  void moe_topk(const T* logits, int* idx, T* gates, long n, int E, int k) override;
  void moe_topk_backward(const int* idx, const T* gates, const T* dgates, T* dlogits, long n, int E, int k) override;
  void moe_aux_loss(const T* logits, const T* coeffs, T* dlogits, double* loss_sum, long n, int E, long rows_per_segment,
                    T scale) override;
  void gather_rows(const T* x, const int* rows, T* out, long count, int d) override;
  void moe_combine(const T* h, const T* y, const int* pair_row, const T* gates, T* out, long n, int k, int d) override;
  void moe_combine_backward(const T* dout, const T* y, const int* pair_row, const T* gates, T* dy, T* dgates, long n,
                            int k, int d) override;
  void moe_sum_pairs(const T* dpairs, const int* pair_row, T* dx, long n, int k, int d) override;
  void to_host(void* dst, const void* src, std::size_t bytes) override;
  void to_device(void* dst, const void* src, std::size_t bytes) override;
};

extern template class CpuKernels<float>;
extern template class CpuKernels<double>;

}  // namespace trainsim::exec
