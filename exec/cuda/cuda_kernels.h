// The CUDA backend's kernels (issue 8): Kernels<float> with GEMMs through cuBLAS and the rest as CUDA kernels
// written in exec/cuda/cuda_kernels.cu, mirroring exec/cpu/cpu_kernels.cpp's arithmetic (exec/math.h's
// per-element functions are compiled for the device). Every call is enqueued on the stream the object was
// made for and returns at once. fp32 only (bf16 is to come).
//
// Determinism: no atomics. Reductions that the CPU does in row order and that feed sums across rows
// (embedding backward, RMSNorm's weight grad, the per-segment loss sums) run in the same order on the GPU;
// reductions within a row (RMSNorm, softmax, cross-entropy) and sum_squares use a fixed tree, so results are
// the same in every run but differ from the CPU's in the last bits.
//
// NOT YET RUN ON A GPU: this compiles and links; its tests (tests/gpu/) skip where no GPU is present.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "exec/kernels.h"

typedef struct cublasContext* cublasHandle_t;

namespace trainsim::exec::cuda {

class CudaKernels final : public Kernels<float> {
 public:
  /// Kernels enqueued on `stream` (of the current device), with a cuBLAS handle of their own.
  explicit CudaKernels(cudaStream_t stream);
  ~CudaKernels() override;
  CudaKernels(const CudaKernels&) = delete;
  CudaKernels& operator=(const CudaKernels&) = delete;
  cudaStream_t stream() const { return stream_; }

  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
            int ldb, float beta, float* C, int ldc) override;
  void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                    long stride_a, const float* B, int ldb, long stride_b, float beta, float* C, int ldc, long stride_c,
                    int batch) override;
  void embedding_forward(const int* tokens, const float* table, float* out, long n, int d) override;
  void embedding_backward(const int* tokens, const float* dout, float* dtable, long n, int d) override;
  void rmsnorm_forward(const float* x, const float* g, float* y, float* rstd, long n, int d, float eps) override;
  void rmsnorm_backward_input(const float* dy, const float* x, const float* g, const float* rstd, float* dx, long n,
                              int d) override;
  void rmsnorm_backward_weight(const float* dy, const float* x, const float* rstd, float* dg, long n, int d) override;
  void split_heads_rope(const float* qkv, float* q, float* k, float* v, int B, int Tn, int H, int hd, const float* cos,
                        const float* sin) override;
  void merge_heads_rope_backward(const float* dq, const float* dk, const float* dv, float* dqkv, int B, int Tn, int H,
                                 int hd, const float* cos, const float* sin) override;
  void merge_heads(const float* o, float* out, int B, int Tn, int H, int hd) override;
  void split_heads(const float* x, float* o, int B, int Tn, int H, int hd) override;
  void causal_softmax_forward(float* s, int count, int Tn, float scale) override;
  void causal_softmax_backward(const float* p, float* dp, int count, int Tn, float scale) override;
  void swiglu_forward(const float* gu, float* h, long n, int f) override;
  void swiglu_backward(const float* gu, const float* dh, float* dgu, long n, int f) override;
  void add(const float* a, const float* b, float* out, long n) override;
  void copy(const float* src, float* dst, long n) override;
  void fill(float* x, float value, long n) override;
  void cross_entropy(const float* logits, const int* targets, float* dlogits, double* loss_sums, long n, int V,
                     long rows_per_segment, float scale) override;
  void sum_squares(const float* x, long n, double* acc) override;
  void adamw(const float* w, const float* g, const float* m, const float* v, float* w_out, float* m_out, float* v_out,
             long n, const AdamWStep& step, const double* grad_norm_sq, float max_norm) override;
  // Tensor parallelism (Megatron-LM's vocabulary-parallel embedding and cross-entropy; exec/kernels.h): the
  // embedding's and the per-row reductions' orders as above.
  void embedding_forward_range(const int* tokens, const float* table, float* out, long n, int d, int lo,
                               int rows) override;
  void embedding_backward_range(const int* tokens, const float* dout, float* dtable, long n, int d, int lo,
                                int rows) override;
  void row_max(const float* x, float* row_max, long n, int V) override;
  void vocab_parallel_ce_stats(const float* logits, const int* targets, const float* maxes, int k, double* stats, long n,
                               int V, int lo) override;
  void vocab_parallel_ce_finish(const float* logits, const int* targets, const float* maxes, int k, const double* stats,
                                float* dlogits, double* loss_sums, long n, int V, int lo, long rows_per_segment,
                                float scale) override;
  // Mixture of Experts (exec/moe.h): one thread per token (top-k, its gradient, the gates' dot products) or per
  // element, each sum in slot order or element order as the CPU's, so the same bits as exec/cpu's.
  void moe_topk(const float* logits, int* idx, float* gates, long n, int E, int k) override;
  void moe_topk_backward(const int* idx, const float* gates, const float* dgates, float* dlogits, long n, int E,
                         int k) override;
  void moe_aux_loss(const float* logits, const float* coeffs, float* dlogits, double* loss_sum, long n, int E,
                    long rows_per_segment, float scale) override;
  void gather_rows(const float* x, const int* rows, float* out, long count, int d) override;
  void moe_combine(const float* h, const float* y, const int* pair_row, const float* gates, float* out, long n, int k,
                   int d) override;
  void moe_combine_backward(const float* dout, const float* y, const int* pair_row, const float* gates, float* dy,
                            float* dgates, long n, int k, int d) override;
  void moe_sum_pairs(const float* dpairs, const int* pair_row, float* dx, long n, int k, int d) override;
  /// Synchronous on the object's stream (the host buffer is the caller's once it returns).
  void to_host(void* dst, const void* src, std::size_t bytes) override;
  void to_device(void* dst, const void* src, std::size_t bytes) override;

 private:
  cudaStream_t stream_;
  cublasHandle_t blas_ = nullptr;
};

/// out[e] = Σ_j inputs[j][offset + e], e < count, summed in member order j = 0, 1, ... (as the CPU
/// communicator does), on `stream`. `inputs` are device pointers (float, or double when `is_double`).
void sum_inputs(const void* const* inputs, int k, std::size_t offset, std::size_t count, void* out, bool is_double,
                cudaStream_t stream);

}  // namespace trainsim::exec::cuda
