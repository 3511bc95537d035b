#include "hardware/model.h"

#include <fmt/format.h>

namespace trainsim::hw {

double ModelSpec::block_parameters() const {
  const double h = hidden, f = ffn, kv = static_cast<double>(kv_width());
  double attn = h * (h + 2 * kv) + h * h;            // Q, K, V and the output projection
  double mlp = (gated_ffn ? 3 : 2) * h * f;          // gate, up, down (or up, down)
  double norms = 2 * (layernorm ? 2 * h : h);        // two norms: gain (and bias)
  double biases = bias ? (h + 2 * kv) + h + (gated_ffn ? 2 * f : f) + h : 0;
  return attn + mlp + norms + biases;
}

double ModelSpec::embedding_parameters() const {
  return static_cast<double>(vocab) * hidden + (learned_positions ? static_cast<double>(seq) * hidden : 0);
}

double ModelSpec::head_parameters() const {
  return (layernorm ? 2.0 * hidden : hidden) + (tied_embeddings ? 0 : static_cast<double>(vocab) * hidden);
}

double ModelSpec::parameters() const {
  return embedding_parameters() + blocks * block_parameters() + head_parameters();
}

double ModelSpec::dense_parameters() const {
  return blocks * block_parameters() + (layernorm ? 2.0 * hidden : hidden) + static_cast<double>(vocab) * hidden;
}

double ModelSpec::flops_per_token(int s) const {
  return 6.0 * dense_parameters() + 12.0 * blocks * static_cast<double>(hidden) * s;
}

void ModelSpec::validate(const std::string& where) const {
  auto need = [&](bool ok, const char* field, const std::string& what) {
    if (!ok) throw SpecError(fmt::format("{}: field '{}': {}", where, field, what));
  };
  need(blocks >= 1, "blocks", fmt::format("must be at least 1, got {}", blocks));
  need(hidden >= 1, "hidden", fmt::format("must be at least 1, got {}", hidden));
  need(heads >= 1, "heads", fmt::format("must be at least 1, got {}", heads));
  need(hidden % heads == 0, "heads", fmt::format("hidden ({}) must be a multiple of heads ({})", hidden, heads));
  need(kv_heads == 0 || (kv_heads >= 1 && heads % kv_heads == 0), "kv_heads",
       fmt::format("must divide heads ({}) (or be 0: as many as heads), got {}", heads, kv_heads));
  need(ffn >= 1, "ffn", fmt::format("must be at least 1, got {}", ffn));
  need(vocab >= 1, "vocab", fmt::format("must be at least 1, got {}", vocab));
  need(seq >= 1, "seq", fmt::format("must be at least 1, got {}", seq));
  for (auto [v, name] : {std::pair{weight_bytes, "weight_bytes"}, {grad_bytes, "grad_bytes"},
                         {optimizer_bytes, "optimizer_bytes"}, {activation_bytes, "activation_bytes"}})
    need(v >= 1 && v <= 16, name, fmt::format("must be 1..16 bytes, got {}", v));
  need(master_bytes >= 0 && master_bytes <= 16, "master_bytes", fmt::format("must be 0..16 bytes, got {}", master_bytes));
}

const std::vector<Field<ModelSpec>>& model_fields() {
  using M = ModelSpec;
  static const std::vector<Field<M>> f = {
      field("blocks", &M::blocks),           field("hidden", &M::hidden),
      field("heads", &M::heads),             field("kv_heads", &M::kv_heads),
      field("ffn", &M::ffn),                 field("vocab", &M::vocab),
      field("seq", &M::seq),                 field("gated_ffn", &M::gated_ffn),
      field("bias", &M::bias),               field("layernorm", &M::layernorm),
      field("tied_embeddings", &M::tied_embeddings), field("learned_positions", &M::learned_positions),
      field("dropout", &M::dropout),         field("weight_bytes", &M::weight_bytes),
      field("grad_bytes", &M::grad_bytes),   field("master_bytes", &M::master_bytes),
      field("optimizer_bytes", &M::optimizer_bytes), field("activation_bytes", &M::activation_bytes),
  };
  return f;
}

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> names{"gpt2-124m", "gpt2-1.5b", "llama2-13b", "llama2-70b", "llama3-8b",
                                              "llama3-70b", "llama3-405b", "tiny", "small", "custom"};
  return names;
}

namespace {

// GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"): Table 2 gives the
// layers and d_model of the 117M ("124M" as re-counted by nanoGPT and Hugging Face) and 1542M models; §2.3
// the vocabulary of 50,257 and the context of 1024 tokens; the MLP is 4·d_model wide (Radford et al. 2018);
// heads 12 and 25 from the released configurations (openai-community/gpt2, gpt2-xl config.json: n_head).
// LayerNorm, biases, learned positions, GeLU, tied embedding and LM head, dropout 0.1.
ModelSpec gpt2(int blocks, int hidden, int heads) {
  ModelSpec m;
  m.blocks = blocks, m.hidden = hidden, m.heads = heads, m.kv_heads = heads, m.ffn = 4 * hidden;
  m.vocab = 50257, m.seq = 1024;
  m.gated_ffn = false, m.bias = true, m.layernorm = true, m.tied_embeddings = true, m.learned_positions = true;
  m.dropout = true;
  return m;
}

// Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3): layers, model dimension, FFN dimension,
// attention heads and 8 key/value heads for 8B, 70B and 405B; vocabulary 128,256 (the released
// config.json's vocab_size; the paper rounds it to "128K tokens"); pre-training sequence length 8,192
// (§3.4.1). RMSNorm, SwiGLU, no biases, untied LM head.
ModelSpec llama3(int blocks, int hidden, int ffn, int heads) {
  ModelSpec m;
  m.blocks = blocks, m.hidden = hidden, m.heads = heads, m.kv_heads = 8, m.ffn = ffn;
  m.vocab = 128256, m.seq = 8192;
  return m;
}

// Llama 2 (Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat Models", Table 1: context length
// 4k, grouped-query attention for 70B); the dimensions of the released configurations (meta-llama/Llama-2-13b-hf
// and Llama-2-70b-hf config.json: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, vocab_size 32,000), as torchtitan's llama2 configurations train them. RMSNorm, SwiGLU,
// no biases, untied LM head.
ModelSpec llama2(int blocks, int hidden, int ffn, int heads, int kv_heads) {
  ModelSpec m;
  m.blocks = blocks, m.hidden = hidden, m.heads = heads, m.kv_heads = kv_heads, m.ffn = ffn;
  m.vocab = 32000, m.seq = 4096;
  return m;
}

// The executor's presets (exec/model_config.cpp `preset`, docs/executor.md): the same Llama-style model in
// fp32 (weights are their own master copy; AdamW keeps m and v), vocabulary 256 (bytes), so that `trainsim
// sim` and `trainsim replay` describe one model. tests/test_hardware_model.cpp checks them against
// exec::preset().
ModelSpec executor(int blocks, int dim, int heads, int ffn, int seq) {
  ModelSpec m;
  m.blocks = blocks, m.hidden = dim, m.heads = heads, m.kv_heads = heads, m.ffn = ffn, m.vocab = 256, m.seq = seq;
  m.weight_bytes = 4, m.grad_bytes = 4, m.master_bytes = 0, m.optimizer_bytes = 8, m.activation_bytes = 4;
  return m;
}

}  // namespace

ModelSpec model_preset(const std::string& name) {
  ModelSpec m;
  if (name == "gpt2-124m") m = gpt2(12, 768, 12);
  else if (name == "gpt2-1.5b") m = gpt2(48, 1600, 25);
  else if (name == "llama2-13b") m = llama2(40, 5120, 13824, 40, 40);
  else if (name == "llama2-70b") m = llama2(80, 8192, 28672, 64, 8);
  else if (name == "llama3-8b") m = llama3(32, 4096, 14336, 32);
  else if (name == "llama3-70b") m = llama3(80, 8192, 28672, 64);
  else if (name == "llama3-405b") m = llama3(126, 16384, 53248, 128);
  else if (name == "tiny") m = executor(2, 32, 2, 64, 16);
  else if (name == "small") m = executor(4, 256, 4, 768, 128);
  else if (name == "custom") m = ModelSpec{};
  else {
    std::string list;
    for (const auto& n : model_preset_names()) list += (list.empty() ? "" : ", ") + n;
    throw SpecError(fmt::format("unknown model '{}' (the presets are: {}; or a JSON file)", name, list));
  }
  m.preset = name;
  return m;
}

ModelSpec model_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw SpecError(fmt::format("{}: expected a JSON object describing a model", where));
  std::string base = "custom";
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) throw SpecError(fmt::format("{}: field 'preset': expected a string", where));
    base = j["preset"].get<std::string>();
  }
  ModelSpec m;
  try {
    m = model_preset(base);
  } catch (const SpecError& e) {
    throw SpecError(fmt::format("{}: field 'preset': {}", where, e.what()));
  }
  apply_json(model_fields(), m, j, where, {"preset"});
  m.validate(where);
  return m;
}

nlohmann::ordered_json to_json(const ModelSpec& m) {
  nlohmann::ordered_json j;
  j["preset"] = m.preset;
  j.update(fields_json(model_fields(), m));
  return j;
}

}  // namespace trainsim::hw
