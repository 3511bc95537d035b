// How many elements the buffer of a schedule tensor holds in the executor (exec/layout.h for the flat
// parameter layout, exec/model.h for activations).
#pragma once

#include <span>
#include <vector>

#include "exec/layout.h"
#include "sim/tensor.h"

namespace trainsim::exec {

/// The model and its layer split, as the executor sees a schedule.
struct ModelShapes {
  ModelConfig model;
  std::vector<LayerLayout> layouts;  ///< one per schedule layer

  ModelShapes(const ModelConfig& m, int layers);
  int layers() const { return static_cast<int>(layouts.size()); }
  /// P of layer l.
  long parameters(int layer) const { return layouts.at(layer).size(); }
  /// 4-byte elements of the buffer holding `t`: W, dW: |shards|·c (a complete tensor: its padded length,
  /// P when unsharded); O: twice that (exec/layout.h); A, dA: exec/model.h's activation shapes for
  /// |batches|·microbatch_size sequences (A0 holds int32 token ids). Throws std::invalid_argument for a
  /// layer out of range.
  long elements(const Tensor& t) const;
  std::size_t bytes(const Tensor& t) const { return static_cast<std::size_t>(elements(t)) * 4; }
};

/// The tensor of kind `k` among an op's reads or writes. Throws std::invalid_argument when there is none.
const Tensor& tensor_of(std::span<const Tensor> ts, TensorKind k);

/// Position in the buffer of `t` (a W, O or dW tensor of a layer with P elements) of flat element `e`'s
/// shard block: `t` complete -> e; otherwise (index of e's shard in t.shards)·c + e % c, or -1 when t does
/// not hold that shard. For O, multiply by 2 for the block of first moments (exec/layout.h).
long shard_offset(const Tensor& t, long P, long e);

}  // namespace trainsim::exec
