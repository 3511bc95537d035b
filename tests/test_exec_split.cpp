// Zero-bubble schedules split the backward (Qi et al. 2024): backward-input ("B"/"I") computes the
// activation gradient only, backward-weight ("W") the weight gradients. The split must be real: the
// weight-grad GEMMs run in W, so a ZB-H1 replay does the same work as 1F1B, only moved. Counted here in GEMM
// FLOPs with a counting Kernels decorator, and the split's gradients equal the whole backward's exactly.
#include <doctest/doctest.h>

#include <vector>

#include "exec/cpu/cpu_kernels.h"
#include "exec/layout.h"
#include "exec/model.h"

using namespace trainsim::exec;

namespace {

// CpuKernels that also count GEMM FLOPs (2·M·N·K per product).
struct CountingKernels : CpuKernels<float> {
  double flops = 0;
  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
            float beta, float* C, int ldc) override {
    flops += 2.0 * M * N * K;
    CpuKernels<float>::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void gemm_batched(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, long sa, const float* B,
                    int ldb, long sb, float beta, float* C, int ldc, long sc, int batch) override {
    for (int i = 0; i < batch; ++i) gemm(ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
  }
};

}  // namespace

TEST_CASE("exec model: backward-weight runs every weight-grad GEMM, backward-input none") {
  ModelConfig m = preset("tiny");
  m.blocks = 3;
  for (const LayerSpec& spec : partition(m, 3)) {  // first (embedding), middle, last (head)
    INFO("layer " << spec.index);
    LayerLayout lay(m, spec);
    std::vector<float> w(lay.size());
    init_parameters(lay, 3, 0, lay.size(), w.data());
    const int B = m.microbatch_size;
    const long n = m.tokens_per_microbatch();
    std::vector<int> tokens(n);
    for (long i = 0; i < n; ++i) tokens[i] = static_cast<int>((i * 13) % m.vocab);
    std::vector<float> hidden(n * m.dim);
    for (std::size_t i = 0; i < hidden.size(); ++i) hidden[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
    const void* in = spec.embedding ? static_cast<const void*>(tokens.data()) : hidden.data();
    const long out_n = n * (spec.head ? m.vocab : m.dim);
    std::vector<float> out(out_n), dout(out_n), din(spec.embedding ? 0 : n * m.dim), din2(din.size());
    for (long i = 0; i < out_n; ++i) dout[i] = 0.001f * static_cast<float>((i * 7) % 11) - 0.005f;

    HostAllocator alloc;
    CountingKernels k;
    std::vector<float> cos, sin;
    rope_tables(m, cos, sin);
    ModelContext<float> c{.k = &k, .alloc = &alloc, .rope_cos = cos.data(), .rope_sin = sin.data()};

    // Split: forward, B, W.
    LayerStash stash;
    layer_forward(c, lay, w.data(), in, B, out.data(), &stash);
    k.flops = 0;
    layer_backward_input(c, lay, w.data(), in, dout.data(), din.data(), stash);
    const double b_flops = k.flops;
    std::vector<float> dw(lay.size(), 0.0f);
    k.flops = 0;
    layer_backward_weight(c, lay, in, dout.data(), dw.data(), stash);
    const double w_flops = k.flops;

    // The weight-grad GEMMs: one per weight matrix, 2·n·rows·cols each (the forward's linear FLOPs).
    double expected_w = 0;
    for (const ParamSpec& p : lay.params())
      if (p.cols > 1 && p.role != ParamRole::Embedding) expected_w += 2.0 * n * p.rows * p.cols;
    CHECK(w_flops == expected_w);
    // B does the input-grad GEMMs (as many as W for the linears) plus attention's backward products.
    const double attention_bwd = spec.num_blocks * 4.0 * 2.0 * B * m.heads * m.seq * m.seq * m.head_dim();
    CHECK(b_flops == doctest::Approx(expected_w + attention_bwd - (spec.embedding ? 0 : 0)));

    // The fused path (a second forward, then B and W back to back) gives the same bits.
    LayerStash again;
    layer_forward(c, lay, w.data(), in, B, out.data(), &again);
    std::vector<float> dw2(lay.size(), 0.0f);
    layer_backward_input(c, lay, w.data(), in, dout.data(), din2.data(), again);
    layer_backward_weight(c, lay, in, dout.data(), dw2.data(), again);
    CHECK(dw == dw2);
    CHECK(din == din2);
    // The whole backward (one op: each block's norms' gain grads with their input grads, in one pass) too.
    LayerStash whole;
    layer_forward(c, lay, w.data(), in, B, out.data(), &whole);
    std::vector<float> dw3(lay.size(), 0.0f), din3(din.size());
    layer_backward(c, lay, w.data(), in, dout.data(), din3.data(), dw3.data(), whole);
    CHECK(dw3 == dw);
    CHECK(din3 == din);
    CHECK(alloc.current_bytes() == 0);  // the stashes were released by backward-weight
  }
}
