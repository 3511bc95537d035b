// The CPU backend's GEMMs (exec/cpu/cpu_gemm.h): oneDNN's and OpenBLAS's fp32 GEMM against an fp64 loop written
// here, on every transposition, with alpha, beta and row strides wider than the matrices. Tolerance: the
// worst-case bound of any fp32 summation order, (K + 2) · 2^-24 · (|alpha| Σ_k |a_ik b_kj| + |beta c_ij|)
// (Higham, "Accuracy and Stability of Numerical Algorithms", §3.1), doubled. Then: a GEMM starts no thread (one
// GEMM thread per rank's thread), the same call gives the same bits wherever its operands lie in memory (replays
// stay deterministic under address randomisation), the calls runs_on hands to OpenBLAS run there, and
// TRAINSIM_GEMM names a library or is refused.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "cli_helpers.h"
#include "exec/cpu/cpu_gemm.h"
#include "random_inputs.h"

using namespace trainsim::exec;
using cpu_detail::GemmLibrary;

namespace {

using trainsim::testing::rnd;

struct Case {
  int M, N, K;
  bool ta, tb;
  float alpha, beta;
  int pad;  // extra elements at the end of every row of A, B and C
};

// op(A)[i][k], op(B)[k][j] of row-major storage with the given strides.
float at_a(const std::vector<float>& A, const Case& c, int lda, int i, int k) {
  return c.ta ? A[static_cast<std::size_t>(k) * lda + i] : A[static_cast<std::size_t>(i) * lda + k];
}
float at_b(const std::vector<float>& B, const Case& c, int ldb, int k, int j) {
  return c.tb ? B[static_cast<std::size_t>(j) * ldb + k] : B[static_cast<std::size_t>(k) * ldb + j];
}

void check_against_fp64(GemmLibrary lib, const Case& c) {
  INFO(cpu_detail::gemm_library_name(lib) << " " << c.M << " x " << c.N << " x " << c.K << " ta " << c.ta << " tb "
                                          << c.tb << " alpha " << c.alpha << " beta " << c.beta << " pad " << c.pad);
  const int lda = (c.ta ? c.M : c.K) + c.pad, ldb = (c.tb ? c.K : c.N) + c.pad, ldc = c.N + c.pad;
  const std::vector<float> A = rnd(static_cast<long>(c.ta ? c.K : c.M) * lda, 1),
                           B = rnd(static_cast<long>(c.tb ? c.N : c.K) * ldb, 2),
                           C0 = rnd(static_cast<long>(c.M) * ldc, 3);
  std::vector<float> C = C0;
  cpu_detail::sgemm(lib, c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
  int bad = 0;
  for (int i = 0; i < c.M; ++i) {
    for (int j = 0; j < ldc; ++j) {
      const std::size_t ij = static_cast<std::size_t>(i) * ldc + j;
      if (j >= c.N) {  // the padding of C's rows is not written
        bad += std::memcmp(&C[ij], &C0[ij], sizeof(float)) != 0;
        continue;
      }
      double ref = 0, mag = 0;
      for (int k = 0; k < c.K; ++k) {
        const double p = static_cast<double>(at_a(A, c, lda, i, k)) * at_b(B, c, ldb, k, j);
        ref += p, mag += std::abs(p);
      }
      ref = c.alpha * ref + static_cast<double>(c.beta) * C0[ij];
      const double bound = 2 * (c.K + 2) * std::ldexp(1.0, -24) * (std::abs(c.alpha) * mag + std::abs(c.beta * C0[ij]));
      bad += !(std::abs(C[ij] - ref) <= bound);
    }
  }
  CHECK(bad == 0);
}

const Case kCases[] = {
    {1, 1, 1, false, false, 1, 0, 0},       {7, 5, 3, false, true, 1, 0, 0},     {33, 17, 65, true, false, 0.5f, 1, 3},
    {64, 128, 64, false, true, 0.125f, 0, 0}, {64, 64, 128, false, false, 1, 1, 0}, {128, 64, 64, true, false, 1, 1, 0},
    {100, 48, 256, true, true, -2, 0.25f, 5}, {256, 192, 96, false, true, 1, 0, 1}, {96, 256, 300, false, false, 1, 1, 16},
    {257, 129, 511, true, false, 1, 1, 0},  {1000, 40, 70, true, false, 1, 1, 24},  // (lda 1024: runs_on's hand-over)
};

}  // namespace

TEST_CASE("exec gemm: oneDNN and OpenBLAS within the fp32 summation bound of an fp64 loop") {
  for (GemmLibrary lib : {GemmLibrary::onednn, GemmLibrary::openblas})
    for (const Case& c : kCases) check_against_fp64(lib, c);
}

TEST_CASE("exec gemm: the same call gives the same bits wherever its operands lie") {
  // A replay allocates its buffers where the allocator says, which differs from run to run; the GEMM's sums must
  // not depend on the operands' alignment.
  const int M = 64, N = 96, K = 200;
  const std::vector<float> A = rnd(M * K, 4), B = rnd(N * K, 5);
  for (GemmLibrary lib : {GemmLibrary::onednn, GemmLibrary::openblas}) {
    INFO(cpu_detail::gemm_library_name(lib));
    std::vector<float> first;
    for (int shift = 0; shift < 16; ++shift) {
      std::vector<float> a(A.size() + 16), b(B.size() + 16), c(static_cast<std::size_t>(M) * N + 16);
      std::copy(A.begin(), A.end(), a.begin() + shift);
      std::copy(B.begin(), B.end(), b.begin() + (15 - shift));
      cpu_detail::sgemm(lib, false, true, M, N, K, 1, a.data() + shift, K, b.data() + (15 - shift), K, 0,
                        c.data() + shift, N);
      std::vector<float> out(c.begin() + shift, c.begin() + shift + M * N);
      if (shift == 0) first = out;
      CHECK(std::memcmp(out.data(), first.data(), first.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("exec gemm: under onednn, a transposed A with lda >= 1024, a multiple of 512, runs on OpenBLAS") {
  CHECK(cpu_detail::runs_on(GemmLibrary::onednn, true, 1536) == GemmLibrary::openblas);
  CHECK(cpu_detail::runs_on(GemmLibrary::onednn, true, 1024) == GemmLibrary::openblas);
  CHECK(cpu_detail::runs_on(GemmLibrary::onednn, true, 512) == GemmLibrary::onednn);
  CHECK(cpu_detail::runs_on(GemmLibrary::onednn, true, 768) == GemmLibrary::onednn);
  CHECK(cpu_detail::runs_on(GemmLibrary::onednn, false, 1536) == GemmLibrary::onednn);
  CHECK(cpu_detail::runs_on(GemmLibrary::openblas, true, 700) == GemmLibrary::openblas);
  // and the call really goes there: OpenBLAS's bits, not oneDNN's (the two block K differently: at K = 1024 most
  // elements of the two libraries' results differ in their last bits; at K <= 512 they agree, so K is 1024)
  const int M = 1024, N = 64, K = 1024;
  const std::vector<float> A = rnd(K * M, 8), B = rnd(K * N, 9);
  std::vector<float> c1(static_cast<std::size_t>(M) * N), c2(c1.size());
  cpu_detail::sgemm(GemmLibrary::onednn, true, false, M, N, K, 1, A.data(), M, B.data(), N, 0, c1.data(), N);
  cpu_detail::sgemm(GemmLibrary::openblas, true, false, M, N, K, 1, A.data(), M, B.data(), N, 0, c2.data(), N);
  CHECK(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)) == 0);
}

namespace {
long threads_of_this_process() {
  long n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}
}  // namespace

TEST_CASE("exec gemm: a GEMM runs on the calling thread and starts no other") {
  // oneDNN on libgomp would otherwise start a team of one thread per core at a thread's first GEMM, kept until
  // that thread ends: counted from inside the calling thread, on a machine of two or more cores, the count after
  // the GEMM would be higher (on one core this cannot fail).
  const std::vector<float> A = rnd(512 * 512, 6), B = rnd(512 * 512, 7);
  std::vector<float> C(512 * 512);
  for (GemmLibrary lib : {GemmLibrary::onednn, GemmLibrary::openblas}) {
    INFO(cpu_detail::gemm_library_name(lib) << ", " << std::thread::hardware_concurrency() << " cores");
    std::thread warm([&] { cpu_detail::sgemm(lib, false, false, 8, 8, 8, 1, A.data(), 8, B.data(), 8, 0, C.data(), 8); });
    warm.join();  // a library that starts a pool of its own when first called has started it now
    long before = 0, during = 0;
    std::thread rank([&] {
      before = threads_of_this_process();
      cpu_detail::sgemm(lib, false, false, 512, 512, 512, 1, A.data(), 512, B.data(), 512, 0, C.data(), 512);
      during = threads_of_this_process();
    });
    rank.join();
    CHECK(during == before);
  }
}

TEST_CASE("exec gemm: TRAINSIM_GEMM names a library, and another value is refused with its name") {
  using namespace trainsim::testing;
  CHECK(std::string(cpu_detail::gemm_library_name(GemmLibrary::onednn)) == "onednn");
  const auto bad = run_shell("TRAINSIM_GEMM=mkl " + std::string(TRAINSIM_BINARY) + " replay basic --model tiny --steps 1 2>&1");
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.out, "TRAINSIM_GEMM=mkl: not one of onednn, openblas"));
  for (const char* lib : {"onednn", "openblas"}) {
    const auto ok = run_shell(std::string("TRAINSIM_GEMM=") + lib + " " + TRAINSIM_BINARY +
                              " replay basic --model tiny --steps 1 2>&1");
    INFO(lib << ": " << ok.out);
    CHECK(ok.exit_code == 0);
  }
}
