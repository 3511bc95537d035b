// Transformer model descriptions for the hardware cost model (DESIGN §2): published presets, the executor's
// own presets, custom models from JSON, and parameter counts.
//
// A model is a decoder-only transformer: token embedding (plus learned positions for GPT-2), `blocks`
// pre-norm blocks (attention with `heads` query heads and `kv_heads` key/value heads of `head_dim` channels; an
// MLP of width `ffn`, gated SwiGLU with three matrices or GeLU with two), a final norm and an LM head (tied to the
// embedding or not).
//
// Mixture of Experts (`experts` > 0; Shazeer et al. 2017, Fedus et al. 2021, Jiang et al. 2024 "Mixtral of
// Experts", DeepSeek-AI 2024 "DeepSeek-V3"): the first `dense_blocks` blocks keep the MLP of width `ffn`; in
// every later block the MLP is an MoE layer: a router (a linear layer h -> E, no bias) that sends each token to
// its `top_k` experts of the `experts` routed ones, each an MLP of width `expert_ffn` (gated or not as the dense
// MLP), plus `shared_experts` MLPs of that width that every token passes through. A block's parameters then
// split into its dense part (attention, norms, router, shared experts: replicated like a dense block's) and its
// routed experts (what expert parallelism divides).
//
// Precision is a byte count per element of each kind of state (mixed precision: bf16 weights and activations,
// fp32 grads, master weights and AdamW moments).
#pragma once

#include <algorithm>
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
  /// Channels of one attention head (HF config head_dim, Megatron-LM --kv-channels); 0 = hidden / heads. Qwen3
  /// has 128 with hidden / heads = 64: the query width heads x head_dim then differs from hidden.
  int head_channels = 0;
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
  /// Mixture of Experts (see the header comment); 0 experts: a dense model, and the other four must be 0.
  int experts = 0;         ///< routed experts E of each MoE block (Megatron-LM --num-experts)
  int top_k = 0;           ///< experts each token is routed to (--moe-router-topk)
  int expert_ffn = 0;      ///< MLP width of one expert (--moe-ffn-hidden-size); 0 = ffn
  int shared_experts = 0;  ///< shared experts of each MoE block, each expert_ffn wide (DeepSeek's n_shared_experts)
  int dense_blocks = 0;    ///< the first blocks with a dense MLP (DeepSeek-V3's first_k_dense_replace, 3)
  /// Token dropping (GShard, Lepikhin et al. 2020; Switch, Fedus et al. 2021; Megatron-LM
  /// --moe-expert-capacity-factor): an expert takes at most capacity_factor times its balanced share of the routed
  /// tokens and drops the rest; 0: dropless. With pad_to_capacity (--moe-pad-expert-input-to-capacity) every expert
  /// runs exactly its capacity, padded: static shapes, the padding computed and sent.
  double capacity_factor = 0;
  /// The capacity factors a model takes besides 0 (the hardware model's and the executor's): an expert's tokens
  /// over its balanced share, 0.01 to 1000.
  static constexpr double kMinCapacityFactor = 0.01, kMaxCapacityFactor = 1000;
  bool pad_to_capacity = false;
  /// Group-limited routing (DeepSeek-AI 2024, DeepSeek-V3 §2.1.2 and §3.2.2: "each token will be sent to at most
  /// M = 4 nodes"; config.json n_group, topk_group; Megatron-LM --moe-router-num-groups, --moe-router-group-topk):
  /// the experts in router_groups equal groups, a token's top_k chosen among the experts of its router_group_topk
  /// best groups. 0 and 0: unrestricted top-k. It changes what DeepEP's dispatch sends across nodes (hardware/comm.h),
  /// not the FLOPs.
  int router_groups = 0;
  int router_group_topk = 0;
  /// The share of its balanced tokens an expert slice with routing load `load` (CostModel::expert_load_factor) runs
  /// and sends: `load` when dropless, at most capacity_factor with dropping, capacity_factor when padded. Unitless.
  double routed_load(double load) const {
    if (capacity_factor <= 0) return load;
    return pad_to_capacity ? capacity_factor : std::min(load, capacity_factor);
  }
  /// Multi-head latent attention (DeepSeek-AI 2024, "DeepSeek-V2" §2.1; DeepSeek-V3) when kv_lora_rank > 0: the
  /// queries through a rank-q_lora_rank bottleneck (0: one h -> heads x (head_dim + rope_head_dim) projection),
  /// keys and values from one latent of kv_lora_rank channels plus a shared rotary key of rope_head_dim; a head's
  /// query and key are head_dim + rope_head_dim wide (head_dim is qk_nope_head_dim), its value v_head_dim. Its
  /// projections are the block's attention linears; the latents' two RMSNorms and the KV cache are not modelled.
  int q_lora_rank = 0;
  int kv_lora_rank = 0;   ///< 0: grouped-query attention as above
  int rope_head_dim = 0;  ///< qk_rope_head_dim
  int v_head_dim = 0;     ///< a head's value width; 0 = head_dim

  int head_dim() const { return head_channels > 0 ? head_channels : hidden / heads; }
  /// True for multi-head latent attention.
  bool mla() const { return kv_lora_rank > 0; }
  /// A head's query and key width: head_dim (plus rope_head_dim with MLA).
  int qk_head_dim() const { return head_dim() + (mla() ? rope_head_dim : 0); }
  /// A head's value width: head_dim (v_head_dim with MLA when set).
  int value_head_dim() const { return mla() && v_head_dim > 0 ? v_head_dim : head_dim(); }
  /// Width of the queries: heads x qk_head_dim; `hidden` unless head_dim or MLA says other.
  long long q_width() const { return static_cast<long long>(heads) * qk_head_dim(); }
  /// Width of the attention output (the output projection's input): heads x value_head_dim.
  long long o_width() const { return static_cast<long long>(heads) * value_head_dim(); }
  /// Width of the K (and of the V) projection: kv_heads x head size.
  long long kv_width() const { return static_cast<long long>(kv_heads > 0 ? kv_heads : heads) * head_dim(); }
  /// True for a Mixture-of-Experts model.
  bool moe() const { return experts > 0; }
  /// True when block `b` (0-based) has an MoE layer rather than a dense MLP.
  bool moe_block(int b) const { return experts > 0 && b >= dense_blocks; }
  /// MoE blocks among the `n` blocks from `first`.
  int moe_blocks(int first, int n) const;
  /// One expert's MLP width: expert_ffn, or ffn when 0.
  int expert_width() const { return expert_ffn > 0 ? expert_ffn : ffn; }
  /// Parameters of one block's attention (Q, K, V and the output projection; their biases when `bias`).
  double attention_parameters() const;
  /// Parameters of one dense block (attention, MLP, two norms; biases when `bias`).
  double block_parameters() const;
  /// Parameters of one routed expert (its two or three matrices).
  double expert_parameters() const;
  /// Parameters of block `b` outside its routed experts: the whole block for a dense one; for an MoE block its
  /// attention, norms, router (h x E) and shared experts.
  double dense_part_parameters(int b) const;
  /// Parameters of block `b`'s routed experts (E x expert_parameters), 0 for a dense block.
  double routed_parameters(int b) const;
  /// Parameters one token passes through in block `b`: the dense part plus top_k routed experts.
  double active_parameters(int b) const;
  /// Parameters of the embedding (token table, plus positions when learned).
  double embedding_parameters() const;
  /// Parameters of the final norm and, unless tied, the LM head.
  double head_parameters() const;
  /// Every parameter (a tied matrix counted once).
  double parameters() const;
  /// The parameters one token passes through: parameters() less the routed experts it does not take (per MoE
  /// block E - top_k of them); parameters() for a dense model. Mixtral 8x7B's "12.9B active".
  double active_parameters() const;
  /// Parameters that take part in matrix multiplies per token: everything but the embedding lookups
  /// (the LM head's matrix counts even when tied); of an MoE block only its active parameters (the dense part
  /// and top_k experts). The N of "6·N" in MFU (as torchtitan and llm.c count; Megatron-LM's MoE FLOPs count
  /// the routed experts at top_k the same way).
  double dense_parameters() const;
  /// Training FLOPs per token for MFU: 6·N (N = dense_parameters()) plus attention 12·blocks·q·s (q = heads x
  /// head_dim, h unless head_dim says other: QK^T and attention·V, 4·s·q per token and block forward, three
  /// times that with the backward; the causal mask not halved), as llm.c and torchtitan count them (DESIGN §2).
  double flops_per_token(int seq) const;
  /// Throws SpecError "<where>: field 'x': ..." for an impossible model.
  void validate(const std::string& where) const;

  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

/// The fields of a ModelSpec (for JSON, overrides and printing).
const std::vector<Field<ModelSpec>>& model_fields();
/// The preset names: gpt2-124m, gpt2-1.5b, llama2-13b, llama2-70b, llama3-8b, llama3-70b, llama3-405b,
/// mixtral-8x7b, qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3, tiny, small, custom.
const std::vector<std::string>& model_preset_names();
/// The preset called `name`. Throws SpecError listing the presets.
ModelSpec model_preset(const std::string& name);
/// A model from a JSON object: {"preset": base (optional, default "custom"), field: value ...}. `where`
/// names the file in errors. Validated.
ModelSpec model_from_json(const nlohmann::json& j, const std::string& where);
/// Every field as JSON, with "preset" first.
nlohmann::ordered_json to_json(const ModelSpec& m);

}  // namespace trainsim::hw
