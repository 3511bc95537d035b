#include "interop/hf_config.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "hardware/setting.h"

namespace trainsim::interop {

namespace {

// The model types whose config fields and block are the Llama family's (transformers' LlamaConfig,
// MistralConfig, Qwen2Config, Qwen3Config: RMSNorm, rotary embedding, SwiGLU with gate, up and down projections).
const char* const kFamilies[] = {"llama", "mistral", "qwen2", "qwen3"};

// An integer field of at least `min` (at most INT_MAX), or `fallback` when absent (fallback < min: required).
int integer(const nlohmann::json& j, const std::string& where, const char* field, long long fallback, long long min = 1) {
  if (!j.contains(field) || j[field].is_null()) {
    if (fallback < min) throw hw::SpecError(fmt::format("{}: field '{}': needed for the model, and missing", where, field));
    return static_cast<int>(fallback);
  }
  const nlohmann::json& v = j[field];
  if (!v.is_number_integer())
    throw hw::SpecError(fmt::format("{}: field '{}': expected an integer, got {}", where, field, v.dump()));
  const long long n = v.get<long long>();
  if (n < min || n > std::numeric_limits<int>::max())
    throw hw::SpecError(fmt::format("{}: field '{}': must be {} to {}, got {}", where, field, min,
                                    std::numeric_limits<int>::max(), n));
  return static_cast<int>(n);
}

}  // namespace

bool is_hf_config(const nlohmann::json& j) {
  return j.is_object() && (j.contains("model_type") || j.contains("architectures")) && j.contains("num_hidden_layers");
}

hw::ModelSpec model_from_hf_config(const nlohmann::json& j, const std::string& where, std::vector<std::string>* notes) {
  if (!j.is_object()) throw hw::SpecError(fmt::format("{}: expected a JSON object (a Hugging Face config.json)", where));
  const std::string type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  if (std::find(std::begin(kFamilies), std::end(kFamilies), type) == std::end(kFamilies))
    throw hw::SpecError(fmt::format(
        "{}: field 'model_type': '{}' is not a family trainsim reads (llama, mistral, qwen2, qwen3: RMSNorm, rotary "
        "positions, a SwiGLU MLP); describe the model as trainsim's model JSON instead (docs/hardware-model.md)",
        where, type));
  for (const char* moe : {"num_local_experts", "num_experts", "n_routed_experts"})
    if (j.contains(moe) && !j[moe].is_null() && !(j[moe].is_number() && j[moe].get<double>() <= 1))
      throw hw::SpecError(fmt::format("{}: field '{}': a mixture of experts is not modelled yet", where, moe));
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    throw hw::SpecError(fmt::format("{}: field 'hidden_act': {} is not modelled (the families' SwiGLU uses silu)", where,
                                    j["hidden_act"].dump()));
  hw::ModelSpec m = hw::model_preset("custom");
  m.preset = "custom";
  m.blocks = integer(j, where, "num_hidden_layers", 0);
  m.hidden = integer(j, where, "hidden_size", 0);
  m.heads = integer(j, where, "num_attention_heads", 0);
  m.kv_heads = integer(j, where, "num_key_value_heads", m.heads);
  m.ffn = integer(j, where, "intermediate_size", 0);
  m.vocab = integer(j, where, "vocab_size", 0);
  if (m.heads > 0 && j.contains("head_dim") && !j["head_dim"].is_null() &&
      integer(j, where, "head_dim", 1) != m.hidden / m.heads)
    throw hw::SpecError(fmt::format(
        "{}: field 'head_dim': {} differs from hidden_size / num_attention_heads = {}, which trainsim's attention "
        "assumes",
        where, j["head_dim"].dump(), m.hidden / m.heads));
  // The length it was trained with: before a rope scaling extended the context, else the position limit.
  int seq = integer(j, where, "max_position_embeddings", 4096);
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object() &&
      j["rope_scaling"].contains("original_max_position_embeddings"))
    seq = integer(j["rope_scaling"], where + " rope_scaling", "original_max_position_embeddings", seq);
  m.seq = seq;
  m.gated_ffn = true, m.layernorm = false, m.learned_positions = false, m.dropout = false, m.bias = false;
  m.tied_embeddings = j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean() &&
                      j["tie_word_embeddings"].get<bool>();
  if (notes && ((j.contains("attention_bias") && j["attention_bias"] == true) || type == "qwen2"))
    notes->push_back("the query, key and value biases are left out (3·(hidden + 2·kv) parameters a block)");
  m.validate(where);
  return m;
}

hw::ModelSpec load_model(const std::string& value, std::vector<std::string>* notes) {
  if (!hw::is_json_path(value)) return hw::load_model(value);
  const nlohmann::json j = hw::read_json_file(value);
  if (is_hf_config(j)) return model_from_hf_config(j, value, notes);
  return hw::model_from_json(j, value);
}

}  // namespace trainsim::interop
