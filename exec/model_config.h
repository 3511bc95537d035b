// The executor's model: a small Llama-style decoder-only transformer (DESIGN §5), and how a schedule's
// layers map onto it.
//
// Model: token embedding -> blocks -> final RMSNorm -> LM head (untied), softmax cross-entropy on the next
// byte. Each block is pre-norm: x += Wo·attention(rope(Wqkv·rmsnorm(x))); x += Wdown·swiglu(Wgu·rmsnorm(x)),
// with causal multi-head attention and rotary position embedding (Touvron et al. 2023, "LLaMA").
//
// Mixture of Experts (experts > 0; Jiang et al. 2024, "Mixtral of Experts"): the blocks after the first
// `dense_blocks` are MoE blocks, whose FFN is a router and `experts` SwiGLU experts of `ffn` columns each:
// x += Σ_{i in top-k} g_i · Wdown_i·swiglu(Wgu_i·rmsnorm(x)), the gates g the softmax of the router's k largest
// logits (exec/moe.h).
//
// Schedule layer i of L holds blocks [i·B/L, (i+1)·B/L) (B blocks, divisible by L), or with a stage layout
// (the header's `layout` line, hardware/stage_layout.h) the blocks it gives the layer, any number, none for a
// layer of the embedding or the head alone; layer 0 also holds the embedding, layer L-1 the final norm and the
// LM head. The loss op is the cross-entropy on layer L-1's output (the logits).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware/stage_layout.h"

namespace trainsim::exec {

/// The most elements one tensor of the executor may hold (kernels index rows with int; 4 GB of fp32).
inline constexpr double kMaxTensorElements = 1e9;
/// The most parameters a model may have (far beyond any machine's memory; keeps parameters() inside a long).
inline constexpr double kMaxParameters = 1e12;

/// Sizes of the model and of one microbatch.
struct ModelConfig {
  std::string preset = "custom";  ///< the preset it came from (informational)
  int vocab = 256;                ///< vocabulary size (256: byte-level tokens)
  int dim = 32;                   ///< hidden size d
  int heads = 2;                  ///< attention heads; head size = dim / heads (even, for rotary pairs)
  int blocks = 2;                 ///< transformer blocks
  int ffn = 64;                   ///< SwiGLU hidden size f
  int seq = 16;                   ///< tokens per sequence T
  int microbatch_size = 2;        ///< sequences per microbatch
  float rope_theta = 10000.0f;    ///< rotary base
  float norm_eps = 1e-5f;         ///< RMSNorm epsilon
  float init_std = 0.02f;         ///< std of the normal initialisation of matrices (GPT-2's)
  int experts = 0;                ///< routed experts of an MoE block (0: a dense model)
  int top_k = 0;                  ///< experts each token goes to (1 .. experts; 0 for a dense model)
  int dense_blocks = 0;           ///< MoE models: the first blocks, which have a dense FFN (DeepSeek-V3's first 3)
  /// MoE models: token dropping (GShard, Lepikhin et al. 2020; Megatron-LM's --moe-expert-capacity-factor with
  /// its default "probs" drop policy): of a microbatch's n tokens, each expert keeps at most ceil(C·n·top_k/E) of
  /// the (token, slot) pairs routed to it, those of the largest gates (the lower token first among equal ones),
  /// and drops the rest (their expert output and gate count as zero: the token keeps its residual). 0: dropless.
  double capacity_factor = 0;
  /// MoE models: the load-balancing auxiliary loss's coefficient α (Fedus et al. 2021, "Switch Transformers",
  /// eq. 4, for top-k as Megatron-Core's switch_load_balancing_loss_func, --moe-aux-loss-coeff): each MoE block
  /// adds α·E/k · Σ_e f_e·P_e to each microbatch's loss, f_e = the fraction of the microbatch's n·k (token, slot)
  /// pairs the router sends expert e (before any dropping), P_e = the mean over its tokens of the softmax of all E
  /// router logits. α at perfect balance. 0 (default): none. 0 to kMaxAuxLossCoeff.
  double aux_loss_coeff = 0;
  static constexpr double kMaxAuxLossCoeff = 10;

  int head_dim() const { return dim / heads; }
  /// True for a Mixture-of-Experts model.
  bool moe() const { return experts > 0; }
  /// True when global block `b` is an MoE block (b >= dense_blocks of an MoE model).
  bool moe_block(int b) const { return moe() && b >= dense_blocks; }
  /// Tokens in one microbatch: microbatch_size · seq.
  long tokens_per_microbatch() const { return static_cast<long>(microbatch_size) * seq; }
  /// Throws std::invalid_argument naming the first bad field, or the first matrix or per-microbatch tensor that
  /// would hold more than kMaxTensorElements, or a model of more than kMaxParameters.
  void validate() const;
  /// Parameters of the whole model (every expert's).
  long parameters() const;
  /// Parameters one token's forward uses: all but the experts it is not routed to (top_k of `experts`).
  long active_parameters() const;
  /// Training FLOPs per token, as nanoGPT's and llm.c's MFU estimates count them: 6·N (N the active parameters
  /// without the embedding table, which is a lookup; Megatron-LM counts MoE so) plus attention
  /// 12·blocks·dim·seq (QK^T and PV, 4·T·d per token and block in the forward, three times that with the
  /// backward; the causal mask not halved).
  double flops_per_token() const;
  /// "tiny: 2 blocks, dim 32, 2 heads, ffn 64, seq 16, 2 sequences/microbatch, 37024 parameters".
  std::string describe() const;

  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

/// The named presets: "tiny" (tests; a step takes milliseconds) and "small" (the default: trains visibly on
/// a 2-core machine in about a minute), and their Mixture-of-Experts variants, Mixtral-like (every block an MoE
/// block; --dense-blocks makes the first ones dense): "tiny-moe" (tiny with 4 experts, top-2) and "small-moe"
/// (small with 8 experts of ffn 384, top-2: a token runs 2 × 384 FFN columns per block, as small's run 768).
const std::vector<std::string>& preset_names();
/// The preset called `name`. Throws std::invalid_argument listing the presets.
ModelConfig preset(const std::string& name);

/// What one schedule layer holds.
struct LayerSpec {
  int index = 0;        ///< schedule layer
  int first_block = 0;  ///< first transformer block
  int num_blocks = 0;
  bool embedding = false;  ///< holds the token embedding (layer 0)
  bool head = false;       ///< holds the final norm and the LM head (the last layer)
};

/// The layer → blocks map for a schedule of `layers` layers: `layout`'s (hardware/stage_layout.h, the header's
/// `layout` line) when given, else equal chunks. Throws std::invalid_argument when, without a layout, the blocks
/// are not a positive multiple of the layers, naming both and suggesting a block count; with one, when its
/// stages are not the layers, its blocks not the model's, or a layer holds nothing (no block, embedding or head:
/// the executor needs each layer to compute something).
std::vector<LayerSpec> partition(const ModelConfig& model, int layers, const hw::StageLayout* layout = nullptr);

nlohmann::json to_json(const ModelConfig& m);
/// Throws std::invalid_argument for a missing or mistyped field, an integer beyond an int or a number a float
/// cannot hold (never narrowed).
ModelConfig model_from_json(const nlohmann::json& j);

}  // namespace trainsim::exec
