// The CPU backend's vectorised fp32 element-wise kernels (issue 23): SwiGLU, RMSNorm, causal softmax, rotary
// embedding with the head split/merge, add, AdamW, the cross-entropy (its exponentials, sums and loss in fp64, as
// the CUDA backend's and the fp64 path's). One source (simd_kernels.inl) written on a vector
// of 16 float lanes, compiled three times: AVX-512 (simd_avx512.cpp), AVX2 + FMA (simd_avx2.cpp, the 16 lanes
// as two 8-lane halves) and portable C++ (simd_generic.cpp); the CPU picks one at run time.
//
// Bits: each kernel does the same IEEE operations lane by lane (a fused multiply-add only where written, the TUs
// compiled with -ffp-contract=off), reduces its 16 lanes in one fixed order and pads a row's tail inside one
// vector, so an element's result depends only on its row, never on the row count. The AVX2 and AVX-512 paths take
// exp from SLEEF's deterministic FMA functions (`finz_`), the same bits in their AVX2 and AVX-512 versions: those
// two paths agree bit for bit. The generic path (CPUs without FMA) takes SLEEF's deterministic exp without FMA
// (`cinz_`): it agrees with them bit for bit except after an exp, where the last bit may differ (both within
// 1 ulp). A machine always runs the same path, so a replay is deterministic on it; across machines, results are
// compared with tolerances (`--check`, the PyTorch comparison), never bit for bit.
#pragma once

namespace trainsim::exec::simd {

/// The scalars of one AdamW update, as exec/math.h adamw_element computes them from its AdamWStep (the caller
/// computes them with the same expressions): w·decay − step·m/(sqrt(v)/bias_correction2_sqrt + eps) after
/// m = beta1·m + one_minus_beta1·g, v = beta2·v + one_minus_beta2·g·g, g the gradient times grad_scale.
struct AdamW {
  float grad_scale;             ///< the clipping coefficient (1: none)
  float decay;                  ///< 1 − lr·weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float bias_correction2_sqrt;  ///< sqrt(1 − beta2^t)
  float eps;
  float step;                   ///< lr / (1 − beta1^t)
};

/// The kernels of one instruction set. Shapes and meanings as exec/kernels.h's kernels of the same names.
struct Table {
  const char* name;  ///< "avx512", "avx2" or "generic"
  /// h (n×f) = silu(a) ∘ b, gu (n × 2f) holding [a | b] per row.
  void (*swiglu_forward)(const float* gu, float* h, long n, int f);
  /// dgu (n × 2f) = the gradient of swiglu_forward given dh (n×f).
  void (*swiglu_backward)(const float* gu, const float* dh, float* dgu, long n, int f);
  /// y = x·rstd ∘ g per row, rstd = 1/sqrt(mean(x²) + eps).
  void (*rmsnorm_forward)(const float* x, const float* g, float* y, float* rstd, long n, int d, float eps);
  /// dx = res + rstd·(g∘dy − x̂·mean(g∘dy∘x̂)), x̂ = x·rstd, per row (res may be dx: dx +=).
  void (*rmsnorm_backward_input)(const float* dy, const float* x, const float* g, const float* rstd, const float* res,
                                 float* dx, long n, int d);
  /// dg = Σ_rows dy ∘ x·rstd (overwrites dg).
  void (*rmsnorm_backward_weight)(const float* dy, const float* x, const float* rstd, float* dg, long n, int d);
  /// rmsnorm_backward_input and rmsnorm_backward_weight in one pass over the rows, the bits of each.
  void (*rmsnorm_backward)(const float* dy, const float* x, const float* g, const float* rstd, const float* res,
                           float* dx, float* dg, long n, int d);
  /// Rows r in [0, rows) of s (row stride ld, `width` columns) hold the raw scores of query t0 + r against keys
  /// 0 .. width-1: each becomes softmax(scale·s[0 .. t0+r]) followed by zeros (the causal mask).
  void (*causal_softmax_rows)(float* s, long ld, int rows, int t0, int width, float scale);
  /// The backward of causal_softmax_rows on the same rows: dp -> p ∘ (dp − Σ p∘dp)·scale, zeros after t0 + r.
  void (*causal_softmax_backward_rows)(const float* p, long ldp, float* dp, long ldd, int rows, int t0, int width,
                                       float scale);
  /// exec/kernels.h split_heads_rope and merge_heads_rope_backward, the rotation given lane by lane (rope_lanes):
  /// C and S are [Tn][hd], C = (c, c) and S = (−sign·s, sign·s) for the pair (2i, 2i+1) at position t, sign 1
  /// forward and −1 backward; out = x∘C + swap_pairs(x)∘S.
  void (*split_heads_rope)(const float* qkv, float* q, float* k, float* v, int B, int Tn, int H, int hd,
                           const float* C, const float* S);
  void (*merge_heads_rope_backward)(const float* dq, const float* dk, const float* dv, float* dqkv, int B, int Tn,
                                    int H, int hd, const float* C, const float* S);
  /// out = a + b (out may be a or b).
  void (*add)(const float* a, const float* b, float* out, long n);
  /// AdamW on n elements: w, m, v updated into w_out, m_out, v_out (each may be its input) from the gradient g,
  /// the same bits as exec/math.h adamw_element element by element (the same IEEE operations in the same order).
  void (*adamw)(const float* w, const float* g, const float* m, const float* v, float* w_out, float* m_out,
                float* v_out, long n, const AdamW& s);
  /// exec/kernels.h cross_entropy, its exponentials, sums and loss in fp64: per row the max m (fp32, exact),
  /// e_j = exp(double(x_j − m)) by SLEEF's fp64 exp, their sum over 16 lanes (column j into lane j mod 16, the
  /// lanes then added pairwise), loss = log(sum) − double(x_y − m) added to loss_sums[i / rows_per_segment],
  /// dlogits_j = float(e_j/sum·scale), float((e_y/sum − 1)·scale) at the target. e: scratch of `vocab` rounded
  /// up to a multiple of 16 doubles.
  void (*cross_entropy)(const float* logits, const int* targets, float* dlogits, double* loss_sums, double* e,
                        long n, int vocab, long rows_per_segment, float scale);
};

/// The rotary embedding's factors lane by lane, for split_heads_rope and merge_heads_rope_backward: from cos and
/// sin, [Tn][hd/2] (exec/kernels.h), C and S, [Tn][hd], with C = (c, c) and S = (−sign·s, sign·s) for each pair
/// (2i, 2i+1); sign 1 forward, −1 backward (exec/math.h rope_rotate). Built once a call, the kernels load them.
void rope_lanes(const float* cos, const float* sin, int Tn, int hd, float sign, float* C, float* S);

/// The kernels of the best instruction set this CPU has, chosen once (AVX-512F+DQ, else AVX2+FMA, else generic).
/// The environment variable TRAINSIM_SIMD=generic|avx2|avx512 picks one instead (for A/B measurements); naming one
/// the CPU lacks throws std::runtime_error.
const Table& table();
/// The table of one instruction set ("avx512", "avx2", "generic"), or nullptr when this CPU cannot run it.
const Table* table_for(const char* name);

// One per translation unit (simd_*.cpp).
const Table& avx512_table();
const Table& avx2_table();
const Table& generic_table();

}  // namespace trainsim::exec::simd
