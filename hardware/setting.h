// A hardware setting: the model, device and network a schedule is costed on, and the training shape
// (sequences per microbatch, sequence length, activation recomputation). It is what the `.sched` header's
// `cost_model hardware` block holds (docs/schedule-format.md) and what the generators' and `trainsim sim`'s
// --model/--device/--network flags build.
#pragma once

#include <string>

#include "hardware/device.h"
#include "hardware/model.h"
#include "hardware/network.h"

namespace trainsim::hw {

/// Activation recomputation (Korthikanti et al. 2022): none, selective (the attention core is recomputed in
/// the backward, its s² activations are not kept), full (only each block's input is kept; the backward
/// recomputes the block's forward first), op (torchtitan's selective op checkpointing, `--activation_checkpoint.
/// selective_ac_option op`: every other matrix multiply's output and the attention's output are kept, the rest
/// of the block recomputed; hardware/op_costs.h).
enum class Recompute { None, Selective, Full, Op };

const char* recompute_name(Recompute r);
/// "none", "selective", "full" or "op"; throws SpecError naming `where`.
Recompute recompute_from_name(const std::string& name, const std::string& where);

/// How the attention core runs: flash (FlashAttention: no s x s scores kept, softmax statistics only; its time
/// from the device's flash attention table), eager (QK^T, softmax and attention x V as separate kernels, the
/// scores and probabilities kept for the backward unless recomputed).
enum class Attention { Flash, Eager };
const char* attention_name(Attention a);

/// How the elementwise ops (norms, residual adds, the MLP activation, rotary embedding) run: fused (one kernel
/// each: torch.compile, Megatron-LM's fused kernels) or eager (PyTorch without torch.compile: every operation of
/// the model's code a kernel of its own; hardware/op_costs.h).
enum class Elementwise { Fused, Eager };
const char* elementwise_name(Elementwise e);
/// "fused" or "eager"; throws SpecError naming `where`.
Elementwise elementwise_from_name(const std::string& name, const std::string& where);
/// "flash" or "eager"; throws SpecError naming `where`.
Attention attention_from_name(const std::string& name, const std::string& where);

/// How the framework overlaps tensor parallelism's collectives with the GEMMs around them (hardware/tp_comm.h):
/// none (every TP collective synchronous: torchtitan's TP without async TP), backward (the input-grad pass's
/// reductions under the weight-grad GEMMs and, with SP, its re-gathers under the input-grad GEMMs: Megatron-LM's
/// default), full (with SP every TP collective under the GEMM that consumes or produces it: Megatron-LM's
/// --tp-comm-overlap, torchtitan's async TP).
enum class TpOverlap { None, Backward, Full };
/// "none", "backward", "full".
const char* tp_overlap_name(TpOverlap o);
/// TP overlap by name: "none", "backward", "full"; throws SpecError naming `where`.
TpOverlap tp_overlap_from_name(const std::string& name, const std::string& where);

/// How an MoE layer's tokens reach their experts across the EP group (hardware/comm.h): nccl (grouped point-to-point
/// sends to every member: Megatron-LM's alltoall dispatcher, torchtitan's default), deepep (DeepSeek's DeepEP, its
/// hierarchical normal kernels: a token crosses the network once per destination node, then NVLink; Megatron-LM's
/// flex dispatcher with DeepEP, torchtitan's expert_parallel_comm_backend deepep).
enum class MoeDispatcher { Nccl, DeepEP };
/// "nccl", "deepep".
const char* moe_dispatcher_name(MoeDispatcher d);
/// The dispatcher by name: "nccl" or "deepep"; throws SpecError naming `where`.
MoeDispatcher moe_dispatcher_from_name(const std::string& name, const std::string& where);

/// How an MoE layer's experts' GEMMs are issued (hardware/experts.h expert_launch_seconds): per-expert (Megatron-Core's
/// grouped linear layers through Transformer Engine: each local expert's GEMMs and FP8 casts issued from the host,
/// efficiency.expert_launch_s each), grouped (one grouped GEMM kernel per linear layer over every local expert:
/// torchtitan's torch._grouped_mm; no host time per expert).
enum class ExpertGemm { PerExpert, Grouped };
/// "per-expert", "grouped".
const char* expert_gemm_name(ExpertGemm g);
/// By name: "per-expert" or "grouped"; throws SpecError naming `where`.
ExpertGemm expert_gemm_from_name(const std::string& name, const std::string& where);

/// Everything the hardware cost model needs besides the schedule.
struct HardwareSetting {
  ModelSpec model;
  DeviceSpec device;
  NetworkSpec network;
  int microbatch_size = 1;  ///< sequences per microbatch (b)
  int seq = 0;              ///< tokens per sequence (s); 0 = the model's default
  Recompute recompute = Recompute::None;
  Attention attention = Attention::Flash;
  Elementwise elementwise = Elementwise::Fused;
  /// FP8 linear layers (torchao's float8 training with dynamic scaling, as torchtitan's --float8 runs it):
  /// every block's matrix multiplies at the device's FP8 peak (the LM head stays in BF16).
  bool fp8 = false;
  /// FSDP all-gathers the weights in FP8 (torchao's enable_fsdp_float8_all_gather): a weight all-gather moves
  /// one byte per parameter.
  bool fp8_all_gather = false;
  /// Context parallelism: each sequence split over this many ranks (a CP group, header groups named cp...),
  /// which run ring attention over it (hardware/op_costs.h). 1: none.
  int context_parallel = 1;
  /// How TP collectives overlap the GEMMs (hardware/tp_comm.h); Megatron-LM's default.
  TpOverlap tp_overlap = TpOverlap::Backward;
  /// How an MoE layer's all-to-alls run (hardware/comm.h); NCCL's, the frameworks' default.
  MoeDispatcher moe_dispatcher = MoeDispatcher::Nccl;
  /// How an MoE layer's experts' GEMMs are issued; Megatron-Core's (per expert) by default.
  ExpertGemm expert_gemm = ExpertGemm::PerExpert;

  /// The sequence length in use: seq, or the model's when 0.
  int seq_len() const { return seq > 0 ? seq : model.seq; }
  /// Tokens one op of one microbatch works on: b·s, divided by the CP degree.
  double tokens_per_microbatch() const {
    return static_cast<double>(microbatch_size) * seq_len() / context_parallel;
  }
  /// Tokens of one microbatch whatever the CP degree: b·s.
  double tokens_per_sequence_batch() const { return static_cast<double>(microbatch_size) * seq_len(); }
  /// Throws SpecError naming `where` for settings that do not go together (FP8 on a device without FP8,
  /// eager attention with context parallelism, a CP degree below 1, a DeepEP dispatcher without experts).
  void validate(const std::string& where) const;

  friend bool operator==(const HardwareSetting&, const HardwareSetting&) = default;
};

/// The header text of a model, device or network: its preset then " key=value" for each field that differs
/// from the preset ("llama3-8b", "h100-sxm efficiency.forward=0.61"). Canonical: fixed field order.
std::string spec_text(const ModelSpec& m);
std::string spec_text(const DeviceSpec& d);
std::string spec_text(const NetworkSpec& n);

/// Parse the words of a header line back ("llama3-8b", "blocks=40", ...): the preset, then overrides.
/// `where` ("file.sched:5") names the place in errors (SpecError). Validated.
ModelSpec model_from_words(const std::vector<std::string>& words, const std::string& where);
DeviceSpec device_from_words(const std::vector<std::string>& words, const std::string& where);
NetworkSpec network_from_words(const std::vector<std::string>& words, const std::string& where);

/// True when a command-line value names a JSON file rather than a preset: it ends in ".json", holds a '/', or
/// names an existing file.
bool is_json_path(const std::string& value);
/// The JSON of the file at `path`. Throws SpecError naming the file when it cannot be opened or is not JSON.
nlohmann::json read_json_file(const std::string& path);

/// A model, device or network from a command-line value: a preset name, or a path to a JSON file (a value
/// ending in ".json" or naming an existing file). Throws SpecError naming the file and field.
ModelSpec load_model(const std::string& value);
DeviceSpec load_device(const std::string& value);
NetworkSpec load_network(const std::string& value);

}  // namespace trainsim::hw
