// Accelerator descriptions for the hardware cost model (DESIGN §2): peak dense FLOP/s (16-bit and FP8), memory
// bandwidth and capacity, measured kernel tables (GEMM throughput by shape, flash attention by head dimension and
// sequence length: hardware/kernel_tables.h) and the efficiency table that turns FLOPs and bytes into seconds.
// Calibration (schedules/calibration.h) fits the efficiency table to measured traces. docs/hardware-model.md
// gives every preset number's source.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware/fields.h"
#include "hardware/kernel_tables.h"

namespace trainsim::hw {

/// Fraction of the peak each kind of work reaches at its best shape, and fixed costs per op.
///
/// A compute op's time is, summed over its matrix multiplies, FLOPs / (peak_flops x the pass's efficiency x the
/// GEMM's shape factor) (FP8 ones at fp8_peak_flops x fp8), plus its attention core's FLOPs / (peak_flops x
/// attention x the flash kernel's factor for its head dimension and sequence length), plus bytes /
/// (hbm_bandwidth x memory), plus op_overhead_s (hardware/op_costs.h says what each op's GEMMs, FLOPs and bytes
/// are; the factors come from the device's kernel tables, 1 without them). Every timed op (compute, send, recv,
/// collective) also takes dispatch_s more (hardware/cost_model.h).
struct EfficiencyTable {
  double forward = 1;          ///< matrix multiplies of the forward
  double backward_input = 1;   ///< matrix multiplies of the input-grad half of the backward
  double backward_weight = 1;  ///< matrix multiplies of the weight-grad half
  double attention = 1;        ///< the attention core (QK^T, softmax, attention x V), forward and backward
  double memory = 1;           ///< fraction of hbm_bandwidth reached by memory-bound ops
  double fp8 = 1;              ///< FP8 matrix multiplies (every pass), a fraction of fp8_peak_flops
  double op_overhead_s = 0;    ///< seconds added to every compute op (launch and scheduling overhead)
  /// The fraction of the FLOP throughput above (matrix multiplies, attention, FP8: the kernel tables'
  /// microbenchmark figures) that a whole training step sustains: clocks under the power limit, caches shared
  /// with the kernels around each one. 1: the tables' figures as they are. Presets fitted to published runs say
  /// which (docs/hardware-model.md §5).
  double sustained = 1;
  /// Seconds from the moment an op could start (its stream free, its inputs there) to the moment it does,
  /// added to every timed op: thread wake-ups and event waits on the CPU backend, launch latency on a GPU.
  /// Not in any op's own time; `trainsim calibrate` fits it from the gaps between measured ops.
  double dispatch_s = 0;
  /// Mixture of Experts: host seconds to issue one local expert's kernels in an MoE block's forward (twice that in
  /// a backward, once more for a recomputed forward). Megatron-Core's grouped GEMM through Transformer Engine
  /// issues each expert's GEMMs and FP8 casts from the host, and its dropless dispatcher has just waited for the
  /// tokens' counts, so the GPU has nothing queued: an expert op takes the longer of its GPU work and this host
  /// time (hardware/experts.h expert_launch_seconds). 0: none (the host keeps ahead).
  double expert_launch_s = 0;

  friend bool operator==(const EfficiencyTable&, const EfficiencyTable&) = default;
};

/// One accelerator.
struct DeviceSpec {
  std::string preset = "custom";
  double peak_flops = 0;       ///< peak dense FLOP/s at the model's compute precision (BF16)
  double hbm_bandwidth = 0;    ///< memory bandwidth, bytes/s
  /// Memory capacity, bytes, as the tools show it (nvidia-smi's total, torch.cuda.mem_get_info): the datasheet's
  /// memory less what the driver keeps.
  double memory_bytes = 0;
  /// Of memory_bytes, what a training framework cannot use, bytes: the CUDA context and cuBLAS workspaces,
  /// NCCL's buffers, the caching allocator's fragmentation (docs/hardware-model.md §3, "The memory reserve"). A
  /// step whose peak is above memory_bytes - memory_reserve_bytes runs out of memory.
  double memory_reserve_bytes = 0;
  double fp8_peak_flops = 0;   ///< peak dense FP8 FLOP/s; 0: the device has no FP8 tensor cores
  /// GEMM throughput by shape (field `gemm_shapes`, "MxNxK:fraction,..."); empty: every shape alike.
  GemmShapeTable gemm_shapes;
  /// Causal flash attention throughput (field `attention_shapes`, "DxS:forward/backward,..."); empty: the
  /// attention core's FLOPs at `attention` alone.
  AttentionTable attention_shapes;
  EfficiencyTable efficiency;
  /// What its efficiencies were fitted to, one word (field `fitted_to`): the published runs of docs/hardware-model.md
  /// §5 ("narayanan2021-table1"), or "calibrate" for `trainsim calibrate`'s fit to measured traces; "" (written
  /// "none") when fitted to nothing, and reports then say its predictions are the kernel tables' and likely fast.
  std::string fitted_to;

  /// The memory a step may use: memory_bytes - memory_reserve_bytes.
  double usable_memory_bytes() const { return memory_bytes - memory_reserve_bytes; }
  /// Throws SpecError naming `where` and the field.
  void validate(const std::string& where) const;
  friend bool operator==(const DeviceSpec&, const DeviceSpec&) = default;
};

const std::vector<Field<DeviceSpec>>& device_fields();
/// h100-sxm, h100-gt500, h200, b200, a100-80g, cpu, custom.
const std::vector<std::string>& device_preset_names();
/// Throws SpecError listing the presets.
DeviceSpec device_preset(const std::string& name);
/// {"preset": base (optional), "peak_flops": ..., "efficiency": {"forward": ...}}; validated.
DeviceSpec device_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::ordered_json to_json(const DeviceSpec& d);

}  // namespace trainsim::hw
