// Shared pieces of the schedule generators (schedules/generators.h): option checks, op makers, a per-rank
// op list that keeps running weight-grad sums, and the pipeline builder that turns per-rank orders of
// compute passes into complete op lists (loads, sends and receives, loss, frees, accumulation, updates).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "schedules/generators.h"
#include "schedules/rank_source.h"
#include "schedules/schedule.h"

namespace trainsim::gen {

// ---- option checks -------------------------------------------------------------------------------------

/// Throws std::invalid_argument "KIND: --OPTION must be at least MIN (got VALUE)" when value < min.
void require_at_least(const std::string& kind, const char* option, int value, int min);
/// Throws std::invalid_argument "KIND: --tp must be at least 1 / at most 64 ..." unless 1 <= tp <=
/// Tensor::kMaxTpSize.
void require_tp_degree(const std::string& kind, int tp);

// ---- tensors and ops -----------------------------------------------------------------------------------

/// The ids {i}.
IdSet one(int i);
/// Shard `index` of `count` of layer l's weight at `step` ({0} of 1 when count == 1).
Tensor weight_shard(int layer, int index, int count, int step = 0);
/// Every shard of layer l's weight split in `count` ([0-(count-1)/count]); W_l when count == 1.
Tensor weight_full(int layer, int count, int step = 0);
/// Shard `index` of `count` of layer l's optimizer state.
Tensor opt_shard(int layer, int index, int count, int step = 0);

/// Microbatches per round when `m` microbatches go in rounds = max(1, m / p) rounds of equal size (PyTorch's
/// interleaved schedules). Throws std::invalid_argument "KIND: M microbatches do not split into R rounds..."
/// when they do not divide evenly.
int microbatches_per_round(const std::string& kind, int p, int m);

/// A header for a generated schedule: unit costs, per-pair channels.
ScheduleHeader make_header(int world_size, int layers, int microbatches);

/// One rank's op list under construction.
class RankProgram {
 public:
  RankProgram(int rank, int layers, int microbatches) : rank_(rank), layers_(layers), microbatches_(microbatches) {}
  /// The same, appending to `ops` (a list whose memory is reused: the caller clears it).
  RankProgram(int rank, int layers, int microbatches, std::vector<Op> ops)
      : rank_(rank), layers_(layers), microbatches_(microbatches), ops_(std::move(ops)) {}

  int rank() const { return rank_; }
  std::vector<Op>& ops() { return ops_; }
  /// Room for `n` ops (an upper estimate: capacity never touched costs no resident memory), so that the
  /// list is not moved as it grows.
  void reserve(std::size_t n) { ops_.reserve(n); }

  void load(TensorList ts);
  void free(TensorList ts);
  void send(int to, Tensor t);
  /// A receive on `stream` (0: it holds the compute stream until the message comes; a communication stream only
  /// posts it, and the op that reads the tensor waits).
  void recv(int from, Tensor t, int stream = 0);
  /// A compute op with explicit reads and writes (the defaults when left empty).
  void compute(OpKind kind, int layer, IdSet batches, TensorList reads = {}, TensorList writes = {});
  /// All-gather, reduce-scatter or all-reduce of `in` into `out` over `group`, on `stream` (0: compute).
  void collective(OpKind kind, int layer, int group, Tensor in, Tensor out, int stream = 0);
  /// Adds the resident weight grad `g` to the running sum of its layer (same shards; an MoE layer keeps one sum
  /// for its dense weight and one for its expert slice): the first grad becomes
  /// the sum; later ones are accumulated into it and both parts freed, on `stream` (FSDP adds each reduce-
  /// scattered shard to the sharded grad on its communication stream, after the reduce-scatter).
  void add_grad(const Tensor& g, int stream = 0);
  /// The running weight-grad sum of `layer` (of its expert slice when `expert`; throws std::logic_error when
  /// there is none); forgets it.
  Tensor take_grad(int layer, bool expert = false);

 private:
  int rank_, layers_, microbatches_;
  std::vector<Op> ops_;
  std::vector<std::pair<int, Tensor>> sums_;  // (layer, running sum)
};

// ---- Mixture of Experts --------------------------------------------------------------------------------

/// Where a rank's experts are (docs/design.md, "Mixture of Experts"): it is member `slice` of an EP group of `ep`
/// ranks (header group `group`) and holds expert slice `slice` of each MoE layer. Under tensor and sequence
/// parallelism it routes sequence shard `seq_shard` of `seq_shards` of its microbatches' tokens (its TP index of the
/// TP degree); seq_shards 1: whole microbatches. With expert tensor parallelism (`etp` > 1, Megatron-Core's ETP equal
/// to the TP degree) it holds TP slice `etp_index` of its expert slice, and its expert-TP group (header group
/// `etp_group`, its TP group) all-gathers the tokens the dispatch gave it and reduce-scatters the experts' output.
struct ExpertPlace {
  int slice = 0, ep = 1, group = 0;
  int seq_shard = 0, seq_shards = 1;
  int stream = 0;  ///< the all-to-alls' stream (0: compute; gen 3d --a2a-overlap: a communication stream)
  /// The shards of the expert weight the experts read: 1, or with FSDP the expert-data-parallel degree (the weight
  /// all-gathered over that group: weight_full of that many shards).
  int weight_shards = 1;
  int etp = 1, etp_index = 0, etp_group = 0;
  /// `t` as this rank routes it: its sequence shard, or `t` itself without one.
  Tensor tokens(const Tensor& t) const { return seq_shards > 1 ? shard(t, seq_shard, seq_shards) : t; }
  /// This rank's part of an expert weight, optimizer state or weight grad `t`: its expert slice, and with expert TP
  /// its TP slice of that.
  Tensor state(Tensor t) const {
    t = expert_slice(std::move(t), slice, ep);
    return etp > 1 ? tp_slice(std::move(t), etp_index, etp) : t;
  }
};
/// An MoE layer's forward over microbatches `b` (gen ep's and gen 3d --ep's): the dense part reads `in` and `w` and
/// writes its output routed (x.tokens of it); the dispatch all-to-all gives the slice the EP group's
/// `group_batches`; the slice's experts run; the combine writes `out` (the layer's output for `b`, complete, or
/// its sequence shard). Leaves the experts' input resident for the backward and frees the rest. The four phases
/// below, in order.
void moe_forward(RankProgram& prog, int layer, const IdSet& b, const IdSet& group_batches, const ExpertPlace& x,
                 const Tensor& in, const Tensor& w, const Tensor& out);
/// The experts' half of an MoE layer's backward: `grad` (the output's grad for `b`, or its sequence shard)
/// dispatched and freed, the slice's experts' backward on the EP group's `group_batches` (their grad added to the
/// slice's running sum, their input freed), the combine. Returns the routed grad the dense part's backward reads
/// (x.tokens of it; resident: the caller frees it after that pass). The three phases below, in order.
Tensor moe_backward_experts(RankProgram& prog, int layer, const IdSet& b, const IdSet& group_batches,
                            const ExpertPlace& x, const Tensor& grad);

/// The phases of moe_forward and moe_backward_experts, apart (gen 3d --a2a-overlap interleaves a forward's with
/// another microbatch's backward's, as DeepSeek-V3's DualPipe and Megatron-LM's --overlap-moe-expert-parallel-comm
/// do). Forward: the dense part (returns the routed tokens), the dispatch (returns the slice's tokens, frees the
/// routed), the experts (return their output), the combine into `out` (frees the experts' output).
Tensor moe_dense_forward(RankProgram& prog, int layer, const IdSet& b, const ExpertPlace& x, const Tensor& in,
                         const Tensor& w);
Tensor moe_dispatch(RankProgram& prog, int layer, const IdSet& group_batches, const ExpertPlace& x, const Tensor& routed);
Tensor moe_experts_forward(RankProgram& prog, int layer, const IdSet& group_batches, const ExpertPlace& x,
                           const Tensor& tokens);
void moe_combine(RankProgram& prog, int layer, const ExpertPlace& x, const Tensor& expert_out, const Tensor& out);
/// Backward: the grad's dispatch (returns the slice's grads, frees `grad`), the experts' backward (returns their
/// input grads; frees their input and the dispatched grads, adds their weight grad), the combine (returns the
/// routed grad for `b`, frees the experts' input grads).
Tensor moe_grad_dispatch(RankProgram& prog, int layer, const IdSet& group_batches, const ExpertPlace& x,
                         const Tensor& grad);
Tensor moe_experts_backward(RankProgram& prog, int layer, const IdSet& group_batches, const ExpertPlace& x,
                            const Tensor& grads);
Tensor moe_grad_combine(RankProgram& prog, int layer, const IdSet& b, const ExpertPlace& x, const Tensor& grads);

/// The expert slices' loads that `o` asks for (--expert-load, the per-expert loads' slice_loads, or --moe-imbalance
/// R: slice 0 R, the others (e - R) / (e - 1)), for `e` slices; empty: balanced. Throws std::invalid_argument naming
/// `kind` for more than one given, a count other than e, a load not above 0 and at most 1e6, or R not in [1, e).
std::vector<double> expert_loads(const std::string& kind, const GenOptions& o, int e);

// ---- pipelines -----------------------------------------------------------------------------------------

/// A compute pass of a pipeline: forward, full backward, backward-input or backward-weight.
enum class Pass { F, B, I, W };

/// One pass of one layer ("stage chunk") for one microbatch.
struct Step {
  Pass pass = Pass::F;
  int layer = 0;
  int mb = 0;
};

/// How the ranks of a data-parallel group hold a layer's weight, optimizer state and grads (PipelinePlan::dp > 1).
enum class DpMode {
  Fsdp,       ///< weight and optimizer state sharded; weights all-gathered before the first pass, grads reduce-scattered
  Replicate,  ///< DDP: everything whole; grads all-reduced, every rank updates the whole layer
  Zero1,      ///< optimizer state sharded (gen zero1): grads all-reduced, a shard updated, the weight all-gathered
};

/// What build_pipeline needs: who runs which pass in which order, and how weights are held.
///
/// Tensor parallelism (docs/design.md, "Tensor parallelism"): with tp > 1 each plan rank r is the TP group of
/// the schedule ranks j + tp * r (j = 0..tp-1, header group tp_group[r]); rank j holds TP slice j of every
/// weight, optimizer state and weight grad of its layers (tp_slice), writes a layer's output as slice j's
/// partial sum and the last layer's logits as slice j, and all-reduces each partial sum over the TP group on
/// the compute stream (Megatron-LM runs its TP collectives there), except the input grad of layer 0, which
/// nothing reads. With sequence_parallel a reduce-scatter keeps sequence shard j of the sum instead
/// (Korthikanti et al. 2022), which is what the rank keeps, sends and receives; an all-gather over the TP
/// group brings the whole tensor back before each pass that reads it (backward passes gather again).
struct PipelinePlan {
  int world_size = 1;                   ///< plan ranks (pipeline ranks); the schedule has world_size * tp ranks
  int layers = 1;
  int microbatches = 1;                 ///< of the whole step (the header's)
  std::vector<std::vector<Step>> steps;  ///< per rank, in program order
  std::vector<int> stage_map;           ///< header stage_map
  std::vector<std::vector<int>> groups;  ///< header groups 1, 2, ...
  /// Data parallelism: 1 = each rank holds its layers' full weights and updates them alone. dp > 1 = schedule
  /// rank r is member shard_index[r] of header group group_of[r] of dp ranks, and dp_mode says what it holds:
  /// Fsdp, shard shard_index[r] of dp of its layers' weights and optimizer states, all-gathered in the group
  /// before the first pass and the grads reduce-scattered there after the last; Replicate and Zero1 as
  /// DpMode says. The group's collectives run on stream dp_stream (pp-fsdp and 3d: 1, a communication stream, as
  /// FSDP and DDP run them: docs/design.md, "Overlap as the frameworks do it").
  int dp = 1;
  DpMode dp_mode = DpMode::Fsdp;
  /// Without data parallelism: every layer's optimizer step after the rank's last pass, in layer order (Megatron-LM
  /// and PyTorch's pipelining step the optimizer once the whole schedule has run); false: each layer right after
  /// its last grad (the pipeline kinds, as the puzzles' pipelines do). With dp > 1 the step always waits.
  bool step_at_end = false;
  int dp_stream = 0;
  std::vector<int> shard_index;  ///< per schedule rank
  std::vector<int> group_of;     ///< per schedule rank
  int tp = 1;                    ///< TP degree: schedule ranks per plan rank
  bool sequence_parallel = false;
  std::vector<int> tp_group;     ///< per plan rank: the header group of its TP group (tp > 1)
  std::vector<std::string> group_names;  ///< header group names (format version 2 when not empty)
  /// Identical replicas of one pipeline (3d's data-parallel and CP replicas). When > 1, `steps` holds one
  /// replica's lists (world_size / replicas of them, microbatch ids below microbatches / replicas), and replica d
  /// runs list i as plan rank d + replicas·i on microbatch ids shifted by d·(microbatches / replicas); no message
  /// crosses replicas. The plan-wide work (checks, messages, where receives go) is then done once, for one
  /// replica, not for every one (issue 34: a 16,384-rank step's generation), and the ops are the ones the
  /// expanded plan (expand_replicas) gives.
  int replicas = 1;
  /// Expert parallelism (gen 3d --ep; docs/design.md, "Mixture of Experts"): with ep > 1 (any dp_mode; with tp > 1 sequence_parallel and ep a multiple of tp; a split backward runs the experts' whole backward
  /// in the input-grad pass and keeps the routed grad for the dense part's weight-grad pass) the layers from
  /// dense_layers on are MoE layers. The schedule rank of TP index j in replica d (its data-parallel index) has
  /// index f = j + tp·d in its stage and is member f mod ep of EP group ep_group[rank], holding expert slice f mod ep
  /// of each MoE layer (Megatron-Core's folded layout, expert TP 1); an MoE layer's forward writes its output routed
  /// (its sequence shard j with TP), dispatches it over the EP group (all-to-all), runs the slice's experts on the
  /// group's microbatches of the same step (replica k's microbatch i is i + k·M/replicas) and combines; the
  /// backward is the conjugate. The expert grads reduce over edp_group[rank] (the ranks of the stage holding the
  /// same slice; 0 when ep = tp·dp) on dp_stream, and with Zero1 the expert optimizer state is sharded there; with
  /// Fsdp the slice's weight and optimizer state are sharded there, the weight all-gathered before the first pass
  /// and the grads reduce-scattered, as the dense part's over the data-parallel group (torchtitan's FSDP of the
  /// experts over their expert-data-parallel mesh). Per schedule rank.
  int ep = 1;
  /// Expert tensor parallelism: 1, or tp (GenOptions::etp): the stage index f's expert coordinates are then its
  /// expert-TP index f mod etp, its expert slice (f / etp) mod ep and its expert-data-parallel index f / (etp·ep)
  /// (Megatron-Core's expert rank order etp-ep-edp-pp); with etp = tp the expert-TP group is the TP group.
  int etp = 1;
  int dense_layers = 0;
  /// With ep > 1: interleave a run of forwards of MoE layers with the run of backwards (B or I) after it by pairs and
  /// by phase, their all-to-alls on stream a2a_stream (GenOptions::a2a_overlap).
  bool a2a_overlap = false;
  static constexpr int a2a_stream = 2;
  /// Layers that hold no transformer block (a stage chunk of the embedding or the LM head alone): never MoE layers,
  /// wherever they sit. Empty: every layer holds blocks.
  std::vector<char> blockless;
  std::vector<int> ep_group, edp_group;
};

/// `plan` with every replica's step lists written out (replicas 1): what build_pipeline makes of a plan with
/// replicas, for tests. Throws std::logic_error when the lists or microbatches do not split into the replicas.
PipelinePlan expand_replicas(PipelinePlan plan);

/// gen 3d's plan (schedules/generators/three_d.cpp) of one pipeline's `order` run by `D` data-parallel replicas
/// (D = data parallel x CP: a CP rank is a replica with its own microbatch ids), each stage a TP group of `T`
/// ranks: plan rank d + D x s is replica d's stage s, schedule rank j + T x (d + D x s) its TP member j. The
/// header groups are the TP groups ("tp<k>", when T > 1), the CP groups ("cp<k>", when C > 1, C dividing D), then
/// the data-parallel groups over D ("dp<k>", when D > 1) with `mode`; steps given once (replicas = D).
PipelinePlan replicate_pipeline(const PipelinePlan& order, int T, int C, int D, bool sequence_parallel, DpMode mode);

/// A plan of p ranks holding 2p layers in V placement (layer l on rank l for l < p, then 2p-1-l): the
/// placement of ZBV and DualPipeV, without steps yet.
PipelinePlan v_shaped_plan(int p, int m);
/// A plan of p ranks holding p * v layers in loop placement (layer = chunk * p + rank, on that rank), without
/// steps yet: GPipe, 1F1B and the interleaved schedules.
PipelinePlan looped_plan(int p, int v, int m);

/// The schedule of a plan, as a source that makes each rank's ops when asked (RankSource::holds_all() is
/// false; take() builds them all). The plan-wide work is done here, once: the checks, the messages and where
/// their receives go (schedules/generators/pipeline_source.cpp). Each (layer, microbatch) must have one forward and either one full
/// backward or one backward-input and one backward-weight (on the rank of its backward-input). Activations
/// and their grads go from the rank of one layer to the rank of the next: sent right after the producing
/// pass, received right before the consuming one, or earlier (at a step boundary the receiver reaches after
/// the message is ready, so no wait is added) when the sender would otherwise find the pair's one slot
/// still full at its next send on that channel; receives keep the channel's order. Layer 0's rank loads
/// the inputs; the rank of the last layer computes the loss right after its forward; grads are summed as
/// they come; a layer is updated right after its last grad (with step_at_end after the rank's last pass), or with
/// dp > 1 its grads are reduced then (on dp_stream) and the optimizer steps after the rank's last pass, in layer order. Timing uses unit costs (the generators'
/// cost model). Throws std::logic_error for an inconsistent plan.
std::unique_ptr<RankSource> build_pipeline(PipelinePlan plan);

/// The orders of the pipeline kinds (what gen_1f1b, gen_interleaved_1f1b and gen_zb_h1 build), as plans of
/// `p` stages, `v` chunks per stage and `m` microbatches, one layer per stage chunk. `kind` names the
/// generator in errors (interleaved: microbatches_per_round's).
PipelinePlan plan_1f1b(int p, int m);
PipelinePlan plan_interleaved_1f1b(const std::string& kind, int p, int v, int m);
PipelinePlan plan_zb_h1(int p, int m);
/// ZBV's order (gen_zbv), V placement: 2p layers.
PipelinePlan plan_zbv(int p, int m);
/// DualPipeV's order (gen_dualpipev), V placement: 2p layers. Throws std::invalid_argument, naming `kind` and the
/// option that gives p (`stages_option`), when m < 2p.
PipelinePlan plan_dualpipev(const std::string& kind, const std::string& stages_option, int p, int m);
/// Interleaved zero bubble's order (gen_interleaved_zb), looped placement: p·v layers. `kind` names the generator
/// in microbatches_per_round's errors.
PipelinePlan plan_interleaved_zb(const std::string& kind, int p, int v, int m);

/// `order` with each of its layers (stage chunks) c split into `layers_per_chunk[c]` consecutive schedule layers
/// (at least 1 each) on the same rank: each forward runs the chunk's layers upward, each backward (and each of its
/// halves) downward, so that a chunk of k layers does, pass for pass, what it did as one. The stage map follows.
/// Throws std::logic_error when `layers_per_chunk` does not have one count of at least 1 per layer of `order`.
PipelinePlan refine_layers(const PipelinePlan& order, const std::vector<int>& layers_per_chunk);

/// The 1F1B order of one stage running `layer` on microbatches first..first+m-1: min(warmup, m) forwards,
/// then one forward one backward, then the remaining backwards.
std::vector<Step> one_f_one_b(int layer, int first, int m, int warmup);

// ---- the families ----------------------------------------------------------------------------------------

std::unique_ptr<RankSource> gen_gpipe(const GenOptions& o);
std::unique_ptr<RankSource> gen_1f1b(const GenOptions& o);
std::unique_ptr<RankSource> gen_interleaved_1f1b(const GenOptions& o);
std::unique_ptr<RankSource> gen_looped_bfs(const GenOptions& o);
std::unique_ptr<RankSource> gen_zb_h1(const GenOptions& o);
/// ZBV: `stages` ranks, 2 x stages layers in V placement, PyTorch ScheduleZBVZeroBubble's order.
std::unique_ptr<RankSource> gen_zbv(const GenOptions& o);
/// DualPipeV: the same placement, PyTorch ScheduleDualPipeV's order (overlapped F/B pairs as two passes).
std::unique_ptr<RankSource> gen_dualpipev(const GenOptions& o);
/// Interleaved zero bubble: `chunks` looped chunks per rank, PyTorch ScheduleInterleavedZeroBubble's order.
std::unique_ptr<RankSource> gen_interleaved_zb(const GenOptions& o);
/// ddp, zero1, zero2, fsdp.
Schedule gen_data_parallel(const std::string& kind, const GenOptions& o);
std::unique_ptr<RankSource> gen_pp_fsdp(const GenOptions& o);
/// zero3-owner: ZeRO-3 sharded between tensors (each layer owned whole by rank l mod dp; broadcast, reduce).
Schedule gen_zero3_owner(const GenOptions& o);
/// gen ep: expert parallelism over `dp` data-parallel ranks in EP groups of `ep` (schedules/generators/
/// expert_parallel.cpp). Throws std::invalid_argument for options out of range.
Schedule gen_expert_parallel(const GenOptions& o);
/// Tensor parallelism alone: `tp` ranks, one TP group, `layers` layers (0: 4), 1F1B over the microbatches.
std::unique_ptr<RankSource> gen_tp(const GenOptions& o);
/// 3D parallelism: tp x pp x dp ranks, rank = tp + T * (dp + D * pp) (Megatron-LM's order, torchtitan's mesh
/// ["pp", "dp", "tp"]).
std::unique_ptr<RankSource> gen_3d(const GenOptions& o);

}  // namespace trainsim::gen
