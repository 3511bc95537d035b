// Per-element arithmetic shared by the CPU kernels and the CUDA kernels (written once, compiled for both):
// SiLU and its derivative, the rotary-embedding rotation, and one AdamW element update.
//
// Each function is `inline` and marked TS_HD so that nvcc compiles it for the device too; on the host it is
// plain C++.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define TS_HD __host__ __device__
#else
#define TS_HD
#endif

namespace trainsim::exec {

/// SiLU (swish): x * sigmoid(x). Source: Shazeer 2020, "GLU Variants Improve Transformer" (SwiGLU).
template <typename T>
TS_HD inline T silu(T x) {
  return x / (T(1) + std::exp(-x));
}

/// d silu(x) / dx = s(x) * (1 + x * (1 - s(x))), s the logistic sigmoid.
template <typename T>
TS_HD inline T silu_grad(T x) {
  T s = T(1) / (T(1) + std::exp(-x));
  return s * (T(1) + x * (T(1) - s));
}

/// Rotates the pair (a, b) by the angle whose cosine and sine are c and s (rotary position embedding, Su et
/// al. 2021; pairs are adjacent elements (2i, 2i+1) of a head, as in Meta's Llama). `sign` = -1 applies
/// the inverse rotation (the backward of the forward rotation is its transpose).
template <typename T>
TS_HD inline void rope_rotate(T& a, T& b, T c, T s, T sign) {
  T x = a, y = b;
  a = x * c - sign * y * s;
  b = sign * x * s + y * c;
}

/// Constants of one AdamW step for one parameter group (torch.optim.AdamW's arithmetic, decoupled weight
/// decay: Loshchilov & Hutter 2019).
struct AdamWStep {
  float lr = 0;             ///< learning rate of this step
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0;   ///< 0 for parameters without decay (norm gains)
  float bias_correction1 = 1;       ///< 1 - beta1^t, t = 1-based step
  float bias_correction2_sqrt = 1;  ///< sqrt(1 - beta2^t)
};

/// One AdamW update of one element, as torch.optim.AdamW (foreach=False) computes it:
///   w *= 1 - lr*wd;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;
///   w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
/// `g` is the gradient already multiplied by the clipping coefficient.
TS_HD inline void adamw_element(float& w, float& m, float& v, float g, const AdamWStep& s) {
  w = w * (1.0f - s.lr * s.weight_decay);
  m = s.beta1 * m + (1.0f - s.beta1) * g;
  v = s.beta2 * v + (1.0f - s.beta2) * g * g;
  float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
  w = w - (s.lr / s.bias_correction1) * (m / denom);
}

}  // namespace trainsim::exec
