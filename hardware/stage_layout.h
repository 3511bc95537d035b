// Stage layouts: which transformer blocks each schedule layer (a pipeline stage, or a chunk of one) holds, and
// where the embedding and the LM head sit, written as a compact string in the grammar of Megatron-LM's
// `--pipeline-model-parallel-layout` (NVIDIA/Megatron-LM, docs/api-guide/pipeline_parallel_layout.md and
// megatron/core/transformer/pipeline_parallel_layer_layout.py, PipelineParallelLayerLayout.parse_str_to_list):
//
//   Et*3|t*4|t*4|t*3L     four stages of 3, 4, 4 and 3 blocks; the embedding on the first, the LM head on the last
//
// Symbols: `E` the token embedding, `t` one transformer block, `L` the final norm, the LM head and the loss
// (Megatron's "loss" layer: its stage is the one with post_process), `|` ends a stage. `X*n` repeats the symbol
// X n times, `(...)*n` the group (Megatron: `(tt|)*29` is 29 stages of two blocks), commas are cosmetic. As in
// Megatron the unrolled layout must start with `E` and end with `L`, each exactly once; here `E` must be the
// first symbol written and `L` the last (neither repeated nor inside parentheses), which every layout that
// Megatron accepts can be written as. Empty stages are allowed (`E|t*4|t*4|L`: the embedding and the LM head on
// stages of their own). Megatron's `m` (a multi-token-prediction layer) is refused: trainsim's models have none.
//
// The stages listed are the schedule's layers in order (layer 0 first): with looped placement (1F1B,
// interleaved 1F1B: layer = chunk x stages + rank) this is Megatron's own order, where entry k of the layout is
// virtual stage k / p of pipeline rank k mod p; which rank runs a layer is the schedule's stage_map.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace trainsim::hw {

/// What one schedule layer holds.
struct LayerContent {
  int first_block = 0;     ///< index of its first transformer block in the model
  int num_blocks = 0;      ///< transformer blocks (0: only the embedding, only the head, or nothing)
  bool embedding = false;  ///< the token embedding (layer 0)
  bool head = false;       ///< the final norm, the LM head and the loss (the last layer)
  friend bool operator==(const LayerContent&, const LayerContent&) = default;
};

/// A layout string that cannot be read: `position` is the 1-based character of the string where it goes wrong
/// (0 when the whole string is wrong); what() says "position N: ..." with what was expected.
struct LayoutError : std::invalid_argument {
  LayoutError(const std::string& what, int position) : std::invalid_argument(what), position(position) {}
  int position;
};

/// The most stages and the most blocks a layout may hold (1,048,576: the most layers a schedule may have,
/// schedules/limits.h).
inline constexpr int kMaxLayoutCount = 1 << 20;

/// The split that counts the embedding and the LM head as `first_weight` and `last_weight` blocks: the
/// blocks plus the weights spread over `layers` as evenly as they go (the first layers one more), the first
/// and last layers giving up the weights' worth of blocks. torchtitan's generate_llm_fqn_per_model_part
/// (torchtitan/distributed/pipeline_parallel.py; its first/last_stage_less_layers are the weights) and
/// trainsim plan's "balanced" layout (weights 1 and 1, as Megatron-LM's --account-for-embedding-in-pipeline-split
/// and --account-for-loss-in-pipeline-split count them). 13 blocks over 4 layers with weights 1, 1 give
/// {3, 4, 4, 2}. One layer holds every block. Returns the blocks per layer, or an empty vector with `why` (when
/// given) saying why no such split exists, in the words torchtitan refuses it with: more layers than blocks
/// plus weights, a weight above the blocks per layer, or a split that does not place every block.
std::vector<int> weighted_split(int blocks, int layers, int first_weight, int last_weight, std::string* why = nullptr);

/// A stage layout: the blocks of each schedule layer, layer 0 holding the embedding and the last the LM head.
class StageLayout {
 public:
  StageLayout() = default;
  /// From the blocks of each layer, in order. Throws LayoutError when there is no layer, a count is negative,
  /// or the layers or blocks are more than kMaxLayoutCount.
  explicit StageLayout(std::vector<int> blocks_per_layer);

  /// Reads a layout string (the grammar above). Throws LayoutError naming the position and what was expected:
  /// an unknown symbol, `E` not first or `L` not last, a repeat count missing or out of range, an unclosed or
  /// unopened parenthesis, groups nested more than 64 deep, more than kMaxLayoutCount stages or blocks once unrolled
  /// (checked before unrolling: the work is linear in the result). Spaces are refused.
  static StageLayout parse(std::string_view text);
  /// The even split trainsim uses without a layout: layer i of `layers` holds blocks [i·B/L, (i+1)·B/L) (the
  /// floor division spreads the remainder; every layer gets one when B >= L).
  static StageLayout even(int blocks, int layers);

  /// The canonical text: stages joined by `|`, `E` first and `L` last, a stage's blocks as `t` (one) or `t*k`
  /// (k > 1), nothing for none, three or more equal non-empty stages before the last as a group: {3, 4, 4, 3} is
  /// "Et*3|t*4|t*4|t*3L", {1, 2 (62 times), 1} is "Et|(t*2|)*62tL". parse(str()) == *this.
  std::string str() const;
  /// Schedule layers (stages, or stage chunks) it describes.
  int layers() const { return static_cast<int>(blocks_.size()); }
  /// Transformer blocks over every layer.
  int blocks() const { return total_; }
  /// The blocks of each layer, in order.
  const std::vector<int>& blocks_per_layer() const { return blocks_; }
  /// What each layer holds: consecutive blocks, the embedding in layer 0, the head in the last.
  std::vector<LayerContent> contents() const;

  friend bool operator==(const StageLayout&, const StageLayout&) = default;

 private:
  std::vector<int> blocks_;
  int total_ = 0;
};

}  // namespace trainsim::hw
