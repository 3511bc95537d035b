// Schedule generators (DESIGN §3): the schedules used in production, as data.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "schedules/rank_source.h"
#include "schedules/schedule.h"

namespace trainsim {

/// Parameters of a generator. Each kind reads the fields it needs and ignores the others.
struct GenOptions {
  int stages = 4;           ///< pipeline stages (pipeline kinds); world size = stages * dp
  int microbatches = 8;     ///< microbatches per step (per pipeline for pp-fsdp; per rank for data parallel)
  int chunks = 1;           ///< model chunks (virtual stages) per rank: interleaved-1f1b, looped-bfs
  int layers = 0;           ///< model layers of ddp/zero1/zero2/fsdp/zero3-owner and tp (0: 4) and 3d (0: pp x chunks, 4 when 1)
  int dp = 1;               ///< data-parallel degree: ranks for ddp/zero1/zero2/fsdp/zero3-owner, replicas for pp-fsdp and 3d
  /// fsdp: how many layers' all-gathers FSDP prefetches (FSDP2's default, 1: the next layer's). The all-gathers
  /// run on the all-gather stream (1), each issued after the compute that frees its slot: in the
  /// backward the all-gather of layer l after the backward of layer l + prefetch + 1, in the forward after the
  /// forward of layer l - prefetch - 2 (FSDP2 frees an all-gather's output one layer late, so its forward runs
  /// one layer further ahead); 0: after the pass just before (no overlap). docs/design.md, "Overlap".
  int prefetch = 1;
  /// fsdp: free gathered weights after forward (gather again in backward); as torchtitan, the last layer is
  /// kept for its backward, which FSDP would otherwise all-gather again at once.
  bool reshard_after_forward = true;
  /// ddp: layers per gradient bucket (DDP's bucket_cap_mb, 25 MiB by default, in layers: `gen --model` works it
  /// out from the model's grad bytes). Buckets are consecutive layers from the last one down; a bucket's
  /// all-reduces are issued on communication stream 1 once its last grad is ready, during the backward.
  int bucket_layers = 1;
  int tp = 1;               ///< tp, 3d: tensor-parallel degree, 1 to Tensor::kMaxTpSize
  int pp = 1;               ///< 3d: pipeline stages
  bool sequence_parallel = false;  ///< tp, 3d: sequence parallelism (reduce-scatter / all-gather over the TP group)
  int zero = 0;             ///< 3d: data parallelism: 0 plain (DDP), 1 ZeRO-1 (as zero1), 3 FSDP of each TP slice
  /// 3d: context parallelism, ranks splitting each sequence (CP groups cp0, cp1, ... next to the TP groups in the
  /// rank order; grads reduced over dp x cp)
  int cp = 1;
  /// ep and 3d: expert-parallel degree, ranks per EP group (docs/design.md, "Mixture of Experts"). ep: dividing dp.
  /// 3d: every schedule, DDP, zero 1 or zero 3 (FSDP of the expert slices over their expert-data-parallel groups),
  /// cp; the EP groups are consecutive ranks of each stage's tp x cp x dp ranks (Megatron-Core's folded layout,
  /// expert TP 1): ep divides tp x cp x dp and, with tp > 1, is a multiple of it (with sequence_parallel)
  int ep = 1;
  /// 3d --ep: expert tensor parallelism, 1 (the experts whole beside TP) or tp (each expert slice split over its TP
  /// group, Megatron-LM's default --expert-tensor-parallel-size): the EP groups then hold one TP index of each of
  /// ep TP groups, ep dividing cp x dp (Megatron-Core's expert rank order etp-ep-edp-pp)
  int etp = 1;
  /// 3d --ep: overlap the all-to-alls of an MoE layer's forward with the compute of the next step's backward (an
  /// adjacent forward, backward pair of MoE layers, of different microbatches: 1F1B's and the interleaved
  /// schedules' steady state, DualPipeV's overlapped pairs), as DeepSeek-V3's DualPipe and Megatron-LM's
  /// --overlap-moe-expert-parallel-comm do: the all-to-alls on a communication stream, the two passes interleaved
  /// by phase
  bool a2a_overlap = false;
  /// ep, 3d --ep: the first layers that are dense, without experts (DeepSeek-V3: 3); the others are MoE layers
  int dense_layers = 0;
  /// ep, 3d --ep: the relative token load of each expert slice (`ep` of them; the header's expert_load), e.g. measured
  /// router statistics; empty: balanced unless moe_imbalance is given
  std::vector<double> expert_load;
  /// ep, 3d --ep: the busiest slice's load over the mean (dropless routing's max/mean ratio, 1 to ep): slice 0 gets it,
  /// the others share the rest evenly; 0: not given
  double moe_imbalance = 0;
  /// ep, 3d --ep: the relative token load of each expert (E of them, E a multiple of ep: read_expert_loads), e.g.
  /// tokens per expert measured by a router; each slice's load is the sum of its experts' (slice_loads). Empty: not
  /// given
  std::vector<double> per_expert_load;
  /// 3d: the pipeline order: 1f1b, interleaved-1f1b or interleaved-zb (with chunks), zb-h1, zbv or dualpipev (two
  /// chunks per stage in V placement)
  std::string schedule = "1f1b";
  /// 3d: the transformer blocks of each stage chunk, in layer order (pp x chunks of them; 2 x pp for zbv and
  /// dualpipev): the schedule then has one layer per block (a chunk of no blocks, the embedding's or the LM head's
  /// alone, one layer), and the header's layout line says so. Empty: `layers` layers, split evenly over the chunks.
  /// The physical default (docs/hardware-model.md §5: a schedule layer is a modelling unit).
  std::vector<int> chunk_blocks;
  /// A stage layout (hardware/stage_layout.h, Megatron-LM's --pipeline-model-parallel-layout, e.g.
  /// "Et*3|t*4|t*4|t*3L"): one stage per schedule layer, written to the header's `layout` line. "": none (the
  /// even split). For the kinds with --layers (data parallel, tp, 3d) its stages are the layers when `layers` is 0.
  std::string layout;
};

/// Whether a pipeline schedule places its stage chunks in a V: zbv and dualpipev (PyTorch's ScheduleZBVZeroBubble
/// and ScheduleDualPipeV), two chunks per rank, chunk c on rank c for c < p and on rank 2p-1-c after. Every other
/// pipeline schedule places them looped: chunk c on rank c mod p (Megatron-LM's virtual pipeline order).
bool v_shaped_schedule(const std::string& schedule);
/// Whether a schedule runs `chunks` looped stage chunks per rank: interleaved-1f1b and interleaved-zb (and, among the
/// pipeline kinds alone, looped-bfs).
bool interleaved_schedule(const std::string& schedule);
/// Whether `m` microbatches go in rounds = max(1, m / p) rounds of equal size on `p` stages (PyTorch's rule for its
/// interleaved schedules, torch/distributed/pipelining/schedules.py): what gen's interleaved-zb always needs and
/// interleaved-1f1b needs when m is not a multiple of p (gen refuses the others). True for every other schedule.
bool interleaved_rounds_fit(const std::string& schedule, int p, int m);
/// The stage chunks each pipeline rank holds under `schedule`: 2 for the V-shaped ones, else `chunks` (1 for the
/// one-chunk schedules, whose `chunks` is 1).
int chunks_per_rank(const std::string& schedule, int chunks);
/// The pipeline rank (0 .. p-1) of stage chunk `chunk` (0 .. p x chunks_per_rank - 1, in layer order) under
/// `schedule`'s placement (v_shaped_schedule). The generators' stage_map is built from it.
int rank_of_chunk(const std::string& schedule, int p, int chunk);

/// The generator kinds: gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zbv, dualpipev, interleaved-zb, ddp,
/// zero1, zero2, fsdp, zero3-owner, pp-fsdp, tp, 3d. zero3-owner: ZeRO-3 sharded between tensors, `dp` ranks,
/// layer l owned whole by rank l mod dp (broadcast before each use, grads reduced to the owner; .sched version
/// 2). tp: `tp` ranks splitting every layer (Megatron-LM's tensor parallelism); 3d: tp x cp x dp x pp ranks,
/// rank = tp + T * (cp + C * (dp + D * pp)) (docs/design.md, "Tensor parallelism"; C = 1 without --cp). zbv and dualpipev: `stages` ranks holding 2 x stages layers in V placement
/// (PyTorch's ScheduleZBVZeroBubble and ScheduleDualPipeV; dualpipev needs microbatches >= 2 x stages);
/// interleaved-zb: `chunks` looped chunks per rank (PyTorch's ScheduleInterleavedZeroBubble).
/// interleaved-1f1b follows Megatron-LM when the microbatches are a multiple of the stages and PyTorch's
/// ScheduleInterleaved1F1B otherwise (rounds = max(1, m / p) rounds of equal size; refused when m does not
/// split into them).
const std::vector<std::string>& generator_kinds();

/// Per-expert token loads (e.g. a router's measured tokens per expert, Megatron-LM's per-layer MoE logging summed
/// over layers) from the text `text` of the file `name`: numbers separated by white space or commas, `#` starting a
/// comment to the end of the line. Each is finite, at least 0 and at most 1e15; there are 1 to 65,536 of them and
/// at least one is above 0. Throws std::invalid_argument "NAME:LINE: why" for anything else.
std::vector<double> parse_expert_loads(std::string_view text, const std::string& name);
/// parse_expert_loads of the file at `path` (read_input_file's size limit). Throws std::invalid_argument.
std::vector<double> read_expert_loads(const std::string& path);
/// The relative loads of `ep` expert slices, slice j holding experts j·E/ep .. (j+1)·E/ep − 1 of the E of
/// `per_expert` (Megatron-Core's and torchtitan's contiguous placement): each slice's sum over the mean slice's,
/// so that they average 1 (the header's expert_load). Throws std::invalid_argument when ep does not divide E or a
/// slice's experts get no token (a slice of load 0 is no expert parallelism).
std::vector<double> slice_loads(const std::vector<double>& per_expert, int ep);
/// Throws std::invalid_argument "`what` gives N experts' loads, but the model 'NAME' has E experts" unless
/// `per_expert` holds one load per expert of the model (`experts` of them); nothing when it is empty.
void check_expert_load_count(const std::vector<double>& per_expert, int experts, const std::string& model,
                             const std::string& what);

/// The options with one schedule layer per transformer block of a model of `blocks` blocks, the physical default
/// (a schedule layer is a modelling unit; one block is the unit of FSDP in torchtitan and Megatron-LM and of their
/// gradient accumulation, docs/hardware-model.md §5), where `options` leave the layers to it (no --layers): for 3d,
/// chunk_blocks from `layout` (its stages being the stage chunks, pp x chunks of them) or the blocks split evenly
/// over the chunks (StageLayout::even: the embedding with the first chunk, the LM head with the last); for tp and
/// the data-parallel kinds (ddp, zero1, zero2, fsdp, zero3-owner) without a layout, `blocks` layers. The pipeline
/// kinds keep one layer per stage chunk (a pipeline study, the unit cost model's own unit). Throws
/// std::invalid_argument naming the position for a layout that cannot be read.
GenOptions per_block_layers(const std::string& kind, GenOptions options, int blocks);
/// gen ep (or gen 3d --ep) on a Mixture-of-Experts model of `blocks` blocks whose first `dense_blocks` are dense:
/// the options with --dense-layers set to the schedule layers that hold only dense blocks (the layers, with 3d's
/// chunk_blocks, `options.layout` or the even split, after per_block_layers), so that each layer with an MoE block
/// runs experts. Other kinds, or dense_blocks 0: the options unchanged. Throws std::invalid_argument naming the position for a layout that
/// cannot be read.
GenOptions model_dense_layers(const std::string& kind, GenOptions options, int blocks, int dense_blocks);
/// The microbatches `options.microbatches` means for a step of `global_batch` sequences in microbatches of
/// `microbatch_size` sequences: the data-parallel kinds (ddp, zero1, zero2, fsdp, zero3-owner) run dp x microbatches
/// x microbatch_size sequences a step, pp-fsdp and 3d dp x microbatches x microbatch_size (context-parallel ranks
/// share their sequences), the pipeline kinds and tp microbatches x microbatch_size. Throws std::invalid_argument
/// naming `kind` and the divisor when the global batch does not divide into whole microbatches per replica.
int microbatches_for_global_batch(const std::string& kind, const GenOptions& options, long long global_batch,
                                  int microbatch_size);
/// Generates a schedule of `kind`. Throws std::invalid_argument for an unknown kind or bad options
/// (naming the option and the allowed range), also when the options ask for more ranks, layers or
/// microbatches than schedules/limits.h allows, or more than kMaxGeneratedWork layer-microbatch pairs, and for
/// a layout that cannot be read (naming the position) or whose stages are not the schedule's layers.
Schedule generate(const std::string& kind, const GenOptions& options);
/// The same schedule as a RankSource, op for op: the pipeline kinds (gpipe, 1f1b, interleaved-1f1b, looped-bfs,
/// zb-h1, zbv, dualpipev, interleaved-zb, pp-fsdp, tp, 3d) make each rank's ops when the source is asked for them,
/// so that `gen --sim` never holds every rank's ops at once; the data-parallel kinds hold the whole schedule.
/// Throws as generate() does.
std::unique_ptr<RankSource> generate_ranks(const std::string& kind, const GenOptions& options);

}  // namespace trainsim
