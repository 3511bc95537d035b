// The model's compute for one schedule layer (exec/model_config.h), written once against Kernels<T> so
// that every backend runs the same arithmetic: forward, backward-input (the activation gradient) and
// backward-weight (the weight gradients), the last two split as zero-bubble schedules need (Qi et al.
// 2024: B and W), and the cross-entropy loss.
//
// Activations between layers: layer 0 reads token ids (n = B·T int32); a middle layer reads and writes the
// residual stream (n×d); the last layer writes logits (n×V). The forward keeps what the backward needs in a
// LayerStash (the saved activations); backward-input keeps what backward-weight needs and drops the rest.
#pragma once

#include <memory>
#include <vector>

#include "exec/buffer.h"
#include "exec/kernels.h"
#include "exec/layout.h"

namespace trainsim::exec {

/// What the model's functions run on.
template <typename T>
struct ModelContext {
  Kernels<T>* k = nullptr;
  Allocator* alloc = nullptr;
  const T* rope_cos = nullptr;  ///< T × hd/2, backend memory (rope_tables())
  const T* rope_sin = nullptr;
};

/// cos and sin of the rotary angles t·theta^(-2i/hd), t < seq, i < hd/2, row-major (host memory).
template <typename T>
void rope_tables(const ModelConfig& model, std::vector<T>& cos, std::vector<T>& sin);

/// Saved activations of one block (forward) and its output gradients (backward-input).
struct BlockStash {
  BufferPtr x_in, xn1, rstd1, q, k, v, probs, att, h, xn2, rstd2, gu, act;  // forward
  BufferPtr d_out, dgu, dxn2, dh, dqkv, dxn1;                                // backward-input, for backward-weight
};

/// Saved activations of one layer for one batch set.
struct LayerStash {
  int sequences = 0;  ///< B of the forward that made it
  std::vector<BlockStash> blocks;
  BufferPtr x_final, xnf, rstdf;  // head: the last block's output, its norm and rstd
  BufferPtr dxnf;                  // head: grad of the normed input, for the final norm's gain
  BufferPtr dx0;                   // embedding: grad of the embedding output
  bool input_grads_done = false;   ///< backward-input ran: backward-weight may run
  /// Bytes held.
  std::size_t bytes() const;
};

/// Elements of the activation entering layer `l` of `layers` for B sequences: tokens (layer 0, int32),
/// hidden states (0 < l < layers) or logits (l == layers). The activation grad has the same shape, except
/// at layer 0, where it is empty (nothing flows into token ids).
long activation_elements(const ModelConfig& model, int l, int layers, int sequences);
long activation_grad_elements(const ModelConfig& model, int l, int layers, int sequences);

/// Forward of the layer for B = `sequences` sequences: `in` is tokens (int32, embedding layer) or hidden
/// states (T elements); `out` receives hidden states or logits. With a stash, keeps the saved activations.
template <typename T>
void layer_forward(ModelContext<T>& c, const LayerLayout& layout, const T* W, const void* in, int sequences, T* out,
                   LayerStash* stash);

/// Backward-input: from `dout` (grad of the layer's output) computes `din` (grad of its input `in`; ignored
/// for the embedding layer) and keeps the output grads backward-weight needs. Needs the forward's stash
/// (std::logic_error otherwise).
template <typename T>
void layer_backward_input(ModelContext<T>& c, const LayerLayout& layout, const T* W, const void* in, const T* dout,
                          T* din, LayerStash& stash);

/// Backward-weight: writes the whole flat gradient dW (P elements, the padding untouched) from the stash of
/// backward-input, `in` (tokens, for the embedding) and `dout` (the layer's output grad). Drops the stash's
/// buffers.
template <typename T>
void layer_backward_weight(ModelContext<T>& c, const LayerLayout& layout, const void* in, const T* dout, T* dW,
                           LayerStash& stash);

/// Softmax cross-entropy of `logits` (B·T × V) against `targets` (B·T): writes dlogits scaled by `scale`
/// (1 / tokens of the whole step, so that grads summed over microbatches are the mean's) and adds each
/// microbatch's summed loss to loss_sums[0 .. B/microbatch_size) (double, backend memory).
template <typename T>
void loss_forward_backward(ModelContext<T>& c, const ModelConfig& model, const T* logits, const int* targets,
                           int sequences, T scale, T* dlogits, double* loss_sums);

}  // namespace trainsim::exec
