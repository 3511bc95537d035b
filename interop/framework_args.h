// The configurations users already have (`trainsim gen --from-megatron "ARGS"`, `gen --from-torchtitan "FLAGS"`):
// a Megatron-LM argument line or a torchtitan command line becomes a generator kind with its options and a
// model and training shape for the hardware cost model. docs/frameworks.md has the supported subset, flag by
// flag, with what each maps to; any other flag is refused by name.
//
// Flag names as the projects define them: Megatron-LM's megatron/training/arguments.py (explicit add_argument
// calls: --seq-length, --use-distributed-optimizer, --num-layers-per-virtual-pipeline-stage,
// --pipeline-model-parallel-layout, --swiglu, ...) and the dataclasses its ArgumentGroupFactory
// (megatron/training/argument_utils.py) turns into flags: megatron/core/model_parallel_config.py
// (--tensor-model-parallel-size, --pipeline-model-parallel-size, --sequence-parallel, --bf16),
// megatron/core/transformer/transformer_config.py (--num-layers, --hidden-size, --num-attention-heads,
// --num-query-groups, --ffn-hidden-size, --recompute-granularity, --recompute-method, --recompute-num-layers,
// --disable-bias-linear, --normalization), megatron/training/config/training_config.py (--micro-batch-size,
// --global-batch-size, --vocab-size). torchtitan: torchtitan/config/job_config.py of the TOML-era configuration
// (pytorch/torchtitan at 238fa99, February 2026: --training.local_batch_size, --parallelism.tensor_parallel_degree,
// ...), whose dataclass fields are the flags `--SECTION.FIELD`, and torchtitan/distributed/pipeline_parallel.py
// (generate_llm_fqn_per_model_part) for how it splits the layers over pipeline stages.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hardware/setting.h"
#include "schedules/generators.h"

namespace trainsim {

/// What a framework's configuration asks of `trainsim gen`.
struct FrameworkPlan {
  std::string kind;       ///< the generator kind (generators.h)
  GenOptions options;     ///< its options (a stage layout among them when the framework splits unevenly)
  hw::ModelSpec model;    ///< the model (validated)
  int microbatch_size = 1;
  int seq = 0;            ///< tokens per sequence (0: the model's)
  hw::Recompute recompute = hw::Recompute::None;
  hw::TpOverlap tp_overlap = hw::TpOverlap::Backward;  ///< the framework's TP communication overlap
  hw::MoeDispatcher moe_dispatcher = hw::MoeDispatcher::Nccl;  ///< how its MoE all-to-alls run (DeepEP or NCCL)
  hw::ExpertGemm expert_gemm = hw::ExpertGemm::PerExpert;     ///< how its experts' GEMMs are issued
  bool fp8 = false;                                      ///< FP8 linear layers
  bool fp8_all_gather = false;                           ///< and FSDP all-gathers in FP8
  hw::Attention attention = hw::Attention::Flash;
  hw::Elementwise elementwise = hw::Elementwise::Fused;  ///< eager: PyTorch without torch.compile
  /// What trainsim assumed, approximated or left aside, one sentence each (gen prints them).
  std::vector<std::string> notes;
};

/// What `trainsim gen` adds to a framework's configuration: the data-parallel degree (neither framework's
/// flags hold the world size it comes from) and a base model (gen --model) for Megatron-LM flags that do not
/// describe the whole model.
struct FrameworkInputs {
  int dp = 1;             ///< data-parallel degree (gen --dp)
  bool dp_given = false;  ///< --dp was given (else the plan notes that 1 was assumed)
  std::optional<hw::ModelSpec> model;  ///< gen --model, when given
};

/// The words of a command line as a POSIX shell splits them: whitespace separates, '...' and "..." quote (a
/// backslash escapes the next character outside single quotes). Throws std::invalid_argument for an unclosed
/// quote.
std::vector<std::string> split_words(std::string_view text);

/// A Megatron-LM argument line (pretrain_gpt.py's flags) as a plan: `gen 3d` (TP x PP x DP, Megatron-LM's rank
/// order) with --schedule 1f1b or interleaved-1f1b, its stage layout from --pipeline-model-parallel-layout,
/// --decoder-first/last-pipeline-num-layers or --account-for-embedding/loss-in-pipeline-split. Throws
/// std::invalid_argument naming the flag: an unsupported one, a missing or bad value, a configuration
/// Megatron-LM refuses (layers that do not divide) or trainsim cannot express.
FrameworkPlan from_megatron(const std::string& args, const FrameworkInputs& in);

/// A torchtitan command line (`--SECTION.FIELD VALUE` flags of job_config.py) as a plan: `gen 3d`, or the
/// pipeline kinds without TP and data parallelism, `fsdp` or `ddp` without TP and PP; torchtitan's stage split
/// (first and last stages less layers) as a stage layout. Throws std::invalid_argument naming the flag.
FrameworkPlan from_torchtitan(const std::string& flags, const FrameworkInputs& in);
/// The same for a torchtitan TOML job configuration given as text (what --job.config_file would read), with no
/// command-line flags over it. Throws std::invalid_argument naming the line for TOML that cannot be read.
FrameworkPlan from_torchtitan_toml(const std::string& toml_text, const FrameworkInputs& in);

/// A torchtitan model flavor that is a trainsim preset, field for field (torchtitan/models/NAME/__init__.py):
/// `--model.name` `name`, `--model.flavor` `flavor`.
struct TorchtitanFlavor {
  const char* name;
  const char* flavor;
  const char* preset;
};
/// Every such flavor, by model name: llama3's 8B, 70B and 405B, qwen3's 30B-A3B and 235B-A22B, deepseek_v3's 671B.
/// The importer reads them and the TOML exporter writes them from this one list.
const std::vector<TorchtitanFlavor>& torchtitan_flavors();
/// The flavors of model `name` (all of them when empty) in words: "qwen3's 30B-A3B and 235B-A22B".
std::string torchtitan_flavor_words(const std::string& name = "");

}  // namespace trainsim
