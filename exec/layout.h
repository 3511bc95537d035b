// Where every parameter of a schedule layer lives in that layer's flat buffer, how the flat buffer is
// sharded, and how it is initialised from a seed (DESIGN §5).
//
// A layer's parameters are one flat fp32 buffer of P elements, in this order: [token embedding (V×d)],
// then per block [attention norm gain (d), Wqkv (3d×d), Wo (d×d), FFN norm gain (d), Wgu (2f×d),
// Wdown (d×f)], then [final norm gain (d), LM head (V×d)]. Matrices are row-major [out, in], as
// torch.nn.Linear stores them. Sharded n ways, the buffer is padded with zeros to n·c elements,
// c = ceil(P/n), and shard i is elements [i·c, (i+1)·c) (FSDP's flat parameter). A tensor holding a set of
// shards stores them back to back in increasing shard order; a complete tensor is the P elements followed
// by its padding, whatever its shard count.
//
// Tensor parallelism (Shoeybi et al. 2019, Megatron-LM; docs/design.md "Tensor parallelism"): the layout of
// TP slice j of t holds the slice's parts of the same parameters, in the same order: the embedding's and the
// LM head's vocabulary rows [j·V/t, (j+1)·V/t); of Wqkv the rows of the slice's heads [j·H/t, (j+1)·H/t) in
// each of q, k and v (3·d/t rows); of Wo those heads' columns (d × d/t); of Wgu the FFN rows [j·f/t,
// (j+1)·f/t) of the gate and of the up projection (2·f/t rows); of Wdown those columns (d × f/t); the norm
// gains whole (replicated on every slice). The slice's parameters are one flat buffer, sharded as above
// (FSDP over a TP slice: W<j/t>[s/n]).
//
// Mixture of Experts (exec/moe.h): an MoE block holds [attention norm gain, Wqkv, Wo, FFN norm gain, router
// (E×d)], then its experts, each [Wgu (2f×d), Wdown (d×f)] ("blocks.3.experts.5.wgu"), in expert order. With
// expert parallelism (a schedule's expert slices W<ej/e>) a layer's plain weight holds everything but the
// experts (ExpertSplit::Dense), and the layout of expert slice j of e holds the experts j·E/e .. (j+1)·E/e − 1
// of the layer's MoE blocks, nothing else (ExpertSplit::Slice). Under TP without expert parallelism (Megatron-LM's
// expert TP with EP 1, torchtitan's TensorParallel of the experts) TP slice j holds every expert's slice j, cut as
// a dense block's Wgu and Wdown: 2·f/t rows of Wgu, f/t columns of Wdown; with expert parallelism too (expert TP
// equal to TP, W<j/t><ei/e>) the layout of TP slice j of expert slice i holds slice j of each of its experts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/model_config.h"
#include "sim/tensor.h"

namespace trainsim::exec {

/// What a parameter is.
enum class ParamRole : std::uint8_t {
  Embedding, AttnNorm, Wqkv, Wo, FfnNorm, Wgu, Wdown, FinalNorm, Head,
  Router, ExpertGu, ExpertDown  ///< an MoE block's router (E×d) and one expert's Wgu (2f×d) and Wdown (d×f)
};

/// One parameter tensor inside a layer's flat buffer.
struct ParamSpec {
  std::string name;   ///< global name, independent of the layer split: "embedding", "blocks.3.wqkv", "head"
  ParamRole role = ParamRole::Embedding;
  int block = -1;     ///< global block index, -1 for embedding / final norm / head
  long rows = 0, cols = 0;  ///< shape (a gain vector is rows = d, cols = 1)
  long offset = 0;    ///< first element in the flat buffer
  bool decay = false; ///< AdamW weight decay applies (matrices: yes; norm gains: no), as nanoGPT groups them
  float init_std = 0; ///< normal(0, init_std); 0 means "initialise to ones" (norm gains)
  // Where this (TP-sliced) parameter sits in the whole one; without TP it is the whole one.
  long full_rows = 0, full_cols = 0;  ///< the whole parameter's shape
  int row_blocks = 1;                 ///< the rows come in this many equal blocks (Wqkv: q, k, v; Wgu: gate, up)
  long row_block_stride = 0;          ///< rows between the starts of two blocks in the whole parameter
  long row_start = 0;                 ///< the whole parameter's row of this one's row 0
  long col_start = 0;                 ///< the whole parameter's column of this one's column 0
  bool tp_replicated = false;         ///< every TP slice holds all of it (norm gains)

  long size() const { return rows * cols; }
  long full_size() const { return full_rows * full_cols; }
  /// Index in the whole parameter (row-major) of element `e` (0 <= e < size()) of this one.
  long full_index(long e) const;
};

/// Offsets of one block's parameters in its layer's flat buffer.
struct BlockOffsets {
  long attn_norm = 0, wqkv = 0, wo = 0, ffn_norm = 0, wgu = 0, wdown = 0;
  int block = -1;          ///< the global block index
  bool moe = false;        ///< an MoE block: router and experts instead of wgu and wdown
  long router = 0;         ///< MoE: the router (E×d)
  long experts = 0;        ///< MoE: expert first_expert's Wgu; expert first_expert + i's at experts + i·3fd
  int first_expert = 0;    ///< MoE: the first expert the layout holds
  int experts_held = 0;    ///< MoE: how many (0: they are in an expert slice's layout)
};

/// Where a layer's experts are (exec/moe.h): in its plain weight (Inside: no expert parallelism), in expert
/// slices (Dense: the plain weight's layout, without them), or the layout of expert slice `index` of `count`.
struct ExpertSplit {
  enum Kind : std::uint8_t { Inside, Dense, Slice } kind = Inside;
  int index = 0, count = 1;
};

/// The parameters of one schedule layer.
class LayerLayout {
 public:
  /// The layout of TP slice `tp_index` of `tp_size` of the layer (the whole layer when tp_size is 1). Throws
  /// std::invalid_argument when the heads, the FFN size or the vocabulary are not multiples of tp_size, naming
  /// them, and for a TP slice of a layer without blocks (a stage layout's embedding or head alone).
  ///
  /// `experts` says where the layer's experts are (an MoE model). Throws std::invalid_argument for an expert slice
  /// whose count does not divide the experts. A TP slice of an ExpertSplit::Dense layer holds the dense part's
  /// slice and the router whole (replicated, as the norm gains); of an ExpertSplit::Inside layer, also every
  /// expert's TP slice (its FFN rows and columns, as a dense block's Wgu and Wdown); of an ExpertSplit::Slice
  /// layout (expert tensor parallelism), the TP slice of each of the slice's experts, cut the same way.
  LayerLayout(const ModelConfig& model, const LayerSpec& spec, int tp_index = 0, int tp_size = 1,
              ExpertSplit experts = {});

  const LayerSpec& spec() const { return spec_; }
  const ModelConfig& model() const { return model_; }
  const std::vector<ParamSpec>& params() const { return params_; }
  /// P: elements of the flat buffer without padding.
  long size() const { return size_; }
  long embedding_offset() const { return embedding_; }       ///< valid when spec().embedding
  long final_norm_offset() const { return final_norm_; }     ///< valid when spec().head
  long head_offset() const { return head_; }                 ///< valid when spec().head
  /// Offsets of the k-th block of this layer (0 <= k < spec().num_blocks).
  const BlockOffsets& block(int k) const { return blocks_.at(k); }
  const ExpertSplit& expert_split() const { return experts_; }
  /// True when the layer holds an MoE block.
  bool has_moe() const;
  int tp_index() const { return tp_index_; }  ///< TP slice j (0 without TP)
  int tp_size() const { return tp_size_; }    ///< TP degree t (1 without TP)
  int heads() const { return model_.heads / tp_size_; }             ///< attention heads of the slice
  int attention_dim() const { return heads() * model_.head_dim(); } ///< d/t: q, k, v widths of the slice
  int ffn() const { return model_.ffn / tp_size_; }                 ///< FFN columns of the slice
  int vocab() const { return model_.vocab / tp_size_; }             ///< vocabulary rows of the slice
  int vocab_start() const { return tp_index_ * vocab(); }           ///< the slice's first token id

 private:
  ModelConfig model_;
  LayerSpec spec_;
  int tp_index_ = 0, tp_size_ = 1;
  ExpertSplit experts_;
  std::vector<ParamSpec> params_;
  std::vector<BlockOffsets> blocks_;
  long size_ = 0, embedding_ = 0, final_norm_ = 0, head_ = 0;
};

/// Elements per shard when P elements are cut into n shards: ceil(P/n).
long shard_chunk(long size, int num_shards);

/// Fills `out[0 .. end-begin)` with elements [begin, end) of the layer's initial flat parameter buffer
/// (padding elements, at P and beyond, are 0). Element e of parameter p is a normal(0, std) draw keyed by
/// (seed, p's global name, e's index inside the whole parameter p), so the same seed gives the same model
/// however the layers, ranks, TP slices and shards cut it. Counter-based: SplitMix64 (Steele et al. 2014) and the Box-Muller transform.
void init_parameters(const LayerLayout& layout, std::uint64_t seed, long begin, long end, float* out);

/// SplitMix64's output function (Steele et al. 2014) of `x`: a well-mixed 64-bit value; counter-based random
/// numbers (the initialisation here, sampling in exec/sampling.h) call it on a key and a counter.
std::uint64_t splitmix64(std::uint64_t x);

/// Floats per element of the flat buffer in each kind of state: weight and weight grad 1, optimizer state
/// 2 (AdamW's first and second moments; the fp32 weight is its own master copy).
int floats_per_element(TensorKind kind);

}  // namespace trainsim::exec
