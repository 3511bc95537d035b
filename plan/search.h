// The configurations `trainsim plan` searches (issue 34; docs/planning.md): a training run (model, GPU count,
// device, network, global batch, sequence length) and the knobs a user may fix or list, enumerated into gen 3d
// configurations (interop/framework_args.h's FrameworkPlan: the generator's options and the training shape), with
// the ones that cannot run at all (a degree that does not divide, TP across nodes, ...) counted by reason.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hardware/setting.h"
#include "interop/framework_args.h"

namespace trainsim::plan {

/// Which framework's behaviour the candidates follow: `any` searches every schedule and both ZeRO-1 and FSDP
/// with Megatron-LM's TP overlap; `megatron` what Megatron-LM runs (1F1B and interleaved 1F1B, DDP or its
/// distributed optimizer); `torchtitan` what torchtitan runs (FSDP over the data-parallel ranks, every pipelining
/// schedule it names, TP without overlap unless async TP).
enum class Framework { Any, Megatron, Torchtitan };
/// "any", "megatron", "torchtitan"; throws hw::SpecError naming `where`.
Framework framework_from_name(const std::string& name, const std::string& where);
const char* framework_name(Framework f);

/// The values each knob may take: empty lists take the defaults (default_space). Units: degrees in ranks,
/// microbatch size in sequences.
struct SearchSpace {
  std::vector<int> tp, cp, pp, dp, chunks, microbatch_size, zero;  ///< dp: a constraint (the rest of the GPUs)
  /// Expert-parallel degrees (an MoE model only): EP groups of that many DP ranks of a stage (gen 3d --ep), 1 for
  /// every expert on every rank.
  std::vector<int> ep;
  /// Expert tensor-parallel degrees (an MoE model with EP above 1): 1 (the experts whole beside TP) or the
  /// candidate's TP degree (each expert split over its TP group, gen 3d --etp); other values are removed. Without
  /// EP the experts are split over the TP group whatever it says (one candidate).
  std::vector<int> etp;
  std::vector<std::string> schedules;  ///< 1f1b, interleaved-1f1b, zb-h1, zbv, dualpipev, interleaved-zb
  std::vector<hw::Recompute> recompute;
  std::vector<bool> sp, fp8;
  std::vector<std::string> layouts;    ///< even, balanced
};

/// A planning question.
struct PlanRequest {
  hw::ModelSpec model;
  hw::DeviceSpec device;
  hw::NetworkSpec network;
  int gpus = 0;             ///< world size (TP x CP x PP x DP)
  long long global_batch = 0;  ///< sequences per step over every replica
  int seq = 0;              ///< tokens per sequence (0: the model's)
  Framework framework = Framework::Any;
  /// TP overlap for Megatron-LM-style candidates (Any, Megatron): backward by default, full with
  /// --tp-comm-overlap; torchtitan: none, or full (async TP) when given.
  std::optional<hw::TpOverlap> tp_overlap;
  SearchSpace space;
  int top = 10;             ///< rows the ranking keeps in full and the dominance rule protects
  /// An MoE model's routing for every candidate with expert slices: the busiest slice's tokens over the mean
  /// (gen 3d --moe-imbalance; 0 or 1: balanced). A candidate whose EP degree is below it cannot have it and is not
  /// generated ("imbalance").
  double moe_imbalance = 0;
  /// An MoE model's measured routing: each expert's relative load (as many as it has experts; read_expert_loads),
  /// which gives each candidate's expert slices theirs by its EP degree (gen 3d --expert-load-file: slice_loads).
  /// Empty: moe_imbalance's, or balanced. Not with moe_imbalance.
  std::vector<double> per_expert_load;
  /// An MoE model's candidates with expert slices overlap their all-to-alls with another microbatch's compute (gen 3d
  /// --a2a-overlap); refused for a dense model.
  bool a2a_overlap = false;
  /// How an MoE model's all-to-alls run (hw::MoeDispatcher: NCCL's, or DeepEP's hierarchical dispatch); refused as
  /// deepep for a dense model.
  hw::MoeDispatcher moe_dispatcher = hw::MoeDispatcher::Nccl;
};

/// The default values of each knob for `r` (docs/planning.md, "The search space"): TP the powers of two up to the
/// GPUs of a node that divide the heads and key/value heads; CP 1 (and 2, 4, 8 from 32,768 tokens); PP every
/// divisor of the GPUs left up to the blocks; virtual stages 2 and 4 for the interleaved schedules; microbatch
/// sizes 1, 2, 4; the framework's schedules and ZeRO; recomputation none, selective and full; SP with TP; FP8 off;
/// layouts even and balanced. An MoE model (docs/planning.md, "Mixture of Experts"): EP every divisor of its
/// experts up to the GPUs, TP 1 and 2 beside it (with SP; Megatron-Bridge's MoE recipes' TP) with expert TP 1 (EP a
/// multiple of TP; the recipes' too: --etp 1,2 adds expert TP equal to TP, Megatron-LM's default, not with
/// torchtitan's framework, whose expert TP trainsim does not time), TP without EP, CP as for a dense model (EP then carved out of TP x CP x DP), ZeRO-1 (FSDP, --zero 3, when asked;
/// FSDP with torchtitan's framework: what gen 3d --ep runs).
SearchSpace default_space(const PlanRequest& r);

/// The knobs of a candidate under their flag names, for tables and JSON.
struct Knobs {
  int tp = 1, cp = 1, pp = 1, chunks = 1, dp = 1, microbatch_size = 1, microbatches = 1, zero = 0;
  int ep = 1;  ///< expert-parallel degree (an MoE model; 1: every expert on every rank)
  /// Expert tensor-parallel degree (an MoE model): with EP above 1, 1 or tp; with EP 1, tp (every expert on every
  /// rank, split over the TP group, its input gathered and its output reduced as a dense MLP's)
  int etp = 1;
  std::string schedule = "1f1b", layout = "even";
  hw::Recompute recompute = hw::Recompute::None;
  bool sp = false, fp8 = false;
};

/// One configuration to simulate: its knobs and the gen 3d configuration they make (one schedule layer per
/// block, the stage chunks' blocks from the layout).
struct Candidate {
  Knobs knobs;
  FrameworkPlan config;
};

/// What enumeration produced: the candidates, in a fixed order (the knobs' nesting order, every list sorted),
/// and how many combinations each rule removed before any simulation ("indivisible": a degree or the global
/// batch does not divide, more stage chunks than blocks, a schedule's microbatch need; "tp_across_nodes": TP
/// wider than a node; "redundant": a knob that means nothing for the rest, e.g. a layout with one stage;
/// "imbalance": an EP degree below the request's moe_imbalance). An expert TP degree other than 1 or the TP degree,
/// or above 1 without EP, is "indivisible".
struct Enumeration {
  std::vector<Candidate> candidates;
  std::map<std::string, long long> removed;
};

/// Every combination of `r`'s search space (default_space for the lists left empty). Throws hw::SpecError for
/// a request that cannot be planned (no GPUs, a global batch below 1, FP8 on a device without it; --ep for a dense
/// model; for an MoE model, CP, an EP degree that does not divide its experts, a --moe-imbalance below 1,
/// --a2a-overlap with torchtitan's framework).
Enumeration enumerate(const PlanRequest& r);

/// The blocks of each of `chunks` stage chunks under a layout: "even" (StageLayout::even), or "balanced": the
/// embedding and the LM head counted as one block each and the blocks moved off the first and last chunks to
/// make room for them (torchtitan's split with first/last_stage_less_layers 1, which is Megatron-LM's
/// --account-for-embedding/loss-in-pipeline-split when it divides). Empty when a chunk would hold a negative
/// count or the layout is unknown.
std::vector<int> layout_blocks(const std::string& layout, int blocks, int chunks);

/// The hardware setting of a candidate's configuration on `r`'s device and network, as `gen --from-megatron`
/// builds it: the configuration's model, microbatch size, sequence length, recomputation, TP overlap, FP8,
/// attention, elementwise kernels and CP degree. Throws hw::SpecError.
hw::HardwareSetting setting_of(const FrameworkPlan& config, const hw::DeviceSpec& device, const hw::NetworkSpec& network);

}  // namespace trainsim::plan
