// The trained model in the Hugging Face Transformers format (`trainsim export`): `model.safetensors` with
// LlamaForCausalLM's parameter names and layout, and `config.json`, so that the model loads in PyTorch
// (transformers' LlamaForCausalLM.from_pretrained, or any safetensors reader: examples/hf_llama_torch.py), with
// the tokenizer's files (exec/hf_tokenizer.h).
//
// Names and shapes (d the hidden size, f the FFN size, V the vocabulary 256, [out, in] as torch.nn.Linear):
//   model.embed_tokens.weight [V, d]; per block i: model.layers.i.input_layernorm.weight [d],
//   model.layers.i.self_attn.{q,k,v,o}_proj.weight [d, d], model.layers.i.post_attention_layernorm.weight [d],
//   model.layers.i.mlp.{gate,up}_proj.weight [f, d], model.layers.i.mlp.down_proj.weight [d, f];
//   model.norm.weight [d]; lm_head.weight [V, d] (untied). trainsim's Wqkv is q, k and v's rows stacked, its
//   Wgu the gate's and the up projection's.
// A Mixture-of-Experts model (exec/moe.h) is written as MixtralForCausalLM (Jiang et al. 2024): in place of mlp,
//   model.layers.i.block_sparse_moe.gate.weight [E, d] (the router) and per expert e
//   model.layers.i.block_sparse_moe.experts.e.{w1,w3}.weight [f, d] (gate, up) and .w2.weight [d, f] (down);
//   Mixtral's routing (softmax over every expert, top-k, renormalised) is the softmax of the k largest logits, as
//   trainsim's. Mixtral has experts in every layer: a model with dense blocks is refused. Not yet loaded in PyTorch
//   here (examples/hf_llama_torch.py reads Llama only; transformers' MixtralForCausalLM reads these names).
//
// Rotary pairing: trainsim rotates adjacent pairs (2i, 2i+1) of each head (Meta's Llama), Hugging Face's
// rotate_half the pairs (i, i + hd/2). The rows of q_proj and k_proj are permuted within each head so that HF's
// pairs are trainsim's, as transformers' convert_llama_weights_to_hf.py does: HF row j of a head is trainsim's
// row 2j, row hd/2 + j trainsim's 2j + 1 (j < hd/2). Attention scores are unchanged (q and k move alike).
//
// safetensors: an 8-byte little-endian header length, the JSON header (names, "F32", shapes, data offsets,
// padded with spaces to 8 bytes), then the raw little-endian fp32 data (https://github.com/huggingface/safetensors).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "exec/whole_model.h"

namespace trainsim::exec {

/// One tensor to write.
struct NamedTensor {
  std::string name;
  std::vector<long> shape;
  std::vector<float> data;  ///< row-major, the product of shape elements
};

/// The safetensors bytes of `tensors` (in the given order; F32), with `metadata` as the header's
/// "__metadata__". Throws std::invalid_argument for a tensor whose data is not its shape's size.
std::string safetensors_bytes(const std::vector<NamedTensor>& tensors,
                              const std::vector<std::pair<std::string, std::string>>& metadata = {});

/// The model's parameters under the Hugging Face Llama names and layout (q and k rows permuted for
/// rotate_half, above), in the order of the model. With `prefix` ("exp_avg." for the optimizer's moments)
/// before each name, the same permutation (what a tensor shaped as the parameter needs).
std::vector<NamedTensor> hf_llama_tensors(const ModelConfig& model, const NamedParameters& params,
                                          const std::string& prefix = "");

/// config.json of LlamaForCausalLM for `model` (fp32, untied head, no biases, rope_theta, rms_norm_eps); of
/// MixtralForCausalLM for an MoE model (num_local_experts, num_experts_per_tok, no auxiliary loss).
std::string hf_llama_config(const ModelConfig& model);

/// Writes DIR/model.safetensors, DIR/config.json and the byte-level tokenizer's tokenizer.json,
/// tokenizer_config.json and generation_config.json (exec/hf_tokenizer.h; DIR created if needed); with moments, also
/// DIR/optimizer.safetensors holding exp_avg.NAME and exp_avg_sq.NAME for every parameter (torch.optim.AdamW's
/// state names, the same layout), each file written whole under a temporary name and renamed (exec/file_io.h
/// DirectoryWriter: the directory is locked meanwhile). Throws FileError naming the file and why.
void export_hf_llama(const std::string& dir, const ModelConfig& model, const NamedParameters& params,
                     const AdamWMoments* moments = nullptr);

}  // namespace trainsim::exec
