#include "hardware/model.h"

#include <algorithm>

#include <fmt/format.h>

namespace trainsim::hw {

double ModelSpec::attention_parameters() const {
  const double h = hidden, q = static_cast<double>(q_width()), kv = static_cast<double>(kv_width());
  if (mla()) {
    // W_DQ, the query latent's norm and W_UQ (or one W_Q); W_DKV with the rotary key W_KR, the KV latent's norm,
    // W_UK and W_UV; the output projection (DeepSeek-V2 §2.1, equations 9 to 18).
    const double ql = q_lora_rank, kl = kv_lora_rank, a = heads;
    const double queries = ql > 0 ? h * ql + ql + ql * q : h * q;
    return queries + h * (kl + rope_head_dim) + kl + kl * a * (head_dim() + value_head_dim()) +
           static_cast<double>(o_width()) * h;
  }
  return h * (q + 2 * kv) + q * h + (bias ? (q + 2 * kv) + h : 0);  // Q, K, V, the output projection (biases)
}

double ModelSpec::block_parameters() const {
  const double h = hidden, f = ffn;
  double mlp = (gated_ffn ? 3 : 2) * h * f;          // gate, up, down (or up, down)
  double norms = 2 * (layernorm ? 2 * h : h);        // two norms: gain (and bias)
  double biases = bias ? (gated_ffn ? 2 * f : f) + h : 0;
  return attention_parameters() + mlp + norms + biases;
}

double ModelSpec::expert_parameters() const { return (gated_ffn ? 3.0 : 2.0) * hidden * expert_width(); }

int ModelSpec::moe_blocks(int first, int n) const {
  if (experts <= 0 || n <= 0) return 0;
  const int from = std::max(first, dense_blocks), to = first + n;
  return std::max(0, to - from);
}

double ModelSpec::dense_part_parameters(int b) const {
  if (!moe_block(b)) return block_parameters();
  const double h = hidden;
  const double norms = 2 * (layernorm ? 2 * h : h);
  return attention_parameters() + norms + h * experts + shared_experts * expert_parameters();  // router: h x E
}

double ModelSpec::routed_parameters(int b) const { return moe_block(b) ? experts * expert_parameters() : 0; }

double ModelSpec::active_parameters(int b) const {
  return dense_part_parameters(b) + (moe_block(b) ? top_k * expert_parameters() : 0);
}

double ModelSpec::embedding_parameters() const {
  return static_cast<double>(vocab) * hidden + (learned_positions ? static_cast<double>(seq) * hidden : 0);
}

double ModelSpec::head_parameters() const {
  return (layernorm ? 2.0 * hidden : hidden) + (tied_embeddings ? 0 : static_cast<double>(vocab) * hidden);
}

namespace {
// The sum over the blocks of f(b): a dense model's blocks are alike (blocks x f(0), as before MoE existed).
template <class F>
double over_blocks(const ModelSpec& m, F f) {
  if (!m.moe()) return m.blocks * f(0);
  const int dense = std::min(m.dense_blocks, m.blocks);
  return (dense > 0 ? dense * f(0) : 0) + (m.blocks - dense) * f(m.blocks - 1);
}
}  // namespace

double ModelSpec::parameters() const {
  return embedding_parameters() +
         over_blocks(*this, [&](int b) { return dense_part_parameters(b) + routed_parameters(b); }) + head_parameters();
}

double ModelSpec::active_parameters() const {
  if (!moe()) return parameters();
  return parameters() - (blocks - std::min(dense_blocks, blocks)) * static_cast<double>(experts - top_k) * expert_parameters();
}

double ModelSpec::dense_parameters() const {
  return over_blocks(*this, [&](int b) { return active_parameters(b); }) + (layernorm ? 2.0 * hidden : hidden) +
         static_cast<double>(vocab) * hidden;
}

double ModelSpec::flops_per_token(int s) const {
  // QK^T over the query width and attention·V over the output width: 4·s·q with equal widths.
  if (mla()) return 6.0 * dense_parameters() + 6.0 * blocks * static_cast<double>(q_width() + o_width()) * s;
  return 6.0 * dense_parameters() + 12.0 * blocks * static_cast<double>(q_width()) * s;
}

void ModelSpec::validate(const std::string& where) const {
  auto need = [&](bool ok, const char* field, const std::string& what) {
    if (!ok) throw SpecError(fmt::format("{}: field '{}': {}", where, field, what));
  };
  need(blocks >= 1, "blocks", fmt::format("must be at least 1, got {}", blocks));
  need(hidden >= 1, "hidden", fmt::format("must be at least 1, got {}", hidden));
  need(heads >= 1, "heads", fmt::format("must be at least 1, got {}", heads));
  need(head_channels >= 0, "head_dim", fmt::format("must be at least 1 (or 0: hidden / heads), got {}", head_channels));
  need(head_channels > 0 || hidden % heads == 0, "heads",
       fmt::format("hidden ({}) must be a multiple of heads ({})", hidden, heads));
  need(kv_heads == 0 || (kv_heads >= 1 && heads % kv_heads == 0), "kv_heads",
       fmt::format("must divide heads ({}) (or be 0: as many as heads), got {}", heads, kv_heads));
  need(ffn >= 1, "ffn", fmt::format("must be at least 1, got {}", ffn));
  need(vocab >= 1, "vocab", fmt::format("must be at least 1, got {}", vocab));
  need(seq >= 1, "seq", fmt::format("must be at least 1, got {}", seq));
  for (auto [v, name] : {std::pair{weight_bytes, "weight_bytes"}, {grad_bytes, "grad_bytes"},
                         {optimizer_bytes, "optimizer_bytes"}, {activation_bytes, "activation_bytes"}})
    need(v >= 1 && v <= 16, name, fmt::format("must be 1..16 bytes, got {}", v));
  need(experts >= 0 && experts <= 65536, "experts", fmt::format("must be 0 (dense) to 65536, got {}", experts));
  if (experts == 0) {
    for (auto [v, name] : {std::pair{top_k, "top_k"}, {expert_ffn, "expert_ffn"}, {shared_experts, "shared_experts"},
                           {dense_blocks, "dense_blocks"}})
      need(v == 0, name, fmt::format("is {} but the model has no experts (set experts, or leave it 0)", v));
    need(capacity_factor == 0, "capacity_factor",
         fmt::format("is {} but the model has no experts (set experts, or leave it 0)", capacity_factor));
    need(!pad_to_capacity, "pad_to_capacity", "is true but the model has no experts (set experts, or leave it false)");
    need(router_groups == 0 && router_group_topk == 0, router_groups ? "router_groups" : "router_group_topk",
         "is set but the model has no experts (leave it 0)");
  } else {
    need(top_k >= 1 && top_k <= experts, "top_k", fmt::format("must be 1 to experts ({}), got {}", experts, top_k));
    need(expert_ffn >= 0, "expert_ffn", fmt::format("must be at least 1 (or 0: ffn), got {}", expert_ffn));
    need(shared_experts >= 0 && shared_experts <= 1024, "shared_experts",
         fmt::format("must be 0 to 1024, got {}", shared_experts));
    need(dense_blocks >= 0 && dense_blocks < blocks, "dense_blocks",
         fmt::format("must be 0 to blocks - 1 ({}): at least one block has experts, got {}", blocks - 1, dense_blocks));
    need(!bias, "bias", "a Mixture-of-Experts model with biases is not modelled (the experts have none)");
    // (!(x >= a) also refuses NaN)
    need(capacity_factor == 0 || (capacity_factor >= kMinCapacityFactor && capacity_factor <= kMaxCapacityFactor),
         "capacity_factor",
         fmt::format("must be 0 (dropless) or {:g} to {:g} (an expert's tokens over its balanced share), got {}",
                     kMinCapacityFactor, kMaxCapacityFactor, capacity_factor));
    need(!pad_to_capacity || capacity_factor > 0, "pad_to_capacity",
         "pads each expert's tokens to its capacity: set capacity_factor too");
    need(router_groups == 0 || (router_groups >= 1 && experts % router_groups == 0), "router_groups",
         fmt::format("must be 0 (no group-limited routing) or divide experts ({}), got {}", experts, router_groups));
    need((router_groups == 0 && router_group_topk == 0) ||
             (router_groups > 0 && router_group_topk >= 1 && router_group_topk <= router_groups &&
              static_cast<long long>(router_group_topk) * (experts / router_groups) >= top_k),
         "router_group_topk",
         fmt::format("must be 1 to router_groups ({}) with top_k ({}) experts in that many groups of {} (or 0 with "
                     "router_groups 0), got {}",
                     router_groups, top_k, router_groups > 0 ? experts / router_groups : 0, router_group_topk));
  }
  if (!mla()) {
    for (auto [v, name] : {std::pair{q_lora_rank, "q_lora_rank"}, {rope_head_dim, "rope_head_dim"}, {v_head_dim, "v_head_dim"}})
      need(v == 0, name, fmt::format("is {} but the model has no latent attention (set kv_lora_rank, or leave it 0)", v));
  } else {
    need(q_lora_rank >= 0 && rope_head_dim >= 0 && v_head_dim >= 0, q_lora_rank < 0 ? "q_lora_rank" : rope_head_dim < 0 ? "rope_head_dim" : "v_head_dim",
         "must be at least 0");
    need(kv_heads == 0 || kv_heads == heads, "kv_heads",
         fmt::format("latent attention has a key and value per head: 0 or heads ({}), got {}", heads, kv_heads));
  }
  need(master_bytes >= 0 && master_bytes <= 16, "master_bytes", fmt::format("must be 0..16 bytes, got {}", master_bytes));
}

const std::vector<Field<ModelSpec>>& model_fields() {
  using M = ModelSpec;
  static const std::vector<Field<M>> f = {
      field("blocks", &M::blocks),           field("hidden", &M::hidden),
      field("heads", &M::heads),             field("kv_heads", &M::kv_heads),
      field("head_dim", &M::head_channels),
      field("ffn", &M::ffn),                 field("vocab", &M::vocab),
      field("seq", &M::seq),                 field("gated_ffn", &M::gated_ffn),
      field("bias", &M::bias),               field("layernorm", &M::layernorm),
      field("tied_embeddings", &M::tied_embeddings), field("learned_positions", &M::learned_positions),
      field("dropout", &M::dropout),         field("weight_bytes", &M::weight_bytes),
      field("grad_bytes", &M::grad_bytes),   field("master_bytes", &M::master_bytes),
      field("optimizer_bytes", &M::optimizer_bytes), field("activation_bytes", &M::activation_bytes),
      field("experts", &M::experts),         field("top_k", &M::top_k),
      field("expert_ffn", &M::expert_ffn),   field("shared_experts", &M::shared_experts),
      field("dense_blocks", &M::dense_blocks),
      field("capacity_factor", &M::capacity_factor), field("pad_to_capacity", &M::pad_to_capacity),
      field("router_groups", &M::router_groups), field("router_group_topk", &M::router_group_topk),
      field("q_lora_rank", &M::q_lora_rank), field("kv_lora_rank", &M::kv_lora_rank),
      field("rope_head_dim", &M::rope_head_dim), field("v_head_dim", &M::v_head_dim),
  };
  return f;
}

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> names{"gpt2-124m", "gpt2-1.5b", "llama2-13b", "llama2-70b", "llama3-8b",
                                              "llama3-70b", "llama3-405b", "mixtral-8x7b", "qwen3-30b-a3b",
                                              "qwen3-235b-a22b", "deepseek-v3", "tiny", "small", "custom"};
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

// Mixtral 8x7B (Jiang et al. 2024, "Mixtral of Experts", Table 1): dim 4096, 32 layers, head_dim 128, hidden_dim
// 14336 (each expert's), 32 heads, 8 kv heads, context 32768, vocabulary 32,000, 8 experts, top 2; every block an
// MoE block, no shared expert. §2 gives 47B parameters, 13B active per token (46.7B and 12.9B as counted here:
// tests/test_hardware_moe.cpp). RMSNorm, SwiGLU experts, untied LM head.
ModelSpec mixtral_8x7b() {
  ModelSpec m;
  m.blocks = 32, m.hidden = 4096, m.heads = 32, m.kv_heads = 8, m.ffn = 14336, m.vocab = 32000, m.seq = 32768;
  m.experts = 8, m.top_k = 2, m.expert_ffn = 14336;
  return m;
}

// The Qwen3 MoE family's shared shape (Qwen3 report, Table 2; the released config.json files): 4 KV heads of 128
// channels, a vocabulary of 151,936, 128 routed experts of which 8 are activated, every block MoE, sequence 4,096.
ModelSpec qwen3_moe(int blocks, int hidden, int heads, int ffn, int expert_ffn) {
  ModelSpec m;
  m.blocks = blocks, m.hidden = hidden, m.heads = heads, m.kv_heads = 4, m.head_channels = 128, m.ffn = ffn;
  m.vocab = 151936, m.seq = 4096;
  m.experts = 128, m.top_k = 8, m.expert_ffn = expert_ffn;
  return m;
}

// Qwen3-30B-A3B (Qwen Team 2025, "Qwen3 Technical Report", Table 2: 48 layers, 32 query and 4 KV heads, 128
// experts, 8 activated, no shared experts; the released configuration Qwen/Qwen3-30B-A3B config.json:
// hidden_size 2048, head_dim 128, moe_intermediate_size 768, vocab_size 151,936, tie_word_embeddings false,
// decoder_sparse_step 1 with no mlp_only_layers, so every block is MoE; intermediate_size 6144 is unused).
// Sequence length 4,096: the report's pre-training stages S1 and S2 (§3.2; S3 extends it to 32,768). 30.5B
// parameters, 3.3B active (the model card; 30.5B and 3.35B as counted here, the QK norms' 256 per block left out).
ModelSpec qwen3_30b_a3b() { return qwen3_moe(48, 2048, 32, 6144, 768); }

// Qwen3-235B-A22B (Qwen Team 2025, "Qwen3 Technical Report", Table 2: 94 layers, 64 query and 4 KV heads, 128
// experts, 8 activated, no shared experts; the released configuration Qwen/Qwen3-235B-A22B config.json:
// hidden_size 4096, head_dim 128, moe_intermediate_size 1536, vocab_size 151,936, tie_word_embeddings false,
// decoder_sparse_step 1 with no mlp_only_layers; intermediate_size 12288 is unused; torchtitan's qwen3 flavor
// 235B-A22B is the same). Sequence length 4,096, as Qwen3-30B-A3B's. 235B parameters, 22B active (the model card;
// 235.1B and 22.1B as counted here, the QK norms left out).
ModelSpec qwen3_235b_a22b() { return qwen3_moe(94, 4096, 64, 12288, 1536); }

// DeepSeek-V3 (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", §4.2 "Hyper-Parameters": 61 layers, hidden 7168,
// 128 heads, head dim 128, KV compression 512, query compression 1536, decoupled query and key head dim 64; all FFNs
// but the first three MoE, 1 shared and 256 routed experts of intermediate 2048, 8 activated; 671B parameters, 37B
// activated; pre-trained at a sequence length of 4K, §4.3 and §4.2), with the released configuration's
// (deepseek-ai/DeepSeek-V3 config.json) v_head_dim 128, intermediate_size 18432 of the dense blocks and vocab_size
// 129,280; its group-limited routing (§2.1.2, config.json n_group 8, topk_group 4: a token's 8 experts among those
// of its 4 best groups of 32), which sets what DeepEP sends across nodes. Its multi-token-prediction module (14B
// more, the report's "D = 1") and the router's sigmoid scores with their bias are not modelled (a router's GEMM and
// softmax stand in).
ModelSpec deepseek_v3() {
  ModelSpec m;
  m.blocks = 61, m.hidden = 7168, m.heads = 128, m.head_channels = 128, m.ffn = 18432, m.vocab = 129280, m.seq = 4096;
  m.experts = 256, m.top_k = 8, m.expert_ffn = 2048, m.shared_experts = 1, m.dense_blocks = 3;
  m.router_groups = 8, m.router_group_topk = 4;  // (§2.1.2: 8 groups, a token's experts in its best 4)
  m.q_lora_rank = 1536, m.kv_lora_rank = 512, m.rope_head_dim = 64, m.v_head_dim = 128;
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
  else if (name == "mixtral-8x7b") m = mixtral_8x7b();
  else if (name == "qwen3-30b-a3b") m = qwen3_30b_a3b();
  else if (name == "qwen3-235b-a22b") m = qwen3_235b_a22b();
  else if (name == "deepseek-v3") m = deepseek_v3();
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
