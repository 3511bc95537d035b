// The CPU backend's GEMMs, row-major: C[M×N] = alpha·op(A)·op(B) + beta·C, op(X) = X or Xᵀ (trans flags), leading
// dimensions in elements. fp32 (training) runs oneDNN's sgemm by default (but the calls runs_on hands to
// OpenBLAS), fp64 (the gradient check) OpenBLAS's dgemm. Every call runs on the calling thread alone (one GEMM
// thread per rank's stream thread), so results do not depend on how many cores the machine has, and a given
// machine and library give the same bits every run.
#pragma once

namespace trainsim::exec::cpu_detail {

/// Which library runs the fp32 GEMMs.
/// - onednn: oneDNN's dnnl_sgemm (libdnnl-dev; JIT-compiled AVX-512/AVX2 kernels). The default: at the `small`
///   preset's shapes it ran 1.1-1.7x OpenBLAS's rate on one core (bench/README.md, "oneDNN's sgemm"). One kind of
///   call still goes to OpenBLAS under it (runs_on): a transposed A whose leading dimension is 1024 elements or
///   more and a multiple of 512, where oneDNN 2.6 packs A slowly (bench/README.md, issue 23's third round).
/// - openblas: OpenBLAS's cblas_sgemm (libopenblas-dev), the backend's GEMM before; kept for A/B runs.
enum class GemmLibrary { onednn, openblas };

/// The library the fp32 GEMMs use: the environment variable TRAINSIM_GEMM=onednn|openblas, read once per
/// process; oneDNN when it is unset or empty. Throws std::runtime_error naming the variable and its value when it
/// is neither.
GemmLibrary gemm_library();
/// "onednn" or "openblas".
const char* gemm_library_name(GemmLibrary library);

/// The library that runs an fp32 GEMM under `library`: `library`, except that onednn hands OpenBLAS the calls with
/// a transposed A (the weight gradients, dW = dYᵀ·X) whose leading dimension `lda` is 1024 elements or more and a
/// multiple of 512. oneDNN 2.6's sgemm ran those at 71-77 GFLOP/s against OpenBLAS's 86-99 at the `small` preset's
/// gate/up weight gradient (1536 x 256 x 1024, lda 1536), and fell behind OpenBLAS at lda 1024, 2048 and 3072 too,
/// not at 256, 512, 768 or 1280 (one core; bench/README.md). It depends on the shape alone, so a given call gives
/// the same bits every run.
GemmLibrary runs_on(GemmLibrary library, bool trans_a, int lda);

/// Sets up the GEMM libraries' process-wide state on the calling thread: OpenBLAS's thread count, and oneDNN's
/// JIT kernels, which its first sgemm generates in executable memory it maps and does not check (under a memory
/// limit, a first call that meets an exhausted address space crashes inside oneDNN). Called once before the
/// ranks' threads start, while memory is still there; later calls do nothing. Throws std::runtime_error when
/// oneDNN refuses the tiny GEMMs it runs.
void prepare_gemm();

/// fp32 GEMM through runs_on(`library`, trans_a, lda) on the calling thread alone. M, N, K >= 1; lda, ldb, ldc
/// the row strides of A (M×K, or K×M when trans_a), B (K×N, or N×K when trans_b) and C. Throws
/// std::runtime_error if the library refuses the call (it names the shape).
void sgemm(GemmLibrary library, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc);

/// fp32 GEMM through gemm_library().
inline void blas_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
  sgemm(gemm_library(), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
/// fp64 GEMM through OpenBLAS (oneDNN has none), on the calling thread alone.
void blas_gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
               const double* B, int ldb, double beta, double* C, int ldc);

}  // namespace trainsim::exec::cpu_detail
