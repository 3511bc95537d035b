// How many elements the buffer of a schedule tensor holds in the executor (exec/layout.h for the flat
// parameter layout, exec/model.h for activations).
#pragma once

#include <map>
#include <span>
#include <vector>

#include "exec/layout.h"
#include "schedules/schedule.h"
#include "sim/tensor.h"

namespace trainsim::exec {

/// The model and its layer split, as the executor sees a schedule.
struct ModelShapes {
  ModelConfig model;
  std::vector<LayerLayout> layouts;  ///< one per schedule layer (the whole layer)
  /// TP degree t -> layer -> slice j: the layouts of TP slices (exec/layout.h), for each degree asked for.
  std::map<int, std::vector<std::vector<LayerLayout>>> tp_layouts;
  /// Expert parallelism: layer -> its EP degree e, for the layers whose experts are in expert slices (their plain
  /// weight's layout then holds the rest: ExpertSplit::Dense), and layer -> slice j: the slices' layouts.
  std::map<int, int> expert_parallel;
  std::map<int, std::vector<LayerLayout>> expert_layouts;
  /// Expert tensor parallelism: TP degree t -> layer -> TP slice j -> expert slice i: the layouts of TP slice j
  /// of each expert slice (every expert's FFN rows and columns, exec/layout.h), for each degree asked for.
  std::map<int, std::map<int, std::vector<std::vector<LayerLayout>>>> expert_tp_layouts;

  /// The layouts of `layers` schedule layers (split as the stage layout `stages` says when given: partition),
  /// of their TP slices for each degree in `tp_sizes` (> 1), and of the expert slices of `expert_parallel`'s
  /// layers (layer -> EP degree: expert_parallel_layers). Throws std::invalid_argument when the model cannot be
  /// split so (exec/model_config.h, exec/layout.h), and for token dropping with expert slices beside TP (each TP
  /// rank would route, and count capacity over, its sequence shard).
  ModelShapes(const ModelConfig& m, int layers, const std::vector<int>& tp_sizes = {},
              const hw::StageLayout* stages = nullptr, const std::map<int, int>& expert_parallel = {});
  int layers() const { return static_cast<int>(layouts.size()); }
  /// P of layer l (whole).
  long parameters(int layer) const { return layouts.at(layer).size(); }
  /// The layout of the W, O or dW tensor `t`: TP slice t.tp_index() of t.tp_size when it is TP-sliced, expert
  /// slice t.ep_index of t.ep_size for an expert slice (its TP slice when both), the whole layer otherwise. Throws std::invalid_argument for
  /// a layer, TP degree or expert slice without a layout.
  const LayerLayout& layout(const Tensor& t) const;
  /// P of the W, O or dW tensor `t` (of its TP slice).
  long parameters(const Tensor& t) const { return layout(t).size(); }
  /// 4-byte elements of the buffer holding `t`: W, dW: |shards|·c (a complete tensor: its padded length,
  /// P when unsharded; P of the TP slice for a slice); O: twice that (exec/layout.h); A, dA: exec/model.h's
  /// activation shapes for |batches|·microbatch_size sequences (A0 holds int32 token ids; the logits' TP slice
  /// V/t columns; a partial sum is as large as the whole; k sequence shards of t, k/t of it: exec/sequence_shard.h);
  /// MoE tokens (exec/moe.h): routed, n·top_k rows of d; an expert slice's, its share n·top_k/e under balanced
  /// routing (the replay sizes them by the routing it gets).
  /// Throws std::invalid_argument for a layer out of range, or a sequence shard of a sequence that does not split.
  long elements(const Tensor& t) const;
  std::size_t bytes(const Tensor& t) const { return static_cast<std::size_t>(elements(t)) * 4; }
  /// Elements per row (per token) of the activation or activation grad `t`: 1 for the token ids (layer 0), the
  /// vocabulary for the logits (V/t for their TP slice), the hidden size otherwise.
  long row_width(const Tensor& t) const;
};

/// Layer -> EP degree of the schedule's expert slices (the layers whose experts are in expert slices). Throws
/// std::invalid_argument when one layer's slices have two EP degrees.
std::map<int, int> expert_parallel_layers(const Schedule& schedule);

/// The tensor of kind `k` among an op's reads or writes. Throws std::invalid_argument when there is none.
const Tensor& tensor_of(std::span<const Tensor> ts, TensorKind k);

/// Position in the buffer of `t` (a W, O or dW tensor of a layer with P elements) of flat element `e`'s
/// shard block: `t` complete -> e; otherwise (index of e's shard in t.shards)·c + e % c, or -1 when t does
/// not hold that shard. For O, multiply by 2 for the block of first moments (exec/layout.h).
long shard_offset(const Tensor& t, long P, long e);

}  // namespace trainsim::exec
