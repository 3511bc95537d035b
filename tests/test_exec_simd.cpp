// The CPU backend's vectorised fp32 kernels (exec/cpu/simd.h) on every instruction set this CPU runs, against
// fp64 loops written here from the formulas (independent of the vector code), on shapes whose rows end inside a
// vector (tails). Tolerances: 2e-6 relative to max(1, |reference|) for the kernels without a sum (rope, SwiGLU,
// add: a few ulps of fp32, SLEEF's exp is within 1 ulp), 1e-5 for those with a row sum (RMSNorm, softmax); the
// cross-entropy, fp64 inside, 2e-7 (its fp32 gradient's rounding) and its fp64 loss 1e-13.
// Between instruction sets: AVX2 and AVX-512 equal bit for bit (same operations, same lane order, SLEEF's
// deterministic exp); the generic path equals them bit for bit in the kernels without an exp. And the CPU
// attention by blocks (cpu_attention.cpp) against the unblocked composition of Kernels' default (fp64 at 1e-12,
// fp32 at 1e-5), at sequence lengths that are and are not multiples of the block.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "exec/cpu/cpu_kernels.h"
#include "exec/cpu/simd.h"
#include "exec/math.h"
#include "random_inputs.h"

using namespace trainsim::exec;

namespace {

using trainsim::testing::rnd;

template <typename A, typename B>
double worst_rel(const std::vector<A>& a, const std::vector<B>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    worst = std::max(worst, d / std::max(1.0, std::abs(static_cast<double>(b[i]))));
  }
  return worst;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<const simd::Table*> tables() {
  std::vector<const simd::Table*> t;
  for (const char* name : {"generic", "avx2", "avx512"})
    if (const simd::Table* p = simd::table_for(name)) t.push_back(p);
  return t;
}

double silu(double x) { return x / (1 + std::exp(-x)); }

// Every kernel's output on one table, for the bit comparisons between tables.
struct Outputs {
  std::vector<float> swiglu_h, swiglu_dgu, norm_y, norm_rstd, norm_dx, norm_dg, soft_p, soft_dp, rope_q, rope_k,
      rope_v, rope_back, sum, ce_d;
  std::vector<double> ce_loss;
};

constexpr long kRows = 5;
constexpr int kF = 45, kD = 37, kTn = 70, kB = 2, kT = 5, kH = 3, kHd = 10, kVocab = 37;

Outputs run(const simd::Table& t) {
  Outputs o;
  auto gu = rnd(kRows * 2 * kF, 1, -6, 6), dh = rnd(kRows * kF, 2);
  o.swiglu_h.resize(kRows * kF), o.swiglu_dgu.resize(kRows * 2 * kF);
  t.swiglu_forward(gu.data(), o.swiglu_h.data(), kRows, kF);
  t.swiglu_backward(gu.data(), dh.data(), o.swiglu_dgu.data(), kRows, kF);

  auto x = rnd(kRows * kD, 3), g = rnd(kD, 4, 0.5f, 1.5f), dy = rnd(kRows * kD, 5);
  o.norm_y.resize(kRows * kD), o.norm_rstd.resize(kRows), o.norm_dg.resize(kD);
  o.norm_dx = rnd(kRows * kD, 6);  // accumulated into
  t.rmsnorm_forward(x.data(), g.data(), o.norm_y.data(), o.norm_rstd.data(), kRows, kD, 1e-5f);
  t.rmsnorm_backward_input(dy.data(), x.data(), g.data(), o.norm_rstd.data(), o.norm_dx.data(), o.norm_dx.data(), kRows,
                           kD);
  t.rmsnorm_backward_weight(dy.data(), x.data(), o.norm_rstd.data(), o.norm_dg.data(), kRows, kD);

  o.soft_p = rnd(kTn * kTn, 7, -5, 5), o.soft_dp = rnd(kTn * kTn, 8);
  t.causal_softmax_rows(o.soft_p.data(), kTn, kTn, 0, kTn, 0.3f);
  t.causal_softmax_backward_rows(o.soft_p.data(), kTn, o.soft_dp.data(), kTn, kTn, 0, kTn, 0.3f);

  const int d = kH * kHd;
  auto qkv = rnd(kB * kT * 3 * d, 9), cs = rnd(kT * kHd / 2, 10), sn = rnd(kT * kHd / 2, 11);
  o.rope_q.resize(kB * kT * d), o.rope_k.resize(kB * kT * d), o.rope_v.resize(kB * kT * d);
  o.rope_back.resize(kB * kT * 3 * d);
  std::vector<float> fwd_c(kT * kHd), fwd_s(kT * kHd), bwd_c(kT * kHd), bwd_s(kT * kHd);
  simd::rope_lanes(cs.data(), sn.data(), kT, kHd, 1.0f, fwd_c.data(), fwd_s.data());
  simd::rope_lanes(cs.data(), sn.data(), kT, kHd, -1.0f, bwd_c.data(), bwd_s.data());
  t.split_heads_rope(qkv.data(), o.rope_q.data(), o.rope_k.data(), o.rope_v.data(), kB, kT, kH, kHd, fwd_c.data(),
                     fwd_s.data());
  t.merge_heads_rope_backward(o.rope_q.data(), o.rope_k.data(), o.rope_v.data(), o.rope_back.data(), kB, kT, kH, kHd,
                              bwd_c.data(), bwd_s.data());

  auto a = rnd(101, 12), b = rnd(101, 13);
  o.sum.resize(101);
  t.add(a.data(), b.data(), o.sum.data(), 101);

  // the cross-entropy: rows in segments of 2 (the last one short), a vocabulary with a tail
  auto logits = rnd(kRows * kVocab, 14, -8, 8);
  std::vector<int> targets(kRows);
  for (long i = 0; i < kRows; ++i) targets[i] = static_cast<int>((i * 7 + 3) % kVocab);
  std::vector<double> e((kVocab + 15) / 16 * 16);
  o.ce_d.resize(kRows * kVocab), o.ce_loss.assign((kRows + 1) / 2, 0.5);  // (added onto)
  t.cross_entropy(logits.data(), targets.data(), o.ce_d.data(), o.ce_loss.data(), e.data(), kRows, kVocab, 2, 0.25f);
  return o;
}

}  // namespace

TEST_CASE("exec simd: every instruction set's kernels match fp64 loops") {
  const std::vector<const simd::Table*> ts = tables();
  REQUIRE(!ts.empty());
  CHECK(std::string(ts.front()->name) == "generic");
  for (const simd::Table* t : ts) {
    INFO("instruction set " << std::string(t->name));
    const Outputs o = run(*t);
    {  // SwiGLU: h = silu(a)·b; da = dh·b·silu'(a), db = dh·silu(a)
      auto gu = rnd(kRows * 2 * kF, 1, -6, 6), dh = rnd(kRows * kF, 2);
      std::vector<double> h(kRows * kF), dgu(kRows * 2 * kF);
      for (long i = 0; i < kRows; ++i)
        for (int j = 0; j < kF; ++j) {
          const double a = gu[i * 2 * kF + j], b = gu[i * 2 * kF + kF + j], s = 1 / (1 + std::exp(-a));
          h[i * kF + j] = silu(a) * b;
          dgu[i * 2 * kF + j] = dh[i * kF + j] * b * (s * (1 + a * (1 - s)));
          dgu[i * 2 * kF + kF + j] = dh[i * kF + j] * silu(a);
        }
      CHECK(worst_rel(o.swiglu_h, h) <= 2e-6);
      CHECK(worst_rel(o.swiglu_dgu, dgu) <= 2e-6);
    }
    {  // RMSNorm
      auto x = rnd(kRows * kD, 3), g = rnd(kD, 4, 0.5f, 1.5f), dy = rnd(kRows * kD, 5), dx0 = rnd(kRows * kD, 6);
      std::vector<double> y(kRows * kD), rs(kRows), dx(dx0.begin(), dx0.end()), dg(kD, 0.0);
      for (long i = 0; i < kRows; ++i) {
        double ss = 0, dot = 0;
        for (int j = 0; j < kD; ++j) ss += double(x[i * kD + j]) * x[i * kD + j];
        const double r = 1 / std::sqrt(ss / kD + 1e-5);
        rs[i] = r;
        for (int j = 0; j < kD; ++j) {
          y[i * kD + j] = x[i * kD + j] * r * g[j];
          dot += double(g[j]) * dy[i * kD + j] * x[i * kD + j] * r;
          dg[j] += double(dy[i * kD + j]) * x[i * kD + j] * r;
        }
        for (int j = 0; j < kD; ++j) dx[i * kD + j] += r * (double(g[j]) * dy[i * kD + j] - x[i * kD + j] * r * dot / kD);
      }
      CHECK(worst_rel(o.norm_y, y) <= 1e-5);
      CHECK(worst_rel(o.norm_rstd, rs) <= 1e-5);
      CHECK(worst_rel(o.norm_dx, dx) <= 1e-5);
      CHECK(worst_rel(o.norm_dg, dg) <= 1e-5);
    }
    {  // causal softmax and its backward, zeros above the diagonal
      auto s = rnd(kTn * kTn, 7, -5, 5), dp = rnd(kTn * kTn, 8);
      std::vector<double> p(kTn * kTn, 0.0), ds(kTn * kTn, 0.0);
      for (int r = 0; r < kTn; ++r) {
        double mx = -1e300, sum = 0, dot = 0;
        for (int j = 0; j <= r; ++j) mx = std::max(mx, 0.3 * s[r * kTn + j]);
        for (int j = 0; j <= r; ++j) sum += std::exp(0.3 * s[r * kTn + j] - mx);
        for (int j = 0; j <= r; ++j) p[r * kTn + j] = std::exp(0.3 * s[r * kTn + j] - mx) / sum;
        // the backward from the kernel's own p (fp32), so that only the backward's error is measured
        for (int j = 0; j <= r; ++j) dot += double(o.soft_p[r * kTn + j]) * dp[r * kTn + j];
        for (int j = 0; j <= r; ++j) ds[r * kTn + j] = o.soft_p[r * kTn + j] * (dp[r * kTn + j] - dot) * 0.3;
      }
      CHECK(worst_rel(o.soft_p, p) <= 1e-5);
      CHECK(worst_rel(o.soft_dp, ds) <= 1e-5);
    }
    {  // rope with the head split, and back (the rotation by -angle)
      const int d = kH * kHd, half = kHd / 2;
      auto qkv = rnd(kB * kT * 3 * d, 9), cs = rnd(kT * half, 10), sn = rnd(kT * half, 11);
      std::vector<double> q(kB * kT * d), k(kB * kT * d), v(kB * kT * d), back(kB * kT * 3 * d);
      for (int b = 0; b < kB; ++b)
        for (int t = 0; t < kT; ++t)
          for (int h = 0; h < kH; ++h)
            for (int i = 0; i < kHd; i += 2) {
              const long row = (long(b) * kT + t) * 3 * d, o2 = ((long(b) * kH + h) * kT + t) * kHd + i;
              const double c = cs[t * half + i / 2], s = sn[t * half + i / 2];
              for (int part = 0; part < 2; ++part) {
                std::vector<double>& dst = part == 0 ? q : k;
                const std::vector<float>& fwd = part == 0 ? o.rope_q : o.rope_k;
                const double xa = qkv[row + part * d + h * kHd + i], xb = qkv[row + part * d + h * kHd + i + 1];
                dst[o2] = xa * c - xb * s, dst[o2 + 1] = xa * s + xb * c;
                const double ga = fwd[o2], gb = fwd[o2 + 1];  // backward of the kernel's own output
                back[row + part * d + h * kHd + i] = ga * c + gb * s;
                back[row + part * d + h * kHd + i + 1] = -ga * s + gb * c;
              }
              v[o2] = qkv[row + 2 * d + h * kHd + i], v[o2 + 1] = qkv[row + 2 * d + h * kHd + i + 1];
              back[row + 2 * d + h * kHd + i] = v[o2], back[row + 2 * d + h * kHd + i + 1] = v[o2 + 1];
            }
      CHECK(worst_rel(o.rope_q, q) <= 2e-6);
      CHECK(worst_rel(o.rope_k, k) <= 2e-6);
      CHECK(worst_rel(o.rope_v, v) == 0);
      CHECK(worst_rel(o.rope_back, back) <= 2e-6);
    }
    {
      auto a = rnd(101, 12), b = rnd(101, 13);
      std::vector<float> sum(101);
      for (int i = 0; i < 101; ++i) sum[i] = a[i] + b[i];
      CHECK(same_bits(o.sum, sum));
    }
    {  // cross-entropy: loss = log Σ e^x − x_y per row, summed by segments of 2 rows; dx = (softmax − onehot)·0.25
      auto logits = rnd(kRows * kVocab, 14, -8, 8);
      std::vector<double> d(kRows * kVocab), loss((kRows + 1) / 2, 0.5);
      for (long i = 0; i < kRows; ++i) {
        const int y = static_cast<int>((i * 7 + 3) % kVocab);
        const float* row = logits.data() + i * kVocab;
        const float top = *std::max_element(row, row + kVocab);
        // (shifted by the row's max in fp32, as the kernel does: the shift's rounding is its input's)
        auto shifted = [&](int j) { return double(row[j] - top); };
        double sum = 0;
        for (int j = 0; j < kVocab; ++j) sum += std::exp(shifted(j));
        loss[i / 2] += std::log(sum) - shifted(y);
        for (int j = 0; j < kVocab; ++j) d[i * kVocab + j] = (std::exp(shifted(j)) / sum - (j == y ? 1 : 0)) * 0.25;
      }
      CHECK(worst_rel(o.ce_d, d) <= 2e-7);  // (fp64 inside: the float result's rounding only)
      CHECK(worst_rel(o.ce_loss, loss) <= 1e-13);
    }
  }
}

TEST_CASE("exec simd: AVX2 and AVX-512 agree bit for bit, the generic path too where no exp is taken") {
  const std::vector<const simd::Table*> ts = tables();
  if (ts.size() < 2) {
    MESSAGE("only the generic path runs on this CPU: nothing to compare");
    return;
  }
  const Outputs gen = run(*ts[0]);
  for (std::size_t i = 1; i < ts.size(); ++i) {
    INFO(ts[i]->name << " against generic");
    const Outputs o = run(*ts[i]);
    CHECK(same_bits(o.norm_y, gen.norm_y));
    CHECK(same_bits(o.norm_rstd, gen.norm_rstd));
    CHECK(same_bits(o.norm_dx, gen.norm_dx));
    CHECK(same_bits(o.norm_dg, gen.norm_dg));
    CHECK(same_bits(o.rope_q, gen.rope_q));
    CHECK(same_bits(o.rope_k, gen.rope_k));
    CHECK(same_bits(o.rope_back, gen.rope_back));
    CHECK(same_bits(o.sum, gen.sum));
  }
  if (ts.size() == 3) {
    const Outputs a = run(*ts[1]), b = run(*ts[2]);
    CHECK(same_bits(a.swiglu_h, b.swiglu_h));
    CHECK(same_bits(a.swiglu_dgu, b.swiglu_dgu));
    CHECK(same_bits(a.soft_p, b.soft_p));
    CHECK(same_bits(a.soft_dp, b.soft_dp));
    CHECK(same_bits(a.ce_d, b.ce_d));
    CHECK(a.ce_loss == b.ce_loss);
  }
}

TEST_CASE("exec cpu: the RMSNorm input grad onto a residual equals it added onto a copy, bit for bit, with the gain grad "
          "in the same pass, the two kernels' bits") {
  // rmsnorm_backward_input_onto(res -> dx) reads res in the same pass as the norm's grad: the bits of copying res
  // into dx and adding there (Kernels' default, which the CUDA backend runs), on every instruction set and in fp64.
  // d = 37: two vectors and a tail.
  const long n = 3;
  const int d = 37;
  const std::vector<float> x = rnd(n * d, 41), g = rnd(d, 42, 0.5f, 1.5f), dy = rnd(n * d, 43), res = rnd(n * d, 44);
  CpuKernels<float> cpu;
  std::vector<float> y(n * d), rstd(n);
  cpu.rmsnorm_forward(x.data(), g.data(), y.data(), rstd.data(), n, d, 1e-5f);
  for (const simd::Table* t : tables()) {
    INFO(t->name);
    std::vector<float> copied = res, onto(n * d, -7.0f);
    t->rmsnorm_backward_input(dy.data(), x.data(), g.data(), rstd.data(), copied.data(), copied.data(), n, d);
    t->rmsnorm_backward_input(dy.data(), x.data(), g.data(), rstd.data(), res.data(), onto.data(), n, d);
    CHECK(same_bits(onto, copied));
    CHECK(!same_bits(onto, res));  // (the norm's grad was added)
  }
  // rmsnorm_backward (the whole backward's: input and gain grads in one pass) = the two kernels, bit for bit
  for (const simd::Table* t : tables()) {
    INFO(t->name << ": rmsnorm_backward");
    std::vector<float> dx1(n * d), dg1(d, 5.0f), dx2(n * d), dg2(d);
    t->rmsnorm_backward(dy.data(), x.data(), g.data(), rstd.data(), res.data(), dx1.data(), dg1.data(), n, d);
    t->rmsnorm_backward_input(dy.data(), x.data(), g.data(), rstd.data(), res.data(), dx2.data(), n, d);
    t->rmsnorm_backward_weight(dy.data(), x.data(), rstd.data(), dg2.data(), n, d);
    CHECK(same_bits(dx1, dx2));
    CHECK(same_bits(dg1, dg2));
  }
  std::vector<float> onto(n * d), by_default(n * d);
  cpu.rmsnorm_backward_input_onto(dy.data(), x.data(), g.data(), rstd.data(), res.data(), onto.data(), n, d);
  cpu.Kernels<float>::rmsnorm_backward_input_onto(dy.data(), x.data(), g.data(), rstd.data(), res.data(),
                                                  by_default.data(), n, d);
  CHECK(same_bits(onto, by_default));
  CpuKernels<double> cpu64;
  const std::vector<double> x64(x.begin(), x.end()), g64(g.begin(), g.end()), dy64(dy.begin(), dy.end()),
      res64(res.begin(), res.end());
  std::vector<double> y64(n * d), rstd64(n), onto64(n * d), copied64 = res64;
  cpu64.rmsnorm_forward(x64.data(), g64.data(), y64.data(), rstd64.data(), n, d, 1e-5);
  cpu64.rmsnorm_backward_input_onto(dy64.data(), x64.data(), g64.data(), rstd64.data(), res64.data(), onto64.data(), n,
                                    d);
  cpu64.rmsnorm_backward_input(dy64.data(), x64.data(), g64.data(), rstd64.data(), copied64.data(), n, d);
  CHECK(std::memcmp(onto64.data(), copied64.data(), onto64.size() * sizeof(double)) == 0);
}

TEST_CASE("exec simd: AdamW equals exec/math.h adamw_element bit for bit on every instruction set") {
  // The update is element-wise without a sum: every path does adamw_element's IEEE operations in its order, so the
  // bits are the scalar's (a checkpoint resumes to the same bits whichever path wrote it). n = 37: two vectors
  // and a tail; weight decay and a clipping coefficient on; once in place (w_out = w).
  const long n = 37;
  const std::vector<float> w = rnd(n, 31), g = rnd(n, 32), m = rnd(n, 33, -0.1f, 0.1f), v = rnd(n, 34, 0.0f, 0.01f);
  AdamWStep step;
  step.lr = 3e-4f, step.weight_decay = 0.1f, step.bias_correction1 = 1 - 0.9f * 0.9f * 0.9f;
  step.bias_correction2_sqrt = std::sqrt(1 - 0.95f * 0.95f * 0.95f);
  const double norm_sq = 4.0;  // clipping at 1: the gradient scaled by about 1/2
  std::vector<float> wr = w, mr = m, vr = v;
  const float coef = static_cast<float>(std::min(1.0, 1.0 / (std::sqrt(norm_sq) + 1e-6)));
  for (long i = 0; i < n; ++i) adamw_element(wr[i], mr[i], vr[i], g[i] * coef, step);
  CpuKernels<float> cpu;
  std::vector<float> w1(n), m1(n), v1(n);
  cpu.adamw(w.data(), g.data(), m.data(), v.data(), w1.data(), m1.data(), v1.data(), n, step, &norm_sq, 1.0f);
  CHECK(same_bits(w1, wr));
  CHECK(same_bits(m1, mr));
  CHECK(same_bits(v1, vr));
  for (const simd::Table* t : tables()) {
    INFO(t->name);
    const simd::AdamW s{coef, 1.0f - step.lr * step.weight_decay, step.beta1, 1.0f - step.beta1, step.beta2,
                        1.0f - step.beta2, step.bias_correction2_sqrt, step.eps, step.lr / step.bias_correction1};
    std::vector<float> wi = w, mi = m, vi = v;
    t->adamw(wi.data(), g.data(), mi.data(), vi.data(), wi.data(), mi.data(), vi.data(), n, s);
    CHECK(same_bits(wi, wr));
    CHECK(same_bits(mi, mr));
    CHECK(same_bits(vi, vr));
  }
}

TEST_CASE("exec simd: TRAINSIM_SIMD names an instruction set, and an unknown one is refused") {
  CHECK(simd::table_for("generic") != nullptr);
  CHECK(simd::table_for("sse9") == nullptr);
  const simd::Table& t = simd::table();  // the one every CpuKernels<float> uses
  CHECK(simd::table_for(t.name) != nullptr);
}

namespace {

template <typename T>
void attention_blocks_match(int Tn, double tol) {
  INFO("T = " << Tn);
  const int B = 2, H = 3, hd = 8;
  const long n = long(B) * H * Tn * hd, tt = long(B) * H * Tn * Tn;
  auto cast = [](const std::vector<float>& v) { return std::vector<T>(v.begin(), v.end()); };
  const std::vector<T> q = cast(rnd(n, 21)), k = cast(rnd(n, 22)), v = cast(rnd(n, 23)), dout = cast(rnd(n, 24));
  const T scale = T(1) / std::sqrt(T(hd));
  CpuKernels<T> cpu;
  Kernels<T>& base = cpu;
  std::vector<T> p1(tt), o1(n), p2(tt), o2(n), s2(base.Kernels<T>::attention_scratch_elements(B, Tn, H, hd, true));
  cpu.attention_forward(q.data(), k.data(), v.data(), p1.data(), o1.data(), nullptr, B, Tn, H, hd, scale);
  base.Kernels<T>::attention_forward(q.data(), k.data(), v.data(), p2.data(), o2.data(), s2.data(), B, Tn, H, hd,
                                     scale);
  CHECK(worst_rel(o1, o2) <= tol);
  std::vector<T> dq1(n), dk1(n), dv1(n), dq2(n), dk2(n), dv2(n);
  std::vector<T> s1(cpu.attention_scratch_elements(B, Tn, H, hd, true));
  CHECK(long(s1.size()) == long(Tn) * Tn);  // one head's scores, not B·H of them
  cpu.attention_backward(q.data(), k.data(), v.data(), p1.data(), dout.data(), dq1.data(), dk1.data(), dv1.data(),
                         s1.data(), B, Tn, H, hd, scale);
  base.Kernels<T>::attention_backward(q.data(), k.data(), v.data(), p2.data(), dout.data(), dq2.data(), dk2.data(),
                                      dv2.data(), s2.data(), B, Tn, H, hd, scale);
  CHECK(worst_rel(dq1, dq2) <= tol);
  CHECK(worst_rel(dk1, dk2) <= tol);
  CHECK(worst_rel(dv1, dv2) <= tol);
}

}  // namespace

TEST_CASE("exec cpu attention: by blocks of queries equals the unblocked composition") {
  for (int Tn : {1, 7, kAttentionBlock, kAttentionBlock + 1, 3 * kAttentionBlock - 5}) {
    attention_blocks_match<double>(Tn, 1e-12);
    attention_blocks_match<float>(Tn, 1e-5);
  }
}
