#include "interop/hf_config.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "hardware/setting.h"

namespace trainsim::interop {

namespace {

// The model types whose config fields and block are the Llama family's (transformers' LlamaConfig,
// MistralConfig, Qwen2Config, Qwen3Config: RMSNorm, rotary embedding, SwiGLU with gate, up and down projections),
// and the two whose MoE blocks are that block with its MLP made experts (MixtralConfig: num_local_experts of
// intermediate_size, num_experts_per_tok; Qwen3MoeConfig: num_experts of moe_intermediate_size, no shared expert);
// and DeepSeek-V3's (DeepseekV3Config: multi-head latent attention, n_routed_experts and n_shared_experts of
// moe_intermediate_size after first_k_dense_replace dense blocks).
const char* const kFamilies[] = {"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "deepseek_v3"};

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
        "positions, a SwiGLU MLP; mixtral, qwen3_moe, deepseek_v3: their Mixtures of Experts); describe the model "
        "as trainsim's model JSON instead (docs/hardware-model.md)",
        where, type));
  const bool moe_family = type == "mixtral" || type == "qwen3_moe" || type == "deepseek_v3";
  if (!moe_family)
    for (const char* moe : {"num_local_experts", "num_experts", "n_routed_experts"})
      if (j.contains(moe) && !j[moe].is_null() && !(j[moe].is_number() && j[moe].get<double>() <= 1))
        throw hw::SpecError(fmt::format("{}: field '{}': experts in a '{}' model are not read (trainsim reads the "
                                        "experts of mixtral, qwen3_moe and deepseek_v3 configs)",
                                        where, moe, type));
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
  // A head size of its own (Qwen3: 128 where hidden / heads is 64 or 80); the same as hidden / heads is the default.
  if (m.heads > 0 && j.contains("head_dim") && !j["head_dim"].is_null()) {
    const int d = integer(j, where, "head_dim", 1);
    if (m.hidden % m.heads != 0 || d != m.hidden / m.heads) m.head_channels = d;
  }
  if (type == "mixtral") {
    m.experts = integer(j, where, "num_local_experts", 0);
    m.top_k = integer(j, where, "num_experts_per_tok", 0);
    m.expert_ffn = m.ffn;  // each expert is the MLP of intermediate_size
  } else if (type == "qwen3_moe") {
    m.experts = integer(j, where, "num_experts", 0);
    m.top_k = integer(j, where, "num_experts_per_tok", 0);
    m.expert_ffn = integer(j, where, "moe_intermediate_size", 0);
    // Qwen3MoeDecoderLayer: block i has experts unless i is in mlp_only_layers, when num_experts > 0 and
    // (i + 1) % decoder_sparse_step == 0. trainsim's MoE models have their dense blocks first.
    if (integer(j, where, "decoder_sparse_step", 1) != 1)
      throw hw::SpecError(fmt::format("{}: field 'decoder_sparse_step': {} (experts in every k-th block) is not "
                                      "modelled: trainsim's MoE blocks follow the dense ones (1 is)",
                                      where, j["decoder_sparse_step"].dump()));
    if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
      const nlohmann::json& dense = j["mlp_only_layers"];
      bool prefix = dense.is_array();
      for (std::size_t i = 0; prefix && i < dense.size(); ++i)
        prefix = dense[i].is_number_integer() && dense[i].get<long long>() == static_cast<long long>(i);
      if (!prefix)
        throw hw::SpecError(fmt::format("{}: field 'mlp_only_layers': {} is not modelled: trainsim's dense blocks are "
                                        "the first ones ([], [0], [0, 1], ...)",
                                        where, dense.dump()));
      m.dense_blocks = static_cast<int>(dense.size());
    }
  }
  if (type == "deepseek_v3") {
    // Multi-head latent attention (DeepSeek-V2 §2.1): every head's key and value from one latent, so no key/value
    // head count of its own; a head's query and key are qk_nope_head_dim + qk_rope_head_dim wide.
    m.kv_heads = 0;
    m.q_lora_rank = j.contains("q_lora_rank") && j["q_lora_rank"].is_null() ? 0 : integer(j, where, "q_lora_rank", 0, 0);
    m.kv_lora_rank = integer(j, where, "kv_lora_rank", 0);
    m.head_channels = integer(j, where, "qk_nope_head_dim", 0);
    m.rope_head_dim = integer(j, where, "qk_rope_head_dim", 0);
    m.v_head_dim = integer(j, where, "v_head_dim", 0);
    m.experts = integer(j, where, "n_routed_experts", 0);
    m.top_k = integer(j, where, "num_experts_per_tok", 0);
    m.expert_ffn = integer(j, where, "moe_intermediate_size", 0);
    m.shared_experts = integer(j, where, "n_shared_experts", 0, 0);
    m.dense_blocks = integer(j, where, "first_k_dense_replace", 0, 0);
    // Group-limited routing (DeepSeek-V3 §2.1.2): the experts in n_group groups, a token's in its topk_group best.
    m.router_groups = integer(j, where, "n_group", 0, 0);
    if (m.router_groups > 1 && !j.contains("topk_group"))
      throw hw::SpecError(fmt::format("{}: field 'topk_group' is missing: n_group {} limits each token to its best "
                                      "topk_group groups",
                                      where, m.router_groups));
    m.router_group_topk = m.router_groups > 0 ? integer(j, where, "topk_group", 0, 1) : 0;
    if (m.router_groups == 1) m.router_groups = 0, m.router_group_topk = 0;  // (one group: no restriction)
    if (integer(j, where, "moe_layer_freq", 1) != 1)
      throw hw::SpecError(fmt::format("{}: field 'moe_layer_freq': {} (experts in every k-th block after the dense "
                                      "ones) is not modelled: trainsim's MoE blocks follow the dense ones (1 is)",
                                      where, j["moe_layer_freq"].dump()));
    if (notes) {
      if (integer(j, where, "num_nextn_predict_layers", 0, 0) > 0)
        notes->push_back("the multi-token-prediction module (num_nextn_predict_layers) is left out");
      notes->push_back("the router's sigmoid scores and bias are timed as a softmax router's");
    }
  }
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
