// A Hugging Face transformers `config.json` as a trainsim model: the file users have for their models (the Llama,
// Mistral and Qwen families: transformers' LlamaConfig, MistralConfig, Qwen2Config and Qwen3Config fields; the
// Mixtures of Experts of MixtralConfig, Qwen3MoeConfig and DeepSeek-V3's DeepseekV3Config, docs/frameworks.md).
//
// num_hidden_layers -> blocks, hidden_size -> hidden, num_attention_heads -> heads, num_key_value_heads ->
// kv_heads (absent: heads), intermediate_size -> ffn (gated: these families' MLP is SwiGLU, gate_proj, up_proj and
// down_proj), vocab_size -> vocab, tie_word_embeddings -> tied_embeddings (absent: false), RMSNorm, rotary
// positions, no dropout, no biases (Qwen2's query/key/value biases, 3·(h + 2kv) parameters a block, are left out
// and said so). The default sequence length is the one the model was trained with: rope_scaling's
// original_max_position_embeddings where the context was extended afterwards (Llama 3.1: 8,192 of 131,072), else
// max_position_embeddings; `--seq` sets another. Precision as trainsim's presets (bf16 weights and activations,
// fp32 grads and AdamW state).
//
// head_dim -> head_channels (Qwen3's 128 where hidden / heads is 64). Refused, naming the field: experts in a
// family without them, experts that are not the blocks after the dense ones, an activation other than SiLU, a
// model_type outside the families above.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware/model.h"

namespace trainsim::interop {

/// True when `j` is a Hugging Face config rather than trainsim's model JSON (it has "model_type" or
/// "architectures" and "num_hidden_layers").
bool is_hf_config(const nlohmann::json& j);

/// The model a Hugging Face config describes (see the header comment), validated, with its preset "custom".
/// `where` names the file in errors; `notes` (when given) receives what was assumed or left out, one sentence each.
/// Throws hw::SpecError "<where>: field 'x': ..." for a field missing, of the wrong type or not modelled.
hw::ModelSpec model_from_hf_config(const nlohmann::json& j, const std::string& where,
                                   std::vector<std::string>* notes = nullptr);

/// A model from a command-line value: a preset, trainsim's model JSON, or a Hugging Face config.json (a file whose
/// JSON is_hf_config). Throws hw::SpecError naming the file and field.
hw::ModelSpec load_model(const std::string& value, std::vector<std::string>* notes = nullptr);

}  // namespace trainsim::interop
