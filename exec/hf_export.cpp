#include "exec/hf_export.h"

#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "exec/file_io.h"
#include "exec/hf_tokenizer.h"

namespace trainsim::exec {

namespace {

// Rows [r0, r0 + rows) of a row-major matrix of `cols` columns, with each head's rows (hd of them) reordered
// from adjacent rotary pairs to rotate_half's halves when `rope`.
std::vector<float> rows_of(const std::vector<float>& m, long cols, long r0, long rows, int hd, bool rope) {
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  for (long r = 0; r < rows; ++r) {
    long src = r;
    if (rope) {
      const long head = r / hd, j = r % hd, half = hd / 2;
      src = head * hd + (j < half ? 2 * j : 2 * (j - half) + 1);
    }
    std::copy_n(m.begin() + (r0 + src) * cols, cols, out.begin() + r * cols);
  }
  return out;
}

}  // namespace

std::string safetensors_bytes(const std::vector<NamedTensor>& tensors,
                              const std::vector<std::pair<std::string, std::string>>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::size_t offset = 0;
  for (const NamedTensor& t : tensors) {
    long n = 1;
    for (long x : t.shape) n *= x;
    if (static_cast<std::size_t>(n) != t.data.size())
      throw std::invalid_argument(fmt::format("{} has {} values but its shape holds {}", t.name, t.data.size(), n));
    const std::size_t bytes = t.data.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);  // little-endian
  out += text;
  out.reserve(out.size() + offset);
  for (const NamedTensor& t : tensors)  // (x86 and ARM hosts are little-endian, as the format)
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
  return out;
}

std::vector<NamedTensor> hf_llama_tensors(const ModelConfig& m, const NamedParameters& params, const std::string& prefix) {
  if (m.moe() && m.dense_blocks > 0)
    throw std::invalid_argument(fmt::format(
        "the model '{}' is a Mixture of Experts whose first {} block{} dense: export writes a Mixture of Experts as "
        "MixtralForCausalLM, whose every layer has experts (a model with --dense-blocks 0 exports)",
        m.preset, m.dense_blocks, m.dense_blocks == 1 ? " is" : "s are"));
  auto get = [&](const std::string& name) -> const std::vector<float>& {
    auto it = params.find(name);
    if (it == params.end()) throw std::invalid_argument(fmt::format("the model has no parameter '{}'", name));
    return it->second;
  };
  const long d = m.dim, f = m.ffn, V = m.vocab;
  const int hd = m.head_dim();
  std::vector<NamedTensor> out;
  auto add = [&](const std::string& name, std::vector<long> shape, std::vector<float> data) {
    out.push_back(NamedTensor{prefix + name, std::move(shape), std::move(data)});
  };
  add("model.embed_tokens.weight", {V, d}, get("embedding"));
  for (int b = 0; b < m.blocks; ++b) {
    const std::string t = "blocks." + std::to_string(b) + ".", h = "model.layers." + std::to_string(b) + ".";
    const std::vector<float>& qkv = get(t + "wqkv");
    add(h + "input_layernorm.weight", {d}, get(t + "attn_norm"));
    add(h + "self_attn.q_proj.weight", {d, d}, rows_of(qkv, d, 0, d, hd, true));
    add(h + "self_attn.k_proj.weight", {d, d}, rows_of(qkv, d, d, d, hd, true));
    add(h + "self_attn.v_proj.weight", {d, d}, rows_of(qkv, d, 2 * d, d, hd, false));
    add(h + "self_attn.o_proj.weight", {d, d}, get(t + "wo"));
    add(h + "post_attention_layernorm.weight", {d}, get(t + "ffn_norm"));
    if (m.moe_block(b)) {  // Mixtral's block_sparse_moe: the router, then per expert w1 (gate), w2 (down), w3 (up)
      add(h + "block_sparse_moe.gate.weight", {m.experts, d}, get(t + "router"));
      for (int e = 0; e < m.experts; ++e) {
        const std::string x = t + "experts." + std::to_string(e) + ".", y = h + "block_sparse_moe.experts." + std::to_string(e) + ".";
        const std::vector<float>& gu = get(x + "wgu");
        add(y + "w1.weight", {f, d}, rows_of(gu, d, 0, f, hd, false));
        add(y + "w2.weight", {d, f}, get(x + "wdown"));
        add(y + "w3.weight", {f, d}, rows_of(gu, d, f, f, hd, false));
      }
      continue;
    }
    const std::vector<float>& gu = get(t + "wgu");
    add(h + "mlp.gate_proj.weight", {f, d}, rows_of(gu, d, 0, f, hd, false));
    add(h + "mlp.up_proj.weight", {f, d}, rows_of(gu, d, f, f, hd, false));
    add(h + "mlp.down_proj.weight", {d, f}, get(t + "wdown"));
  }
  add("model.norm.weight", {d}, get("final_norm"));
  add("lm_head.weight", {V, d}, get("head"));
  return out;
}

std::string hf_llama_config(const ModelConfig& m) {
  nlohmann::ordered_json j;
  j["architectures"] = {m.moe() ? "MixtralForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = m.moe() ? "mixtral" : "llama";
  j["vocab_size"] = m.vocab;
  j["hidden_size"] = m.dim;
  j["intermediate_size"] = m.ffn;
  j["num_hidden_layers"] = m.blocks;
  j["num_attention_heads"] = m.heads;
  j["num_key_value_heads"] = m.heads;
  j["head_dim"] = m.head_dim();
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = m.seq;
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = m.rope_theta;
  if (m.moe()) {  // (Mixtral: softmax over every expert, top-k, renormalised: the softmax of the k logits, as here)
    j["num_local_experts"] = m.experts;
    j["num_experts_per_tok"] = m.top_k;
    j["output_router_logits"] = false;
    j["router_aux_loss_coef"] = 0.0;
    j["sliding_window"] = nullptr;
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  j["tie_word_embeddings"] = false;
  j["initializer_range"] = m.init_std;
  j["torch_dtype"] = "float32";
  j["trainsim_rope_pairing"] = "q_proj and k_proj rows permuted from adjacent pairs to rotate_half";
  return j.dump(2) + "\n";
}

void export_hf_llama(const std::string& dir, const ModelConfig& model, const NamedParameters& params,
                     const AdamWMoments* moments) {
  DirectoryWriter w(dir);  // (each file written whole under a temporary name, then renamed: exec/file_io.h)
  const std::vector<std::pair<std::string, std::string>> meta{{"format", "pt"}, {"written_by", "trainsim export"}};
  w.write_atomically(".model.safetensors.tmp", "model.safetensors",
                     safetensors_bytes(hf_llama_tensors(model, params), meta));
  w.write_atomically(".config.json.tmp", "config.json", hf_llama_config(model));
  w.write_atomically(".tokenizer.json.tmp", "tokenizer.json", hf_byte_tokenizer_json(model));
  w.write_atomically(".tokenizer_config.json.tmp", "tokenizer_config.json", hf_tokenizer_config(model));
  w.write_atomically(".generation_config.json.tmp", "generation_config.json", hf_generation_config(model));
  if (moments) {
    std::vector<NamedTensor> state = hf_llama_tensors(model, moments->first, "exp_avg.");
    for (NamedTensor& t : hf_llama_tensors(model, moments->second, "exp_avg_sq.")) state.push_back(std::move(t));
    w.write_atomically(".optimizer.safetensors.tmp", "optimizer.safetensors", safetensors_bytes(state, meta));
  }
  w.sync();
}

}  // namespace trainsim::exec
