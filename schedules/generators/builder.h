// Shared pieces of the schedule generators (schedules/generators.h): option checks, op makers, a per-rank
// op list that keeps running weight-grad sums, and the pipeline builder that turns per-rank orders of
// compute passes into complete op lists (loads, sends and receives, loss, frees, accumulation, updates).
#pragma once

#include <string>
#include <vector>

#include "schedules/generators.h"
#include "schedules/schedule.h"

namespace trainsim::gen {

// ---- option checks -------------------------------------------------------------------------------------

/// Throws std::invalid_argument "KIND: --OPTION must be at least MIN (got VALUE)" when value < min.
void require_at_least(const std::string& kind, const char* option, int value, int min);

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

  int rank() const { return rank_; }
  std::vector<Op>& ops() { return ops_; }
  /// Room for `n` ops (an upper estimate: capacity never touched costs no resident memory), so that the
  /// list is not moved as it grows.
  void reserve(std::size_t n) { ops_.reserve(n); }

  void load(TensorList ts);
  void free(TensorList ts);
  void send(int to, Tensor t);
  void recv(int from, Tensor t);
  /// A compute op with explicit reads and writes (the defaults when left empty).
  void compute(OpKind kind, int layer, IdSet batches, TensorList reads = {}, TensorList writes = {});
  /// All-gather, reduce-scatter or all-reduce of `in` into `out` over `group`.
  void collective(OpKind kind, int layer, int group, Tensor in, Tensor out);
  /// Adds the resident weight grad `g` to the running sum of its layer (same shards): the first grad becomes
  /// the sum; later ones are accumulated into it and both parts freed.
  void add_grad(const Tensor& g);
  /// The running weight-grad sum of `layer` (throws std::logic_error when there is none); forgets it.
  Tensor take_grad(int layer);

 private:
  int rank_, layers_, microbatches_;
  std::vector<Op> ops_;
  std::vector<std::pair<int, Tensor>> sums_;  // (layer, running sum)
};

// ---- pipelines -----------------------------------------------------------------------------------------

/// A compute pass of a pipeline: forward, full backward, backward-input or backward-weight.
enum class Pass { F, B, I, W };

/// One pass of one layer ("stage chunk") for one microbatch.
struct Step {
  Pass pass = Pass::F;
  int layer = 0;
  int mb = 0;
};

/// What build_pipeline needs: who runs which pass in which order, and how weights are held.
struct PipelinePlan {
  int world_size = 1;
  int layers = 1;
  int microbatches = 1;                 ///< of the whole step (the header's)
  std::vector<std::vector<Step>> steps;  ///< per rank, in program order
  std::vector<int> stage_map;           ///< header stage_map
  std::vector<std::vector<int>> groups;  ///< header groups 1, 2, ...
  /// Weight sharding: 1 = each rank holds its layers' full weights. dp > 1 = rank r holds shard
  /// shard_index[r] of dp of its layers' weights and optimizer states; it all-gathers them in group
  /// group_of[r] before the first pass and reduce-scatters the grads there after the last.
  int dp = 1;
  std::vector<int> shard_index;
  std::vector<int> group_of;
};

/// A plan of p ranks holding 2p layers in V placement (layer l on rank l for l < p, then 2p-1-l): the
/// placement of ZBV and DualPipeV, without steps yet.
PipelinePlan v_shaped_plan(int p, int m);
/// A plan of p ranks holding p * v layers in loop placement (layer = chunk * p + rank, on that rank), without
/// steps yet: GPipe, 1F1B and the interleaved schedules.
PipelinePlan looped_plan(int p, int v, int m);

/// Builds the schedule of a plan. Each (layer, microbatch) must have one forward and either one full
/// backward or one backward-input and one backward-weight (on the rank of its backward-input). Activations
/// and their grads go from the rank of one layer to the rank of the next: sent right after the producing
/// pass, received right before the consuming one, or earlier (at a step boundary the receiver reaches after
/// the message is ready, so no wait is added) when the sender would otherwise find the pair's one slot
/// still full at its next send on that channel; receives keep the channel's order. Layer 0's rank loads
/// the inputs; the rank of the last layer computes the loss right after its forward; grads are summed as
/// they come; a layer is updated right after its last grad. Timing uses unit costs (the generators'
/// cost model). Throws std::logic_error for an inconsistent plan.
Schedule build_pipeline(const PipelinePlan& plan);

/// The 1F1B order of one stage running `layer` on microbatches first..first+m-1: min(warmup, m) forwards,
/// then one forward one backward, then the remaining backwards.
std::vector<Step> one_f_one_b(int layer, int first, int m, int warmup);

// ---- the families ----------------------------------------------------------------------------------------

Schedule gen_gpipe(const GenOptions& o);
Schedule gen_1f1b(const GenOptions& o);
Schedule gen_interleaved_1f1b(const GenOptions& o);
Schedule gen_looped_bfs(const GenOptions& o);
Schedule gen_zb_h1(const GenOptions& o);
/// ZBV: `stages` ranks, 2 x stages layers in V placement, PyTorch ScheduleZBVZeroBubble's order.
Schedule gen_zbv(const GenOptions& o);
/// DualPipeV: the same placement, PyTorch ScheduleDualPipeV's order (overlapped F/B pairs as two passes).
Schedule gen_dualpipev(const GenOptions& o);
/// Interleaved zero bubble: `chunks` looped chunks per rank, PyTorch ScheduleInterleavedZeroBubble's order.
Schedule gen_interleaved_zb(const GenOptions& o);
/// ddp, zero1, zero2, fsdp.
Schedule gen_data_parallel(const std::string& kind, const GenOptions& o);
Schedule gen_pp_fsdp(const GenOptions& o);
/// zero3-owner: ZeRO-3 sharded between tensors (each layer owned whole by rank l mod dp; broadcast, reduce).
Schedule gen_zero3_owner(const GenOptions& o);

}  // namespace trainsim::gen
