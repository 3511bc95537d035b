// Sequence parallelism in the executor (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models", §4.2.2; docs/executor.md "Sequence parallelism"): where the rows of a sequence shard of
// an activation or activation grad lie, and the copies that put the pieces of the schedule's all-gather and
// reduce-scatter of sequence shards in place.
//
// An activation (or its grad) of S sequences of T tokens is S·T rows, sequence-major (row i·T + p is token p of
// sequence i), each row `width` elements. Sequence shard j of t holds of every sequence the tokens
// [j·T/t, (j+1)·T/t), as Megatron-LM's sequence parallelism splits the sequence dimension of its [s, b, h]
// activations: rows i·T + j·T/t .. i·T + (j+1)·T/t − 1 for each i < S. A tensor holding a set of shards stores
// the rows it holds in their order in the whole tensor (per sequence, its shards in increasing order); a
// complete one is the whole tensor. T must be a multiple of t.
#pragma once

#include <vector>

#include "exec/shapes.h"

namespace trainsim::exec {

/// How the rows of one activation or activation grad split into sequence shards.
struct SequenceShards {
  long sequences = 0;  ///< S: |batches| · microbatch_size
  long rows = 0;       ///< T / t: rows of one sequence in one shard
  long width = 0;      ///< elements per row: 1 (token ids), d (hidden states), V or V/t (logits)
  int count = 1;       ///< t: the shards a sequence splits into
  /// Elements of one sequence's rows in one shard.
  long block() const { return rows * width; }
};

/// The split of activation or activation grad `t` into its t.num_shards sequence shards. Throws
/// std::invalid_argument naming the tensor when the sequence length is not a multiple of t.num_shards
/// ("A1{0}[0/3] is sequence shard 0 of 3, but a sequence of 16 tokens does not split into 3 equal shards ...").
SequenceShards sequence_shards(const ModelShapes& shapes, const Tensor& t);

/// A contiguous copy of `count` elements from offset `src` to offset `dst`.
struct CopyRun {
  long src = 0, dst = 0, count = 0;
  friend bool operator==(const CopyRun&, const CopyRun&) = default;
};

/// The copies that turn the member-major buffer an all-gather returns into the gathered tensor. The buffer
/// holds k pieces of `per` shards each, piece q as that member stores its shards; the result holds `held`
/// shards (in increasing shard order), and shard u of them (the u-th) is the x-th shard of piece q where
/// q·per + x = order[u] (order empty: u itself). Adjacent copies are merged: one run {0, 0, all} means the
/// buffer is already the result.
std::vector<CopyRun> gather_copies(const SequenceShards& s, int held, int per, const std::vector<int>& order);

/// The copies that lay a whole tensor out as the k = s.count pieces a reduce-scatter sums and hands out, piece m
/// being sequence shard m (what member m keeps). Merged as gather_copies's.
std::vector<CopyRun> scatter_copies(const SequenceShards& s);

/// True when `runs` is the identity on `elements` elements (one run from 0 to 0 of them all).
bool is_identity(const std::vector<CopyRun>& runs, long elements);

}  // namespace trainsim::exec
