#include "exec/cpu/cpu_gemm.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

// OpenBLAS (libopenblas-dev): the fp64 GEMMs, the fp32 ones runs_on hands over, and every fp32 one under
// TRAINSIM_GEMM=openblas. Its cblas.h declares openblas_set_num_threads.
#include <cblas.h>
// oneDNN (libdnnl-dev): the fp32 GEMMs. Debian builds it on OpenMP (libgomp), which sizes each GEMM's team from
// the calling thread's omp_get_max_threads(): set to 1 on each thread before its first oneDNN call (omp.h).
#include <dnnl.h>
#include <omp.h>

namespace trainsim::exec::cpu_detail {

namespace {

GemmLibrary choose() {
  const char* want = std::getenv("TRAINSIM_GEMM");
  if (want == nullptr || *want == '\0' || std::strcmp(want, "onednn") == 0) return GemmLibrary::onednn;
  if (std::strcmp(want, "openblas") == 0) return GemmLibrary::openblas;
  throw std::runtime_error(std::string("TRAINSIM_GEMM=") + want + ": not one of onednn, openblas");
}

// OpenBLAS's thread count is process-wide: one thread, set once. (Its own pool thread then sleeps, so two ranks
// use two cores, not four.)
void openblas_one_thread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// libgomp keeps the thread count per calling thread: one, set on each thread once.
void onednn_one_thread() {
  thread_local bool set = false;
  if (!set) {
    omp_set_num_threads(1);
    set = true;
  }
}

CBLAS_TRANSPOSE cblas_trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

}  // namespace

GemmLibrary gemm_library() {
  static const GemmLibrary chosen = choose();
  return chosen;
}

const char* gemm_library_name(GemmLibrary library) {
  return library == GemmLibrary::onednn ? "onednn" : "openblas";
}

GemmLibrary runs_on(GemmLibrary library, bool trans_a, int lda) {
  if (library == GemmLibrary::onednn && trans_a && lda >= 1024 && lda % 512 == 0) return GemmLibrary::openblas;
  return library;
}

void prepare_gemm() {
  static std::once_flag once;
  std::call_once(once, [] {
    openblas_one_thread();
    const float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1};
    float c[4];
    for (bool ta : {false, true})
      for (bool tb : {false, true}) sgemm(GemmLibrary::onednn, ta, tb, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  });
}

void sgemm(GemmLibrary library, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  if (runs_on(library, trans_a, lda) == GemmLibrary::openblas) {
    openblas_one_thread();
    cblas_sgemm(CblasRowMajor, cblas_trans(trans_a), cblas_trans(trans_b), M, N, K, alpha, A, lda, B, ldb, beta, C,
                ldc);
    return;
  }
  onednn_one_thread();
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                                          beta, C, ldc);
  if (status != dnnl_success)
    throw std::runtime_error("oneDNN sgemm refused " + std::to_string(M) + " x " + std::to_string(N) + " x " +
                             std::to_string(K) + (trans_a ? " (A transposed)" : "") +
                             (trans_b ? " (B transposed)" : "") + ": status " + std::to_string(status));
}

void blas_gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
               const double* B, int ldb, double beta, double* C, int ldc) {
  openblas_one_thread();
  cblas_dgemm(CblasRowMajor, cblas_trans(trans_a), cblas_trans(trans_b), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace trainsim::exec::cpu_detail
