// CpuKernels' causal attention by blocks of queries (exec/cpu/cpu_kernels.h). For head (b, h) and the query block
// [r0, r0 + rows), keys [0, e = r0 + rows):
//   forward   S = q_blk·k[0,e)ᵀ -> P rows (causal softmax, zeros after each row's diagonal) -> out_blk = P·v[0,e)
//   backward  dP = dout_blk·v[0,e)ᵀ -> dS (softmax backward) -> dq_blk = dS·k[0,e); then per key block
//             [c0, c0 + cols): dv = P[c0.., c0..]ᵀ·dout[c0..], dk = dS[c0.., c0..]ᵀ·q[c0..] (rows below c0 only).
// Nothing above the diagonal blocks is computed, read or written. out and dout stay in the merged (B·T × H·hd)
// layout: the GEMMs address a head's columns with leading dimension H·hd. The GEMMs go through gemm() (virtual), so
// that a decorator of the kernels (a FLOP counter, a timer) sees them.
#include "exec/cpu/cpu_kernels.h"

#include <algorithm>

#include "exec/cpu/cpu_rows.h"

namespace trainsim::exec {

template <typename T>
long CpuKernels<T>::attention_scratch_elements(int, int Tn, int, int, bool backward) const {
  return backward ? static_cast<long>(Tn) * Tn : 0;
}

template <typename T>
void CpuKernels<T>::attention_forward(const T* q, const T* k, const T* v, T* probs, T* out, T*, int B, int Tn, int H,
                                      int hd, T scale) {
  const long d = static_cast<long>(H) * hd, tt = static_cast<long>(Tn) * Tn, th = static_cast<long>(Tn) * hd;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const long bh = static_cast<long>(b) * H + h;
      const T *Q = q + bh * th, *K = k + bh * th, *Vv = v + bh * th;
      T* P = probs + bh * tt;
      T* O = out + static_cast<long>(b) * Tn * d + static_cast<long>(h) * hd;
      for (int r0 = 0; r0 < Tn; r0 += kAttentionBlock) {
        const int rows = std::min(kAttentionBlock, Tn - r0), e = r0 + rows;
        T* S = P + static_cast<long>(r0) * Tn;
        this->gemm(false, true, rows, e, hd, T(1), Q + static_cast<long>(r0) * hd, hd, K, hd, T(0), S, Tn);
        cpu_detail::causal_softmax_rows(S, Tn, rows, r0, e, scale);
        this->gemm(false, false, rows, hd, e, T(1), S, Tn, Vv, hd, T(0), O + r0 * d, static_cast<int>(d));
      }
    }
}

template <typename T>
void CpuKernels<T>::attention_backward(const T* q, const T* k, const T* v, const T* probs, const T* dout, T* dq, T* dk,
                                       T* dv, T* scratch, int B, int Tn, int H, int hd, T scale) {
  const long d = static_cast<long>(H) * hd, tt = static_cast<long>(Tn) * Tn, th = static_cast<long>(Tn) * hd;
  const int ld = static_cast<int>(d);
  T* G = scratch;  // one head's dS (Tn × Tn), the blocks at or below the diagonal
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const long bh = static_cast<long>(b) * H + h;
      const T *Q = q + bh * th, *K = k + bh * th, *Vv = v + bh * th, *P = probs + bh * tt;
      const T* dO = dout + static_cast<long>(b) * Tn * d + static_cast<long>(h) * hd;
      T *dQ = dq + bh * th, *dK = dk + bh * th, *dV = dv + bh * th;
      for (int r0 = 0; r0 < Tn; r0 += kAttentionBlock) {
        const int rows = std::min(kAttentionBlock, Tn - r0), e = r0 + rows;
        T* Gs = G + static_cast<long>(r0) * Tn;
        this->gemm(false, true, rows, e, hd, T(1), dO + r0 * d, ld, Vv, hd, T(0), Gs, Tn);
        cpu_detail::causal_softmax_backward_rows(P + static_cast<long>(r0) * Tn, Tn, Gs, Tn, rows, r0, e, scale);
        this->gemm(false, false, rows, hd, e, T(1), Gs, Tn, K, hd, T(0), dQ + static_cast<long>(r0) * hd, hd);
      }
      for (int c0 = 0; c0 < Tn; c0 += kAttentionBlock) {
        const int cols = std::min(kAttentionBlock, Tn - c0), below = Tn - c0;
        const long at = static_cast<long>(c0) * Tn + c0;
        this->gemm(true, false, cols, hd, below, T(1), P + at, Tn, dO + c0 * d, ld, T(0), dV + static_cast<long>(c0) * hd,
                  hd);
        this->gemm(true, false, cols, hd, below, T(1), G + at, Tn, Q + static_cast<long>(c0) * hd, hd, T(0),
                  dK + static_cast<long>(c0) * hd, hd);
      }
    }
}

// The class is instantiated in cpu_kernels.cpp; these members are defined here.
#define TRAINSIM_INSTANTIATE(T)                                                                                    \
  template long CpuKernels<T>::attention_scratch_elements(int, int, int, int, bool) const;                         \
  template void CpuKernels<T>::attention_forward(const T*, const T*, const T*, T*, T*, T*, int, int, int, int, T); \
  template void CpuKernels<T>::attention_backward(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, T*, \
                                                  int, int, int, int, T);
TRAINSIM_INSTANTIATE(float)
TRAINSIM_INSTANTIATE(double)
#undef TRAINSIM_INSTANTIATE

}  // namespace trainsim::exec
