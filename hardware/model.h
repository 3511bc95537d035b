// Transformer model descriptions for the hardware cost model (DESIGN §2): published presets, the executor's
// own presets, custom models from JSON, and parameter counts.
//
// A model is a decoder-only transformer: token embedding (plus learned positions for GPT-2), `blocks`
// pre-norm blocks (attention with `heads` query heads and `kv_heads` key/value heads; an MLP of width `ffn`,
// gated SwiGLU with three matrices or GeLU with two), a final norm and an LM head (tied to the embedding or
// not). Precision is a byte count per element of each kind of state (mixed precision: bf16 weights and
// activations, fp32 grads, master weights and AdamW moments).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware/fields.h"

namespace trainsim::hw {

/// Sizes and precision of a model.
struct ModelSpec {
  std::string preset = "custom";  ///< name of the preset it was built from (the header's first word)
  int blocks = 0;                 ///< transformer blocks ("layers" in the papers)
  int hidden = 0;                 ///< hidden size h
  int heads = 0;                  ///< attention (query) heads a; head size h/a
  int kv_heads = 0;               ///< key/value heads (grouped-query attention); 0 = heads (multi-head)
  int ffn = 0;                    ///< MLP hidden size f
  int vocab = 0;                  ///< vocabulary size V
  int seq = 0;                    ///< default sequence length s (tokens per sequence)
  bool gated_ffn = true;          ///< SwiGLU (gate, up, down) rather than GeLU (up, down)
  bool bias = false;              ///< linear layers have biases (GPT-2)
  bool layernorm = false;         ///< LayerNorm (gain and bias) rather than RMSNorm (gain)
  bool tied_embeddings = false;   ///< the LM head reuses the embedding matrix
  bool learned_positions = false; ///< a learned position embedding of seq x hidden (GPT-2)
  bool dropout = false;           ///< dropout masks are kept for the backward (1 byte per element)
  int weight_bytes = 2;           ///< bytes per weight element used in compute (bf16)
  /// bytes per weight-grad element: fp32, as both frameworks keep and reduce them under bf16 mixed precision
  /// (Megatron-LM's main_grad buffers, accumulate_allreduce_grads_in_fp32 on with --bf16; torchtitan's FSDP2
  /// reduce_dtype float32 into fp32 sharded grads)
  int grad_bytes = 4;
  int master_bytes = 4;           ///< bytes per fp32 master weight (0: the weights are their own master)
  int optimizer_bytes = 8;        ///< bytes of AdamW moments per parameter (fp32 m and v)
  int activation_bytes = 2;       ///< bytes per activation element (bf16)

  int head_dim() const { return hidden / heads; }
  /// Width of the K (and of the V) projection: kv_heads x head size.
  long long kv_width() const { return static_cast<long long>(kv_heads > 0 ? kv_heads : heads) * head_dim(); }
  /// Parameters of one block (attention, MLP, two norms; biases when `bias`).
  double block_parameters() const;
  /// Parameters of the embedding (token table, plus positions when learned).
  double embedding_parameters() const;
  /// Parameters of the final norm and, unless tied, the LM head.
  double head_parameters() const;
  /// Every parameter (a tied matrix counted once).
  double parameters() const;
  /// Parameters that take part in matrix multiplies per token: everything but the embedding lookups
  /// (the LM head's matrix counts even when tied). The N of "6·N" in MFU (as torchtitan and llm.c count).
  double dense_parameters() const;
  /// Training FLOPs per token for MFU: 6·N (N = dense_parameters()) plus attention 12·blocks·h·s (QK^T and
  /// attention·V, 4·s·h per token and block forward, three times that with the backward; the causal mask not
  /// halved), as llm.c and torchtitan count them (DESIGN §2).
  double flops_per_token(int seq) const;
  /// Throws SpecError "<where>: field 'x': ..." for an impossible model.
  void validate(const std::string& where) const;

  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

/// The fields of a ModelSpec (for JSON, overrides and printing).
const std::vector<Field<ModelSpec>>& model_fields();
/// The preset names: gpt2-124m, gpt2-1.5b, llama2-13b, llama2-70b, llama3-8b, llama3-70b, llama3-405b, tiny,
/// small, custom.
const std::vector<std::string>& model_preset_names();
/// The preset called `name`. Throws SpecError listing the presets.
ModelSpec model_preset(const std::string& name);
/// A model from a JSON object: {"preset": base (optional, default "custom"), field: value ...}. `where`
/// names the file in errors. Validated.
ModelSpec model_from_json(const nlohmann::json& j, const std::string& where);
/// Every field as JSON, with "preset" first.
nlohmann::ordered_json to_json(const ModelSpec& m);

}  // namespace trainsim::hw
