// The other way round from framework_args.h: a configuration (a FrameworkPlan: gen 3d's options and the training
// shape) written as the frameworks' own launch configuration, so that a plan's winner (`trainsim plan`) can be run:
// a Megatron-LM argument line (pretrain_gpt.py's flags) and a torchtitan TOML job configuration. Each writer reads
// its text back through the importer (from_megatron, from_torchtitan) and says whether the importer gives the same
// configuration: what a framework cannot express (ZeRO-1 in torchtitan, ZBV in Megatron-LM, ...) is said, never
// silently changed. docs/planning.md, "Launching the winner".
#pragma once

#include <string>

#include "interop/framework_args.h"

namespace trainsim {

/// The `trainsim gen` arguments that generate `plan` (without "trainsim" and the device and network options):
/// "gen 3d --tp 8 --pp 4 --dp 8 ... --microbatch-size 1 --seq 8192 --recompute none". The model is written as
/// `--model NAME` when it is its preset's (unchanged), else left to the caller.
std::string gen_command(const FrameworkPlan& plan);

/// A configuration written for a framework.
struct FrameworkLaunch {
  std::string text;    ///< the argument line or TOML; "" when the framework cannot run the configuration at all
  /// True when the framework's importer reads `text` back to the same configuration (kind, options, model and
  /// training shape): the same schedule and so the same prediction.
  bool exact = false;
  std::string note;    ///< why not exact (or why there is no text); "" when exact
};

/// `plan` (kind 3d) as a Megatron-LM argument line: the model's shape (--num-layers, --hidden-size, ...), the
/// parallel degrees, --micro-batch-size and --global-batch-size for `dp` replicas, --seq-length, --bf16,
/// --use-distributed-optimizer for ZeRO-1, --sequence-parallel, an MoE model's flags (with TP,
/// --expert-tensor-parallel-size: 1, or the TP size for gen 3d --etp), the recomputation, the stage layout
/// (--pipeline-model-parallel-layout when it is not Megatron-LM's even split), --fp8-format hybrid and
/// --tp-comm-overlap. Read back by from_megatron with `plan.model` as gen --model; exact unless Megatron-LM lacks
/// what the plan asks (FSDP, a ZB or V-shaped schedule, another TP overlap, eager attention).
FrameworkLaunch to_megatron(const FrameworkPlan& plan);

/// `plan` (kind 3d) as a torchtitan TOML job configuration (torchtitan/config/job_config.py's sections): model
/// flavor (llama3 8B, 70B, 405B only), training batch and sequence length, the parallel degrees with FSDP over the
/// data-parallel ranks, the pipeline schedule and its stage split, activation checkpointing, compile, float8 and
/// async TP. Read back by from_torchtitan (as --job.config_file); exact unless torchtitan lacks what the plan
/// asks (ZeRO-1 or plain DDP with TP or PP, Megatron-LM's backward-only TP overlap, a split its
/// first/last_stage_less_layers cannot give, a model that is not a llama3 flavor).
FrameworkLaunch to_torchtitan_toml(const FrameworkPlan& plan);

/// True when `a` and `b` describe the same configuration (kind, every generator option, model, microbatch size,
/// sequence length, recomputation, TP overlap, FP8, attention, elementwise kernels); notes are not compared.
/// `why`, when given, receives the first difference ("--zero 1 against --zero 3").
bool same_configuration(const FrameworkPlan& a, const FrameworkPlan& b, std::string* why = nullptr);

}  // namespace trainsim
