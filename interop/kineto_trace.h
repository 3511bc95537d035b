// A PyTorch profiler (Kineto) trace of a user's own GPU run, read as measured work for calibration
// (schedules/calibration.h, docs/calibration.md §3). `torch.profiler.profile(activities=[CPU, CUDA],
// record_shapes=True)` then `prof.export_chrome_trace(path)` writes it: Kineto's Chrome-trace JSON
// (pytorch/kineto, libkineto/src/output_json.cpp), {"schemaVersion": 1, "deviceProperties": [...],
// "traceEvents": [...], ...}.
//
// Fields read, of the complete events ("ph": "X"; "ts" and "dur" in microseconds):
// - "cat": "kernel": a GPU kernel; its duration is GPU time. "args"."External id" links it to the CPU op that
//   launched it (Kineto writes the linked op's correlation id there); the kernels of one CPU op add up.
//   A kernel that NCCL ran for a collective also carries, copied by Kineto from the `record_param_comms` CPU op
//   (ChromeTraceLogger::appendCollectiveArgs): "Collective name", "In msg nelems", "Out msg nelems",
//   "Group size", "dtype", and where PyTorch recorded them "Process Group Name", "Process Group Ranks" and "Seq".
// - "cat": "cpu_op": an ATen op: "name" ("aten::mm"), "args"."External id", and with record_shapes
//   "args"."Input Dims" (one list of sizes per input, [] for a scalar) and "args"."Input type" ("c10::BFloat16",
//   "float", ...). The CPU ops named "autograd::engine::evaluate_function: ..." bound the backward: an op
//   inside one in time, on the same pid and tid, is a backward op.
// What the ops become (FLOPs counted as hardware/op_costs.h counts them):
// - aten::mm [M,K]x[K,N], aten::addmm (bias, [M,K], [K,N]), aten::bmm [B,M,K]x[B,K,N], aten::baddbmm: a GEMM of
//   2·B·M·N·K FLOPs, forward or backward as above; only 2-byte inputs (bf16, fp16: the precision of the
//   devices' peak_flops) are kept;
// - aten::_scaled_dot_product_flash_attention, _efficient_attention, _cudnn_attention (q, k, v of [B,H,S,D]):
//   attention, 4·B·H·S_q·S_k·D FLOPs forward (the causal mask not halved), twice that for their _backward ops;
// - any other op with tensor inputs: memory-bound, its bytes the inputs' plus the largest input's again (its
//   output);
// - NCCL kernels: collectives (allreduce, allgather, reduce_scatter, broadcast, reduce: S the all-gather's
//   output, the others' input, "dtype"'s element size) and sends (2 ranks); receives, all-to-all, barriers and
//   the rest are left out. A group whose "Process Group Ranks" sit on one node (gpus_per_node) is intra-node.
//   With one trace per rank, a call recorded on several ranks (same group name and "Seq") takes its shortest
//   kernel: the others include waiting for the last rank to arrive.
#pragma once

#include <string>
#include <vector>

#include "schedules/calibration.h"

namespace trainsim {

/// What a set of Kineto traces holds for calibration.
struct KinetoRecords {
  std::vector<MeasuredWork> work;
  std::vector<MeasuredComm> comm;
  int kernels = 0;   ///< GPU kernels read
  int left_out = 0;  ///< kernels not used (no linked op, no shapes, another dtype, an op not modelled)
};

/// True when `j` is a Kineto trace: a "schemaVersion" and a "traceEvents" array, or events of category
/// "kernel" or "cpu_op".
bool is_kineto_trace(const nlohmann::json& j);

/// True when the first MiB of the file at `path` looks like a Kineto trace ("schemaVersion", or a "cpu_op" or
/// "kernel" category), false otherwise and for a file that cannot be read (the reader then says why). Cheap:
/// it decides which reader `trainsim calibrate` uses without parsing the whole file.
bool looks_like_kineto_file(const std::string& path);

/// Reads Kineto traces (one per rank, or one). `gpus_per_node` tells intra- from inter-node groups. Throws
/// std::invalid_argument naming the file and the event: unreadable, not a Kineto trace, a malformed field.
KinetoRecords read_kineto_traces(const std::vector<std::string>& paths, int gpus_per_node);

/// Calibration from PyTorch profiler (Kineto) traces of a user's GPU run (interop/kineto_trace.h): fit_device
/// and fit_network on their records. `base`'s device is the GPU they ran on (its peak), its network says which
/// ranks share a node. Throws std::invalid_argument naming the file, or when no GEMM, attention or
/// memory-bound kernel could be used.
Calibration calibrate_kineto(const std::vector<std::string>& trace_files, const hw::HardwareSetting& base);

}  // namespace trainsim
