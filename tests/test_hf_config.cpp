// A Hugging Face config.json as --model (interop/hf_config.h): Llama 3.1 8B's own file describes trainsim's
// llama3-8b, so that the same model asked for by its preset or by the file users have gets one prediction; the
// families' variants (Qwen2's biases, tied embeddings) and what is not modelled (experts, a head size of its own).
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "hardware/model.h"
#include "hardware/setting.h"
#include "interop/hf_config.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// meta-llama/Llama-3.1-8B's config.json (transformers 4.43), as published.
const char* kLlama31_8b = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

std::string refusal(const nlohmann::json& j) {
  try {
    interop::model_from_hf_config(j, "config.json");
  } catch (const hw::SpecError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("hf config: Llama 3.1 8B's config.json is trainsim's llama3-8b") {
  const nlohmann::json j = nlohmann::json::parse(kLlama31_8b);
  CHECK(interop::is_hf_config(j));
  hw::ModelSpec m = interop::model_from_hf_config(j, "config.json");
  const hw::ModelSpec preset = hw::model_preset("llama3-8b");
  CHECK(m.seq == 8192);  // rope_scaling's original length, not the extended 131,072
  m.preset = preset.preset;
  CHECK(m == preset);
  CHECK_FALSE(interop::is_hf_config(hw::to_json(preset)));
}

TEST_CASE("hf config: the families' variants and what is not modelled are said") {
  nlohmann::json qwen = nlohmann::json::parse(kLlama31_8b);
  qwen["model_type"] = "qwen2", qwen["tie_word_embeddings"] = true, qwen.erase("rope_scaling");
  qwen["max_position_embeddings"] = 32768;
  std::vector<std::string> notes;
  const hw::ModelSpec q = interop::model_from_hf_config(qwen, "config.json", &notes);
  CHECK(q.tied_embeddings);
  CHECK(q.seq == 32768);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("biases are left out") != std::string::npos);
  nlohmann::json moe = nlohmann::json::parse(kLlama31_8b);
  moe["model_type"] = "mistral", moe["num_local_experts"] = 8;
  CHECK(refusal(moe) == "config.json: field 'num_local_experts': experts in a 'mistral' model are not read (trainsim "
                        "reads the experts of mixtral, qwen3_moe and deepseek_v3 configs)");
  // A head size of its own is read (Qwen3's); hidden / heads is the default and stays unset.
  nlohmann::json head = nlohmann::json::parse(kLlama31_8b);
  head["head_dim"] = 256;
  CHECK(interop::model_from_hf_config(head, "config.json").head_dim() == 256);
  CHECK(interop::model_from_hf_config(head, "config.json").q_width() == 32 * 256);
  head["head_dim"] = 128;
  CHECK(interop::model_from_hf_config(head, "config.json").head_channels == 0);
  nlohmann::json other = nlohmann::json::parse(kLlama31_8b);
  other["model_type"] = "gpt_neox";
  CHECK(refusal(other).find("field 'model_type': 'gpt_neox' is not a family trainsim reads") != std::string::npos);
  nlohmann::json missing = nlohmann::json::parse(kLlama31_8b);
  missing.erase("hidden_size");
  CHECK(refusal(missing) == "config.json: field 'hidden_size': needed for the model, and missing");
  nlohmann::json bad = nlohmann::json::parse(kLlama31_8b);
  bad["num_hidden_layers"] = "32";
  CHECK(refusal(bad) == "config.json: field 'num_hidden_layers': expected an integer, got \"32\"");
}

namespace {

// mistralai/Mixtral-8x7B-v0.1's config.json (transformers 4.36), as published.
const char* kMixtral = R"({
  "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0", "use_cache": true,
  "vocab_size": 32000
})";

// Qwen/Qwen3-30B-A3B's config.json (transformers 4.51), as published.
const char* kQwen3Moe = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960,
  "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
  "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936
})";

}  // namespace

TEST_CASE("hf config: Mixtral's and Qwen3-30B-A3B's config.json are the MoE presets, layouts it cannot hold are refused") {
  hw::ModelSpec mixtral = interop::model_from_hf_config(nlohmann::json::parse(kMixtral), "config.json");
  mixtral.preset = "mixtral-8x7b";
  CHECK(mixtral == hw::model_preset("mixtral-8x7b"));
  hw::ModelSpec qwen = interop::model_from_hf_config(nlohmann::json::parse(kQwen3Moe), "config.json");
  CHECK(qwen.seq == 40960);  // the position limit; the preset trains at the report's 4,096
  qwen.preset = "qwen3-30b-a3b", qwen.seq = 4096;
  CHECK(qwen == hw::model_preset("qwen3-30b-a3b"));
  nlohmann::json j = nlohmann::json::parse(kQwen3Moe);
  j["mlp_only_layers"] = {0, 1};
  CHECK(interop::model_from_hf_config(j, "config.json").dense_blocks == 2);
  j["mlp_only_layers"] = {3};
  CHECK(refusal(j).find("field 'mlp_only_layers': [3] is not modelled") != std::string::npos);
  j = nlohmann::json::parse(kQwen3Moe);
  j["decoder_sparse_step"] = 2;
  CHECK(refusal(j).find("field 'decoder_sparse_step': 2 (experts in every k-th block) is not modelled") != std::string::npos);
  j = nlohmann::json::parse(kMixtral);
  j["num_experts_per_tok"] = 9;
  CHECK(refusal(j).find("field 'top_k': must be 1 to experts (8), got 9") != std::string::npos);
}

TEST_CASE("hf config: gen --model config.json predicts what --model llama3-8b does") {
  auto dir = fresh_dir("hf-config");
  const std::string file = (dir / "config.json").string();
  std::ofstream(file) << kLlama31_8b;
  const std::string rest = " --tp 2 --pp 2 --dp 2 --sp --microbatches 4 --seq 8192 --sim --json";
  CommandResult by_file = run_trainsim("gen 3d --model " + file + rest);
  CommandResult by_preset = run_trainsim("gen 3d --model llama3-8b" + rest);
  REQUIRE(by_file.exit_code == 0);
  REQUIRE(by_preset.exit_code == 0);
  const auto a = nlohmann::json::parse(by_file.out), b = nlohmann::json::parse(by_preset.out);
  CHECK(a["step_time_s"] == b["step_time_s"]);
  CHECK(a["peak_memory_bytes"] == b["peak_memory_bytes"]);
}

namespace {

// deepseek-ai/DeepSeek-V3's config.json, as published (its auto_map and quantization_config left out).
const char* kDeepSeekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
  "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
  "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
  "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1, "pretraining_tp": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
  "transformers_version": "4.33.1", "use_cache": true, "v_head_dim": 128, "vocab_size": 129280
})";

}  // namespace

TEST_CASE("hf config: DeepSeek-V3's config.json is the deepseek-v3 preset, its latent attention and experts read") {
  std::vector<std::string> notes;
  hw::ModelSpec ds = interop::model_from_hf_config(nlohmann::json::parse(kDeepSeekV3), "config.json", &notes);
  ds.preset = "deepseek-v3";
  CHECK(hw::spec_text(ds) == hw::spec_text(hw::model_preset("deepseek-v3")));
  CHECK(ds == hw::model_preset("deepseek-v3"));
  CHECK(ds.parameters() == doctest::Approx(671e9).epsilon(0.01));  // the report's 671B (the MTP module left out)
  REQUIRE(notes.size() == 2);
  CHECK(notes[0].find("multi-token-prediction") != std::string::npos);
  nlohmann::json j = nlohmann::json::parse(kDeepSeekV3);
  j["moe_layer_freq"] = 2;
  CHECK(refusal(j).find("field 'moe_layer_freq': 2") != std::string::npos);
  j = nlohmann::json::parse(kDeepSeekV3);
  j["q_lora_rank"] = nullptr;  // DeepSeek-V2-Lite's: one query projection
  CHECK(interop::model_from_hf_config(j, "config.json").q_lora_rank == 0);
  j.erase("kv_lora_rank");
  CHECK(refusal(j) == "config.json: field 'kv_lora_rank': needed for the model, and missing");
  // Group-limited routing: n_group and topk_group are the model's router_groups and router_group_topk.
  CHECK(ds.router_groups == 8);
  CHECK(ds.router_group_topk == 4);
  j = nlohmann::json::parse(kDeepSeekV3);
  j.erase("topk_group");
  CHECK(refusal(j).find("field 'topk_group' is missing: n_group 8") != std::string::npos);
  j = nlohmann::json::parse(kDeepSeekV3);
  j["n_group"] = 1;  // (one group: no restriction)
  CHECK(interop::model_from_hf_config(j, "config.json").router_groups == 0);
}
