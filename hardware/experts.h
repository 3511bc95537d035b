// Mixture of Experts on the hardware (docs/hardware-model.md §4b; Fedus et al. 2021, Megatron-Core MoE): what an
// expert slice's ops compute and keep. A slice (sim/tensor.h, `W3<e1/4>`) holds E/ep of each MoE block's routed
// experts and computes the (token, expert) pairs the router sends them: of its EP group's tokens, top_k per token,
// 1/ep of them when balanced, times the slice's load (CostModel::expert_load_factor). The dense part of an MoE
// block (attention, router, shared experts) is the layer's plain ops (hardware/op_costs.h, BlockPart::MoeShared);
// the all-to-alls are hardware/comm.h's nccl_all_to_all_seconds, priced by HardwareCostModel::all_to_all_seconds.
#pragma once

#include <vector>

#include "hardware/op_costs.h"

namespace trainsim::hw {

/// An op on an expert slice: the slice holds E/ep of each MoE block's experts and receives `load` times the
/// balanced share of the EP group's routed tokens (CostModel::expert_load_factor). With expert tensor parallelism
/// (Megatron-Core's ETP) the rank holds TP slice 1/`tp` of each of those experts: the first linear(s) split by
/// columns, the second by rows, as a dense MLP under TP (Shoeybi et al. 2019).
struct ExpertSplit {
  int ep = 1;
  double load = 1;
  int tp = 1;
};

/// Routed (token, expert) pairs an expert slice computes per MoE block for `tokens` tokens of its EP group:
/// tokens x top_k / ep x load (each token goes to top_k experts; a balanced slice gets 1/ep of them).
double routed_pairs(const ModelSpec& m, double tokens, ExpertSplit x);

/// The linear layers of one routed expert (h -> expert width, twice when gated, then back to h), of its TP slice
/// 1/`tp` (the expert width divided by tp).
std::vector<Linear> expert_linears(const ModelSpec& m, int tp = 1);

/// Work of an expert slice's op (forward, backward and its halves) of `layer`'s MoE blocks over the EP group's
/// `batches` microbatches: per MoE block, its E/ep experts' GEMMs as one grouped GEMM each of
/// routed_pairs / (E/ep) tokens (each GEMM at the device's shape factor for that many rows: fewer tokens per
/// expert, a less efficient GEMM, as Megatron-Core's grouped GEMM runs them), the MLP activation over the pairs,
/// and the token permutation around the all-to-alls (gathering each pair's hidden state into its expert's rows
/// and back, then the gate-weighted sum: 4·h·e bytes per pair forward, twice that backward). Recomputation as
/// for the blocks: full recomputes the experts' forward, op every other GEMM and the activation, selective
/// nothing (it recomputes attention only). With expert TP t the GEMMs are of width expert_ffn / t over every token
/// of the slice (the expert-TP group all-gathered them), the activation over 1/t of the width, and the
/// permutation of the rank's own sequence shard of the tokens (1/t of the pairs). Other kinds: none.
Work expert_work(const HardwareSetting& s, const LayerContent& layer, OpKind kind, int batches, ExpertSplit x);

/// Host seconds to issue the kernels of `local_experts` experts in `layer`'s MoE blocks for one op (DeviceSpec's
/// efficiency.expert_launch_s per expert and block: once in a forward, twice in a backward, once in each half of a
/// split backward, once more in a backward that recomputes the forward under full recomputation). An expert op takes
/// the longer of its GPU work and this (HardwareCostModel::compute_seconds): the host issues the experts' kernels
/// after the dispatcher's wait for the tokens' counts, with nothing queued on the GPU. Other kinds, and with
/// HardwareSetting::expert_gemm grouped (one kernel per linear layer): 0.
double expert_launch_seconds(const HardwareSetting& s, const LayerContent& layer, OpKind kind, double local_experts);

/// Activations one MoE block's routed experts keep for their backward per routed pair beyond the pair's input
/// (which its ExpertIn tensor holds), in bytes: the MLP's inner terms, 3e·f (gated: gate, up, product) or 2e·f
/// (GeLU) with f = expert_ffn / tp (expert TP slices the width); none under full recomputation; with op
/// checkpointing the kept GEMM outputs (gated: w1's f and w2's h; GeLU: fc's f). Selective recomputation keeps them
/// all (it recomputes the attention core).
double expert_activation_bytes(const ModelSpec& m, Recompute r, int tp = 1);

}  // namespace trainsim::hw
