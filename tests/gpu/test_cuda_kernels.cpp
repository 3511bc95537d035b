// Each CUDA kernel against the CPU kernel (exec/cpu/cpu_kernels.cpp) on random inputs. Tolerances: element
// -wise kernels that share exec/math.h and do no sums (embedding forward, heads, RoPE, SwiGLU, add, AdamW)
// are compared at 1e-6 relative (same expressions, --fmad=false; only expf/sqrtf implementations may
// differ by an ulp or two); kernels whose sums run in the CPU's order (embedding backward, RMSNorm weight
// grad) at 1e-6; row reductions in a tree (RMSNorm, softmax, cross-entropy, GEMMs through cuBLAS) at 1e-5;
// the double sums at 1e-12. The tensor-parallel kernels (vocabulary-parallel embedding and cross-entropy) by
// the same rules: the embedding's lookup and row maxima exactly, its backward (rows in the CPU's order) at 1e-6,
// the cross-entropy's gradient at 1e-6 and its double sums at 1e-12; put together over every vocabulary slice,
// they equal the whole-vocabulary cross-entropy of the CPU (1e-6 on the gradient, 1e-9 on the loss).
// NOT YET RUN ON A GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "exec/cpu/cpu_kernels.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_kernels.h"
#include "../random_inputs.h"

using namespace trainsim::exec;

namespace {

struct Gpu {
  cudaStream_t s = nullptr;
  std::vector<void*> bufs;
  Gpu() { TS_CUDA(cudaStreamCreate(&s)); }
  ~Gpu() {
    for (void* p : bufs) cudaFree(p);
    cudaStreamDestroy(s);
  }
  template <typename T>
  T* up(const std::vector<T>& h) {
    void* p = nullptr;
    TS_CUDA(cudaMalloc(&p, std::max<std::size_t>(1, h.size() * sizeof(T))));
    bufs.push_back(p);
    if (!h.empty()) TS_CUDA(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return static_cast<T*>(p);
  }
  template <typename T>
  std::vector<T> down(const T* p, std::size_t n) {
    TS_CUDA(cudaStreamSynchronize(s));
    std::vector<T> h(n);
    if (n) TS_CUDA(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

using trainsim::testing::rnd;

template <typename T>
void close(const std::vector<T>& a, const std::vector<T>& b, double rel, const char* what) {
  INFO(what);
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    worst = std::max(worst, d / std::max(1.0, std::abs(static_cast<double>(b[i]))));
  }
  CHECK(worst <= rel);
}

}  // namespace

TEST_CASE("cuda kernels: GEMMs equal OpenBLAS's in every transposition") {
  Gpu g;
  cuda::CudaKernels k(g.s);
  CpuKernels<float> c;
  const int M = 37, N = 29, K = 53;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      auto A = rnd(M * K, 1), B = rnd(K * N, 2), C = rnd(M * N, 3);
      const int lda = ta ? M : K, ldb = tb ? K : N;
      float *dA = g.up(A), *dB = g.up(B), *dC = g.up(C);
      k.gemm(ta, tb, M, N, K, 0.5f, dA, lda, dB, ldb, 0.25f, dC, N);
      c.gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, C.data(), N);
      close(g.down(dC, C.size()), C, 1e-5, "gemm");
      auto C2 = rnd(3 * M * N, 4);
      auto A2 = rnd(3 * M * K, 5), B2 = rnd(3 * K * N, 6);
      float *eA = g.up(A2), *eB = g.up(B2), *eC = g.up(C2);
      k.gemm_batched(ta, tb, M, N, K, 1.0f, eA, lda, M * K, eB, ldb, K * N, 0.0f, eC, N, M * N, 3);
      c.gemm_batched(ta, tb, M, N, K, 1.0f, A2.data(), lda, M * K, B2.data(), ldb, K * N, 0.0f, C2.data(), N, M * N, 3);
      close(g.down(eC, C2.size()), C2, 1e-5, "gemm_batched");
    }
}

TEST_CASE("cuda kernels: embedding, RMSNorm, heads with RoPE, softmax, SwiGLU, element-wise") {
  Gpu g;
  cuda::CudaKernels k(g.s);
  CpuKernels<float> c;
  const int B = 2, T = 9, H = 3, hd = 8, d = H * hd, V = 50, f = 40;
  const long n = B * T;
  std::vector<int> tok(n);
  for (long i = 0; i < n; ++i) tok[i] = static_cast<int>((i * 7) % 5);  // repeated tokens
  auto table = rnd(V * d, 10);
  {
    std::vector<float> out(n * d);
    float* o = g.up(out);
    k.embedding_forward(g.up(tok), g.up(table), o, n, d);
    c.embedding_forward(tok.data(), table.data(), out.data(), n, d);
    close(g.down(o, out.size()), out, 0, "embedding_forward");
    auto dout = rnd(n * d, 11), dt = rnd(V * d, 12);
    float* ddt = g.up(dt);
    k.embedding_backward(g.up(tok), g.up(dout), ddt, n, d);
    c.embedding_backward(tok.data(), dout.data(), dt.data(), n, d);
    close(g.down(ddt, dt.size()), dt, 1e-6, "embedding_backward");
  }
  {
    auto x = rnd(n * d, 20), gg = rnd(d, 21, 0.5f, 1.5f), dy = rnd(n * d, 22), dx = rnd(n * d, 23);
    std::vector<float> y(n * d), rs(n), dgain(d);
    float *dy_ = g.up(y), *drs = g.up(rs), *ddx = g.up(dx), *ddg = g.up(dgain);
    const float *dxx = g.up(x), *dgg = g.up(gg), *ddy = g.up(dy);
    k.rmsnorm_forward(dxx, dgg, dy_, drs, n, d, 1e-5f);
    c.rmsnorm_forward(x.data(), gg.data(), y.data(), rs.data(), n, d, 1e-5f);
    close(g.down(dy_, y.size()), y, 1e-5, "rmsnorm_forward");
    close(g.down(drs, rs.size()), rs, 1e-5, "rmsnorm rstd");
    k.rmsnorm_backward_input(ddy, dxx, dgg, drs, ddx, n, d);
    c.rmsnorm_backward_input(dy.data(), x.data(), gg.data(), rs.data(), dx.data(), n, d);
    close(g.down(ddx, dx.size()), dx, 1e-5, "rmsnorm_backward_input");
    k.rmsnorm_backward_weight(ddy, dxx, drs, ddg, n, d);
    c.rmsnorm_backward_weight(dy.data(), x.data(), rs.data(), dgain.data(), n, d);
    close(g.down(ddg, dgain.size()), dgain, 1e-5, "rmsnorm_backward_weight");
  }
  {
    auto qkv = rnd(n * 3 * d, 30), cs = rnd(T * hd / 2, 31), sn = rnd(T * hd / 2, 32);
    std::vector<float> q(n * d), kk(n * d), v(n * d), back(n * 3 * d), merged(n * d), split(n * d);
    float *dq = g.up(q), *dk = g.up(kk), *dv = g.up(v), *dback = g.up(back), *dm = g.up(merged), *ds = g.up(split);
    const float *dcs = g.up(cs), *dsn = g.up(sn);
    k.split_heads_rope(g.up(qkv), dq, dk, dv, B, T, H, hd, dcs, dsn);
    c.split_heads_rope(qkv.data(), q.data(), kk.data(), v.data(), B, T, H, hd, cs.data(), sn.data());
    close(g.down(dq, q.size()), q, 1e-6, "rope q");
    close(g.down(dk, kk.size()), kk, 1e-6, "rope k");
    close(g.down(dv, v.size()), v, 0, "v");
    k.merge_heads_rope_backward(dq, dk, dv, dback, B, T, H, hd, dcs, dsn);
    c.merge_heads_rope_backward(q.data(), kk.data(), v.data(), back.data(), B, T, H, hd, cs.data(), sn.data());
    close(g.down(dback, back.size()), back, 1e-6, "merge_heads_rope_backward");
    k.merge_heads(dq, dm, B, T, H, hd);
    c.merge_heads(q.data(), merged.data(), B, T, H, hd);
    close(g.down(dm, merged.size()), merged, 0, "merge_heads");
    k.split_heads(dm, ds, B, T, H, hd);
    c.split_heads(merged.data(), split.data(), B, T, H, hd);
    close(g.down(ds, split.size()), split, 0, "split_heads");
  }
  {
    const int count = 4, Tn = 300;  // rows longer than a block
    auto s = rnd(count * Tn * Tn, 40, -4, 4), dp = rnd(count * Tn * Tn, 41);
    float *ds = g.up(s), *ddp = g.up(dp);
    k.causal_softmax_forward(ds, count, Tn, 0.35f);
    c.causal_softmax_forward(s.data(), count, Tn, 0.35f);
    close(g.down(ds, s.size()), s, 1e-5, "causal_softmax_forward");
    k.causal_softmax_backward(ds, ddp, count, Tn, 0.35f);
    c.causal_softmax_backward(s.data(), dp.data(), count, Tn, 0.35f);
    close(g.down(ddp, dp.size()), dp, 1e-5, "causal_softmax_backward");
  }
  {
    auto gu = rnd(n * 2 * f, 50, -3, 3), dh = rnd(n * f, 51);
    std::vector<float> h(n * f), dgu(n * 2 * f);
    float *dhh = g.up(h), *ddgu = g.up(dgu);
    const float* dgu_in = g.up(gu);
    k.swiglu_forward(dgu_in, dhh, n, f);
    c.swiglu_forward(gu.data(), h.data(), n, f);
    close(g.down(dhh, h.size()), h, 1e-6, "swiglu_forward");
    k.swiglu_backward(dgu_in, g.up(dh), ddgu, n, f);
    c.swiglu_backward(gu.data(), dh.data(), dgu.data(), n, f);
    close(g.down(ddgu, dgu.size()), dgu, 1e-6, "swiglu_backward");
  }
  {
    auto a = rnd(1000, 60), b = rnd(1000, 61);
    std::vector<float> out(1000);
    float* o = g.up(out);
    k.add(g.up(a), g.up(b), o, 1000);
    c.add(a.data(), b.data(), out.data(), 1000);
    close(g.down(o, 1000), out, 0, "add");
    k.fill(o, 2.5f, 1000);
    CHECK(g.down(o, 1000) == std::vector<float>(1000, 2.5f));
    k.copy(g.up(a), o, 1000);
    CHECK(g.down(o, 1000) == a);
  }
}

TEST_CASE("cuda kernels: cross-entropy, sum of squares and AdamW") {
  Gpu g;
  cuda::CudaKernels k(g.s);
  CpuKernels<float> c;
  const long n = 37;
  const int V = 300;
  auto logits = rnd(n * V, 70, -5, 5);
  std::vector<int> tgt(n);
  for (long i = 0; i < n; ++i) tgt[i] = static_cast<int>((i * 31) % V);
  std::vector<double> sums = {0.5, 1.5, 2.5, 3.5};
  float* dl = g.up(logits);
  double* dsums = g.up(sums);
  k.cross_entropy(dl, g.up(tgt), dl, dsums, n, V, 10, 0.125f);  // in place, 4 segments
  c.cross_entropy(logits.data(), tgt.data(), logits.data(), sums.data(), n, V, 10, 0.125f);
  close(g.down(dl, logits.size()), logits, 1e-6, "cross_entropy dlogits");
  close(g.down(dsums, sums.size()), sums, 1e-12, "cross_entropy loss sums");

  auto x = rnd(100000, 80);
  std::vector<double> acc = {1.0};
  double* dacc = g.up(acc);
  k.sum_squares(g.up(x), 100000, dacc);
  c.sum_squares(x.data(), 100000, acc.data());
  close(g.down(dacc, 1), acc, 1e-12, "sum_squares");

  const long m = 5000;
  auto w = rnd(m, 90), gr = rnd(m, 91), mo = rnd(m, 92), v = rnd(m, 93, 0, 1);
  AdamWStep st;
  st.lr = 1e-3f, st.weight_decay = 0.1f, st.bias_correction1 = 0.19f, st.bias_correction2_sqrt = 0.3f;
  std::vector<double> norm = {40.0};
  for (bool clip : {false, true}) {
    float *dw = g.up(w), *dm = g.up(mo), *dv = g.up(v);
    k.adamw(dw, g.up(gr), dm, dv, dw, dm, dv, m, st, clip ? g.up(norm) : nullptr, 1.0f);
    auto cw = w, cm = mo, cv = v;
    c.adamw(cw.data(), gr.data(), cm.data(), cv.data(), cw.data(), cm.data(), cv.data(), m, st,
            clip ? norm.data() : nullptr, 1.0f);
    close(g.down(dw, m), cw, 1e-6, "adamw w");
    close(g.down(dm, m), cm, 1e-6, "adamw m");
    close(g.down(dv, m), cv, 1e-6, "adamw v");
  }
}

TEST_CASE("cuda kernels: the vocabulary-parallel embedding and cross-entropy (tensor parallelism)") {
  Gpu g;
  cuda::CudaKernels k(g.s);
  CpuKernels<float> c;
  const long n = 37;
  const int d = 24, V = 300, t = 3, Vs = V / t;  // three vocabulary slices of 100
  std::vector<int> tok(n), tgt(n);
  for (long i = 0; i < n; ++i) tok[i] = static_cast<int>((i * 13) % V), tgt[i] = static_cast<int>((i * 31) % V);
  const int* dtok = g.up(tok);
  const int* dtgt = g.up(tgt);
  {  // slice 1 of the embedding: token ids [100, 200)
    auto table = rnd(static_cast<std::size_t>(Vs) * d, 100);
    std::vector<float> out(n * d, 7.0f);
    float* o = g.up(out);
    k.embedding_forward_range(dtok, g.up(table), o, n, d, Vs, Vs);
    c.embedding_forward_range(tok.data(), table.data(), out.data(), n, d, Vs, Vs);
    close(g.down(o, out.size()), out, 0, "embedding_forward_range");
    auto dout = rnd(n * d, 101), dt = rnd(static_cast<std::size_t>(Vs) * d, 102);
    float* ddt = g.up(dt);
    k.embedding_backward_range(dtok, g.up(dout), ddt, n, d, Vs, Vs);
    c.embedding_backward_range(tok.data(), dout.data(), dt.data(), n, d, Vs, Vs);
    close(g.down(ddt, dt.size()), dt, 1e-6, "embedding_backward_range");
  }
  // The whole logits, and each slice's columns [j·Vs, (j+1)·Vs) as that slice holds them (n × Vs).
  auto whole = rnd(n * V, 110, -5, 5);
  std::vector<std::vector<float>> slice(t, std::vector<float>(n * Vs));
  for (int j = 0; j < t; ++j)
    for (long i = 0; i < n; ++i)
      std::copy_n(whole.begin() + i * V + j * Vs, Vs, slice[j].begin() + i * Vs);
  // Each slice's row maxima (row_max), gathered member-major as the TP group's all-gather returns them.
  std::vector<float> maxes(t * n);
  std::vector<float*> dslice(t);
  for (int j = 0; j < t; ++j) {
    dslice[j] = g.up(slice[j]);
    std::vector<float> mine(n);
    float* dm = g.up(mine);
    k.row_max(dslice[j], dm, n, Vs);
    c.row_max(slice[j].data(), mine.data(), n, Vs);
    const std::vector<float> got = g.down(dm, n);
    close(got, mine, 0, "row_max");
    std::copy(got.begin(), got.end(), maxes.begin() + j * n);
  }
  const float* dmaxes = g.up(maxes);
  // Each slice's sums of exponentials and target logits, then their sum over the group (the all-reduce).
  std::vector<double> summed(2 * n, 0.0);
  for (int j = 0; j < t; ++j) {
    std::vector<double> stats(2 * n);
    double* ds = g.up(stats);
    k.vocab_parallel_ce_stats(dslice[j], dtgt, dmaxes, t, ds, n, Vs, j * Vs);
    c.vocab_parallel_ce_stats(slice[j].data(), tgt.data(), maxes.data(), t, stats.data(), n, Vs, j * Vs);
    const std::vector<double> got = g.down(ds, stats.size());
    close(got, stats, 1e-12, "vocab_parallel_ce_stats");
    for (long e = 0; e < 2 * n; ++e) summed[e] += got[e];
  }
  const double* dsummed = g.up(summed);
  // The slices' gradients (in place, as the model may) and loss sums, against the CPU's and against the
  // whole-vocabulary cross-entropy.
  std::vector<float> dwhole = whole;
  std::vector<double> whole_sums = {0.5, 1.5, 2.5, 3.5};
  c.cross_entropy(whole.data(), tgt.data(), dwhole.data(), whole_sums.data(), n, V, 10, 0.125f);
  for (int j = 0; j < t; ++j) {
    std::vector<double> sums = {0.5, 1.5, 2.5, 3.5};
    double* dsums = g.up(sums);
    k.vocab_parallel_ce_finish(dslice[j], dtgt, dmaxes, t, dsummed, dslice[j], dsums, n, Vs, j * Vs, 10, 0.125f);
    std::vector<float> grad = slice[j];
    c.vocab_parallel_ce_finish(slice[j].data(), tgt.data(), maxes.data(), t, summed.data(), grad.data(), sums.data(), n,
                               Vs, j * Vs, 10, 0.125f);
    const std::vector<float> got = g.down(dslice[j], grad.size());
    close(got, grad, 1e-6, "vocab_parallel_ce_finish dlogits");
    const std::vector<double> got_sums = g.down(dsums, sums.size());
    close(got_sums, sums, 1e-12, "vocab_parallel_ce_finish loss sums");
    close(got_sums, whole_sums, 1e-9, "vocabulary-parallel loss against the whole vocabulary's");
    std::vector<float> expected(n * Vs);
    for (long i = 0; i < n; ++i) std::copy_n(dwhole.begin() + i * V + j * Vs, Vs, expected.begin() + i * Vs);
    close(got, expected, 1e-6, "vocabulary-parallel gradient against the whole vocabulary's");
  }
}

TEST_CASE("cuda kernels: Mixture of Experts (router top-k and its gradient, the load-balancing loss, gather, combine "
          "and its gradient)") {
  // Same rules: the selections exactly, the gates (expf) at 1e-6, sums in the CPU's order at 1e-6.
  Gpu g;
  cuda::CudaKernels k(g.s);
  CpuKernels<float> c;
  const long n = 29;
  const int E = 6, K = 2, d = 20;
  auto logits = rnd(n * E, 200, -3, 3);
  logits[3 * E + 1] = logits[3 * E + 4] = 9.0f;  // a tie: the lower expert first
  std::vector<int> idx(n * K), didx_h(n * K);
  std::vector<float> gates(n * K);
  int* didx = g.up(didx_h);
  float* dgates_out = g.up(gates);
  k.moe_topk(g.up(logits), didx, dgates_out, n, E, K);
  c.moe_topk(logits.data(), idx.data(), gates.data(), n, E, K);
  CHECK(g.down(didx, idx.size()) == idx);
  close(g.down(dgates_out, gates.size()), gates, 1e-6, "moe_topk gates");
  auto dg = rnd(n * K, 201);
  std::vector<float> dl(n * E, 5.0f);
  float* ddl = g.up(dl);
  k.moe_topk_backward(g.up(idx), g.up(gates), g.up(dg), ddl, n, E, K);
  c.moe_topk_backward(idx.data(), gates.data(), dg.data(), dl.data(), n, E, K);
  close(g.down(ddl, dl.size()), dl, 1e-6, "moe_topk_backward");
  // The load-balancing loss onto that gradient: three segments of coefficients (10 rows each, the last short), the
  // softmax in double, its sum in row order.
  auto coeffs = rnd(3 * E, 206, 0, 1);
  std::vector<double> aux{0.25};
  double* daux = g.up(aux);
  k.moe_aux_loss(g.up(logits), g.up(coeffs), ddl, daux, n, E, 10, 0.5f);
  c.moe_aux_loss(logits.data(), coeffs.data(), dl.data(), aux.data(), n, E, 10, 0.5f);
  close(g.down(ddl, dl.size()), dl, 1e-6, "moe_aux_loss dlogits");
  close(g.down(daux, 1), aux, 1e-12, "moe_aux_loss sum");
  // The packed order: by expert, then token (exec/moe.cpp moe_route).
  std::vector<int> pair_row(n * K), pair_token(n * K);
  {
    std::vector<long> next(E, 0), count(E, 0);
    for (int e : idx) ++count[e];
    for (int e = 1; e < E; ++e) next[e] = next[e - 1] + count[e - 1];
    for (long t = 0; t < n; ++t)
      for (int s = 0; s < K; ++s) pair_row[t * K + s] = static_cast<int>(next[idx[t * K + s]]++), pair_token[pair_row[t * K + s]] = static_cast<int>(t);
  }
  const int* dpr = g.up(pair_row);
  auto x = rnd(n * d, 202);
  std::vector<float> packed(n * K * d);
  float* dpacked = g.up(packed);
  k.gather_rows(g.up(x), g.up(pair_token), dpacked, n * K, d);
  c.gather_rows(x.data(), pair_token.data(), packed.data(), n * K, d);
  close(g.down(dpacked, packed.size()), packed, 0, "gather_rows");
  auto h = rnd(n * d, 203), y = rnd(n * K * d, 204);
  std::vector<float> out(n * d);
  float* dout = g.up(out);
  const float* dy = g.up(y);
  const float* dgt = g.up(gates);
  k.moe_combine(g.up(h), dy, dpr, dgt, dout, n, K, d);
  c.moe_combine(h.data(), y.data(), pair_row.data(), gates.data(), out.data(), n, K, d);
  close(g.down(dout, out.size()), out, 1e-6, "moe_combine");
  auto go = rnd(n * d, 205);
  std::vector<float> dyp(n * K * d), dgs(n * K);
  float* ddyp = g.up(dyp);
  float* ddgs = g.up(dgs);
  k.moe_combine_backward(g.up(go), dy, dpr, dgt, ddyp, ddgs, n, K, d);
  c.moe_combine_backward(go.data(), y.data(), pair_row.data(), gates.data(), dyp.data(), dgs.data(), n, K, d);
  close(g.down(ddyp, dyp.size()), dyp, 1e-6, "moe_combine_backward dy");
  close(g.down(ddgs, dgs.size()), dgs, 1e-6, "moe_combine_backward dgates");
  std::vector<float> dx(n * d);
  float* ddx = g.up(dx);
  k.moe_sum_pairs(dy, dpr, ddx, n, K, d);
  c.moe_sum_pairs(y.data(), pair_row.data(), dx.data(), n, K, d);
  close(g.down(ddx, dx.size()), dx, 1e-6, "moe_sum_pairs");
}
