// exec/cpu/simd.h's kernels, written once on a 16-lane float vector V that the including file defines
// (simd_avx512.cpp, simd_avx2.cpp, simd_generic.cpp), inside that file's anonymous namespace. V has: load,
// load_n (a tail of n lanes, the rest a pad value), store, store_n, set1, + - * /, fma, max, exp, sqrt, swap_pairs,
// sum and hmax (the lanes reduced in one fixed order). Rows are walked in chunks of 16 from their first element,
// the last chunk padded: an element's result depends only on its row, never on the row count or the machine.
// No standard header: scalar square roots and logarithms are the compiler's builtins.

constexpr int W = 16;

// f(j, m) for each chunk of the row [0, len): m = 16 lanes, or fewer for the last one.
template <typename F>
inline void chunks(long len, F f) {
  long j = 0;
  for (; j + W <= len; j += W) f(j, W);
  if (j < len) f(j, static_cast<int>(len - j));
}
inline V ld(const float* p, int m, float pad = 0.0f) { return m == W ? V::load(p) : V::load_n(p, m, pad); }
inline void st(const V& v, float* p, int m) {
  if (m == W) v.store(p);
  else v.store_n(p, m);
}
constexpr float kNegInf = -__builtin_inff();

void swiglu_forward(const float* gu, float* h, long n, int f) {
  const V one = V::set1(1.0f), neg = V::set1(-1.0f);
  for (long i = 0; i < n; ++i) {
    const float* a = gu + i * 2 * f;
    const float* b = a + f;
    float* hi = h + i * f;
    chunks(f, [&](long j, int m) {
      V x = ld(a + j, m), y = ld(b + j, m);
      st(x / (one + exp(neg * x)) * y, hi + j, m);  // silu(x) = x / (1 + e^-x) (exec/math.h)
    });
  }
}

void swiglu_backward(const float* gu, const float* dh, float* dgu, long n, int f) {
  const V one = V::set1(1.0f), neg = V::set1(-1.0f);
  for (long i = 0; i < n; ++i) {
    const float* a = gu + i * 2 * f;
    const float* b = a + f;
    const float* g = dh + i * f;
    float* da = dgu + i * 2 * f;
    float* db = da + f;
    chunks(f, [&](long j, int m) {
      V x = ld(a + j, m), y = ld(b + j, m), dy = ld(g + j, m);
      V s = one / (one + exp(neg * x));         // sigmoid
      V grad = s * (one + x * (one - s));       // d silu / dx (exec/math.h silu_grad)
      st(dy * y * grad, da + j, m);
      st(dy * (x * s), db + j, m);
    });
  }
}

void rmsnorm_forward(const float* x, const float* g, float* y, float* rstd, long n, int d, float eps) {
  for (long i = 0; i < n; ++i) {
    const float* xi = x + i * d;
    V acc = V::set1(0.0f);
    chunks(d, [&](long j, int m) {
      V v = ld(xi + j, m);
      acc = fma(v, v, acc);
    });
    const float r = 1.0f / __builtin_sqrtf(acc.sum() / static_cast<float>(d) + eps);
    rstd[i] = r;
    const V R = V::set1(r);
    float* yi = y + i * d;
    chunks(d, [&](long j, int m) { st(ld(xi + j, m) * R * ld(g + j, m), yi + j, m); });
  }
}

// The rows of rmsnorm_backward_input, and with Gain those of rmsnorm_backward: dx = res + the norm's input grad, and
// dg (zeroed first) += dy ∘ x·rstd in the same pass, the same operations as rmsnorm_backward_weight.
template <bool Gain>
void rmsnorm_backward_rows(const float* dy, const float* x, const float* g, const float* rstd, const float* res,
                           float* dx, float* dg, long n, int d) {
  if constexpr (Gain) chunks(d, [&](long j, int m) { st(V::set1(0.0f), dg + j, m); });
  for (long i = 0; i < n; ++i) {
    const float *dyi = dy + i * d, *xi = x + i * d;
    const float r = rstd[i];
    V acc = V::set1(0.0f);  // Σ g∘dy∘x
    chunks(d, [&](long j, int m) { acc = fma(ld(g + j, m) * ld(dyi + j, m), ld(xi + j, m), acc); });
    // dx = res + r·(g∘dy − x̂·mean(g∘dy∘x̂)) with x̂ = x·r: the second term is x·(r²·Σ/d)
    const V K = V::set1(r * r * acc.sum() / static_cast<float>(d)), R = V::set1(r);
    const float* resi = res + i * d;
    float* dxi = dx + i * d;
    chunks(d, [&](long j, int m) {
      const V dyv = ld(dyi + j, m), xv = ld(xi + j, m);
      V t = ld(g + j, m) * dyv - xv * K;
      st(ld(resi + j, m) + R * t, dxi + j, m);
      if constexpr (Gain) st(ld(dg + j, m) + dyv * xv * R, dg + j, m);
    });
  }
}

void rmsnorm_backward_input(const float* dy, const float* x, const float* g, const float* rstd, const float* res,
                            float* dx, long n, int d) {
  rmsnorm_backward_rows<false>(dy, x, g, rstd, res, dx, nullptr, n, d);
}

void rmsnorm_backward_weight(const float* dy, const float* x, const float* rstd, float* dg, long n, int d) {
  chunks(d, [&](long j, int m) { st(V::set1(0.0f), dg + j, m); });
  for (long i = 0; i < n; ++i) {
    const float *dyi = dy + i * d, *xi = x + i * d;
    const V R = V::set1(rstd[i]);
    chunks(d, [&](long j, int m) { st(ld(dg + j, m) + ld(dyi + j, m) * ld(xi + j, m) * R, dg + j, m); });
  }
}

void rmsnorm_backward(const float* dy, const float* x, const float* g, const float* rstd, const float* res, float* dx,
                      float* dg, long n, int d) {
  rmsnorm_backward_rows<true>(dy, x, g, rstd, res, dx, dg, n, d);
}

void causal_softmax_rows(float* s, long ld_s, int rows, int t0, int width, float scale) {
  const V SC = V::set1(scale), zero = V::set1(0.0f);
  for (int r = 0; r < rows; ++r) {
    float* row = s + r * ld_s;
    const long len = t0 + r + 1 < width ? t0 + r + 1 : width;
    V mx = V::set1(kNegInf);
    chunks(len, [&](long j, int m) { mx = max(mx, ld(row + j, m, kNegInf) * SC); });
    const V MX = V::set1(mx.hmax());
    V acc = zero;
    chunks(len, [&](long j, int m) {
      V e = exp(ld(row + j, m, kNegInf) * SC - MX);  // the pad lanes give exp(-inf) = 0
      st(e, row + j, m);
      acc = acc + e;
    });
    const V INV = V::set1(1.0f / acc.sum());
    chunks(len, [&](long j, int m) { st(ld(row + j, m) * INV, row + j, m); });
    chunks(width - len, [&](long j, int m) { st(zero, row + len + j, m); });
  }
}

void causal_softmax_backward_rows(const float* p, long ldp, float* dp, long ldd, int rows, int t0, int width,
                                  float scale) {
  const V SC = V::set1(scale), zero = V::set1(0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* pr = p + r * ldp;
    float* dr = dp + r * ldd;
    const long len = t0 + r + 1 < width ? t0 + r + 1 : width;
    V acc = zero;
    chunks(len, [&](long j, int m) { acc = fma(ld(pr + j, m), ld(dr + j, m), acc); });
    const V DOT = V::set1(acc.sum());
    chunks(len, [&](long j, int m) { st(ld(pr + j, m) * (ld(dr + j, m) - DOT) * SC, dr + j, m); });
    chunks(width - len, [&](long j, int m) { st(zero, dr + len + j, m); });
  }
}

// The rotation of pairs (2i, 2i+1) by the angle of position t (exec/math.h rope_rotate), 16 lanes = 8 pairs:
// out = x∘C + swap_pairs(x)∘S, C and S the lanes of row t of the caller's tables (simd.h).
inline V rope_apply(const V& x, const V& C, const V& S) { return fma(x, C, swap_pairs(x) * S); }

void split_heads_rope(const float* qkv, float* q, float* k, float* v, int B, int Tn, int H, int hd, const float* C,
                      const float* S) {
  const long d = static_cast<long>(H) * hd;
  // row by row: each row of qkv is read once, in order, and each head's q, k and v written in order of t
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      const float* row = qkv + (static_cast<long>(b) * Tn + t) * 3 * d;
      const float *Ct = C + static_cast<long>(t) * hd, *St = S + static_cast<long>(t) * hd;
      chunks(hd, [&](long j, int m) {
        const V c = ld(Ct + j, m), s = ld(St + j, m);
        for (int h = 0; h < H; ++h) {
          const long o = ((static_cast<long>(b) * H + h) * Tn + t) * hd + j, at = h * hd + j;
          st(rope_apply(ld(row + at, m), c, s), q + o, m);
          st(rope_apply(ld(row + d + at, m), c, s), k + o, m);
          st(ld(row + 2 * d + at, m), v + o, m);
        }
      });
    }
}

void merge_heads_rope_backward(const float* dq, const float* dk, const float* dv, float* dqkv, int B, int Tn, int H,
                               int hd, const float* C, const float* S) {
  const long d = static_cast<long>(H) * hd;
  // row by row, as split_heads_rope
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      float* row = dqkv + (static_cast<long>(b) * Tn + t) * 3 * d;
      const float *Ct = C + static_cast<long>(t) * hd, *St = S + static_cast<long>(t) * hd;
      chunks(hd, [&](long j, int m) {
        const V c = ld(Ct + j, m), s = ld(St + j, m);
        for (int h = 0; h < H; ++h) {
          const long o = ((static_cast<long>(b) * H + h) * Tn + t) * hd + j, at = h * hd + j;
          st(rope_apply(ld(dq + o, m), c, s), row + at, m);
          st(rope_apply(ld(dk + o, m), c, s), row + d + at, m);
          st(ld(dv + o, m), row + 2 * d + at, m);
        }
      });
    }
}

void add(const float* a, const float* b, float* out, long n) {
  chunks(n, [&](long j, int m) { st(ld(a + j, m) + ld(b + j, m), out + j, m); });
}

void adamw(const float* w, const float* g, const float* m, const float* v, float* w_out, float* m_out, float* v_out,
           long n, const AdamW& s) {
  const V scale = V::set1(s.grad_scale), decay = V::set1(s.decay), b1 = V::set1(s.beta1),
          c1 = V::set1(s.one_minus_beta1), b2 = V::set1(s.beta2), c2 = V::set1(s.one_minus_beta2),
          bc2 = V::set1(s.bias_correction2_sqrt), eps = V::set1(s.eps), step = V::set1(s.step);
  chunks(n, [&](long j, int k) {
    const V gi = ld(g + j, k) * scale;
    const V wi = ld(w + j, k) * decay;
    const V mi = b1 * ld(m + j, k) + c1 * gi;
    const V vi = b2 * ld(v + j, k) + c2 * gi * gi;
    const V denom = sqrt(vi) / bc2 + eps;
    st(wi - step * (mi / denom), w_out + j, k);
    st(mi, m_out + j, k);
    st(vi, v_out + j, k);
  });
}

void cross_entropy(const float* logits, const int* targets, float* dlogits, double* loss_sums, double* e, long n,
                   int vocab, long rows_per_segment, float scale) {
  const double sc = static_cast<double>(scale);
  for (long i = 0; i < n; ++i) {
    const float* row = logits + i * vocab;
    float* drow = dlogits + i * vocab;
    V mx = V::set1(kNegInf);
    chunks(vocab, [&](long j, int m) { mx = max(mx, ld(row + j, m, kNegInf)); });
    const float top = mx.hmax();
    const V TOP = V::set1(top);
    double part[W] = {};  // lane l sums the exponentials of the columns ≡ l (mod 16), then the lanes pairwise
    chunks(vocab, [&](long j, int m) {
      exp_double(ld(row + j, m, kNegInf) - TOP, e + j);  // (the pad lanes: e^-inf = 0)
      for (int l = 0; l < W; ++l) part[l] += e[j + l];
    });
    for (int width = W / 2; width >= 1; width /= 2)
      for (int l = 0; l < width; ++l) part[l] += part[l + width];
    const double sum = part[0], inv = 1.0 / sum;
    const int y = targets[i];
    loss_sums[i / rows_per_segment] += __builtin_log(sum) - static_cast<double>(row[y] - top);
    for (int j = 0; j < vocab; ++j) drow[j] = static_cast<float>(e[j] * inv * sc);
    drow[y] = static_cast<float>((e[y] * inv - 1.0) * sc);
  }
}

Table make_table(const char* name) {
  return Table{name,
               swiglu_forward,
               swiglu_backward,
               rmsnorm_forward,
               rmsnorm_backward_input,
               rmsnorm_backward_weight,
               rmsnorm_backward,
               causal_softmax_rows,
               causal_softmax_backward_rows,
               split_heads_rope,
               merge_heads_rope_backward,
               add,
               adamw,
               cross_entropy};
}
