// The inside of one rank's executor (exec/rank_executor.h), shared by the files that define it: the op loop,
// the compute, the loss, the updates and the collectives in exec/rank_executor.cpp, the Mixture-of-Experts ops
// (the dispatch and combine all-to-alls, the expert slices' passes, expert TP's collectives) in
// exec/rank_executor_moe.cpp. Not a public header: nothing outside those two files includes it.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "exec/moe.h"
#include "exec/rank_executor.h"

namespace trainsim::exec {

namespace detail {
// A tensor the rank holds in this step: its buffer (filled by the work that produces it, before `ready`)
// and, for an activation a forward read, the activations that forward saved for the backward.
struct Slot;
using SlotPtr = std::shared_ptr<Slot>;
struct Slot {
  Tensor id;
  BufferPtr buffer;
  std::shared_ptr<LayerStash> stash;
  EventPtr ready;  // null: ready now
  // Sequence parallelism: for an activation an all-gather assembled from this rank's sequence shard, that
  // shard's slot. The schedule frees the gathered tensor after each pass and gathers it again for the next
  // (Korthikanti et al. 2022), so the saved activations stay with the shard the rank keeps.
  SlotPtr source;
  // Mixture of Experts: an expert slice's tokens (ExpertIn, ExpertOut), the rows each member of the EP group sent.
  std::shared_ptr<struct ExpertRows> rows;
};

// The tokens an expert slice got from its EP group in one dispatch (filled when the dispatch runs): counts[i][e]
// rows from member i for local expert e. The slice's buffers hold them by expert, then member (exec/moe.h).
struct ExpertRows {
  std::vector<std::vector<long>> counts;
  std::vector<long> per_expert() const {
    std::vector<long> out(counts.empty() ? 0 : counts.front().size(), 0);
    for (const auto& c : counts)
      for (std::size_t e = 0; e < c.size(); ++e) out[e] += c[e];
    return out;
  }
  long total() const {
    long n = 0;
    for (long c : per_expert()) n += c;
    return n;
  }
};

// An expert-parallel MoE layer's forward on this rank, for its all-to-alls (filled when the forward runs): the
// saved activations with the routing, and the layer's weight (the combine's LM head reads it).
struct MoeSource {
  std::shared_ptr<LayerStash> stash;
  SlotPtr weight;
};

// The slot that keeps the saved activations of a forward that reads `a`.
inline Slot& stash_holder(const SlotPtr& a) { return a->source ? *a->source : *a; }

// The loss sums of one loss op, for the end of the step.
struct LossRecord {
  std::vector<int> batches;  // the op's microbatches in row order
  IdSet reported;
  BufferPtr sums;            // one double per microbatch of the op
};

}  // namespace detail

struct RankExecutor::Impl {
  using Slot = detail::Slot;
  using SlotPtr = detail::SlotPtr;
  using ExpertRows = detail::ExpertRows;
  using MoeSource = detail::MoeSource;
  using LossRecord = detail::LossRecord;

  const ReplayContext& ctx;
  const int rank;
  Device& dev;
  Communicator& comm;
  const ModelConfig& model;
  const RankPlan& plan;
  BufferPtr rope_cos, rope_sin;

  // Per step:
  int step = 0;
  std::map<Tensor, std::deque<SlotPtr>> held;
  std::map<std::pair<int, IdSet>, EventPtr> last_forward, last_backward_input;
  // Mixture of Experts: by (layer, batches), this rank's expert-parallel MoE forwards; by the expert slice's token
  // tensor of the forward dispatch (layer, batches), the rows its group sent, for the backward's all-to-alls.
  std::map<std::pair<int, IdSet>, std::shared_ptr<MoeSource>> moe_sources;
  std::map<std::pair<int, IdSet>, std::shared_ptr<ExpertRows>> expert_rows;
  // Expert TP: the rows a forward's all-gather over the TP group gave an expert slice (expert_collective), which the
  // backward's all-gather of their grads gives again.
  std::map<std::pair<int, IdSet>, std::shared_ptr<ExpertRows>> gathered_rows;
  // With ctx.record_routing: (MoE block, microbatch) -> its routing's digest (under TP: of the rank's sequence
  // shard of the microbatch), written by the forwards' streams.
  std::mutex routes_mu;
  std::map<std::pair<int, int>, RoutingDigest> routes;
  std::vector<std::shared_ptr<LossRecord>> losses;
  // With the MoE load-balancing loss: each backward op's sum of it (one double, set by the op's work), in program
  // order.
  std::vector<std::shared_ptr<BufferPtr>> aux_sums;
  SlotPtr norm;
  // The last collective submitted over each communicator group. A communicator numbers a group's calls as the
  // stream workers run them; the plan gives a schedule group used on several streams a communicator group per
  // stream (RankPlan::comm_group), but the gradient-norm all-reduce, which no schedule op holds, runs over
  // norm_group from the first update's stream, while the data-parallel all-reduces of the same ranks run on a
  // communication stream (gen ddp: group 0 on stream 1, the norm on stream 0): two streams, one communicator
  // group, and ranks that number the calls differently pair the wrong ones (CUDA-REVIEW.md #5). So each collective
  // waits for the one before it over the same communicator group: they run, and are numbered, in program order,
  // one at a time, as NCCL runs the operations of one communicator (NVIDIA/nccl#574).
  std::map<int, EventPtr> last_call;
  const RankState* state = nullptr;
  std::vector<SlotPtr> norm_parts_out;  // one double each: this rank's parts of the squared gradient norm
  // The state carried from the step before, moved out of the caller's RankState at the step's start: its buffers
  // are the loads' until every op is issued, then only the ops' (so the schedule's frees release them).
  bool carried_initialized = false;
  std::map<Tensor, BufferPtr> carried;

  Impl(const ReplayContext& c, int r, Device& d, Communicator& cm);

  ModelContext<float> model_ctx(StreamContext& s, const TpComm<float>* tp = nullptr);
  // The TP group's reductions inside a compute op of TP degree `tp_size` running on `s` (exec/model.h): over
  // the plan's copy of the rank's TP group for the op's stream.
  TpComm<float> tp_comm(StreamContext& s, int tp_size);
  BufferPtr alloc(const Tensor& t) { return dev.memory().allocate(ctx.shapes->bytes(t)); }
  // The layout of a W, O or dW tensor (its TP slice's).
  const LayerLayout& layout(const Tensor& t) const { return ctx.shapes->layout(t); }

  SlotPtr find(const Op& op, const Tensor& t);
  SlotPtr make(const Tensor& t);
  void drop(const Op& op, const Tensor& t);

  // Submits `work` for op `index` on its stream after `after`; errors name the op.
  EventPtr submit(const Op& op, int index, std::vector<EventPtr> after, std::function<void(StreamContext&)> work);

  static void add_dep(std::vector<EventPtr>& deps, const EventPtr& e);

  // submit() for a collective over `group`: after the rank's previous collective over it (last_call).
  EventPtr submit_call(const Op& op, int index, int group, std::vector<EventPtr> after,
                       std::function<void(StreamContext&)> work);

  // ---- load ----
  void load(const Op& op, int index);

  void init_weight(const Tensor& t, float* out) const;

  // Tokens (and targets) of microbatches `batches` of this step, in increasing microbatch order.
  void batch_tokens(const IdSet& batches, std::vector<int>* tokens, std::vector<int>* targets) const;

  // ---- compute ----
  void forward(const Op& op, int index);

  void backward(const Op& op, int index);

  // ---- Mixture of Experts (exec/moe.h) ----
  // The routing of a forward over microbatches `batches` (in order), per microbatch; of their sequence shard
  // `shard` of `shards` under TP.
  void record(int block, const std::vector<int>& batches, const MoeRouting& r, int shard, int shards);

  // An expert slice's forward: its experts on the rows the dispatch gathered, by expert (under expert TP, the
  // rank's TP slice of each on the rows of the TP group's shards: partial outputs, expert_collective).
  void expert_forward(const Op& op, int index);

  // An expert slice's backward: from its tokens (saved) and their output grads to its weight grads and the tokens'
  // input grads.
  void expert_backward(const Op& op, int index);

  // The offset of the experts in an expert slice's layout (its layer's MoE block, the last).
  static long expert_offset(const LayerLayout& lay) { return lay.block(lay.spec().num_blocks - 1).experts; }

  // The dispatch and combine all-to-alls over the EP group, forward and backward (exec/moe.h, the packed order):
  //   dispatch  A<routed> -> A<ej/e>        (forward: the packed tokens; backward: dA -> dA<ej/e>, the experts'
  //   combine   A<ej/e:out> -> A            output grads, after the combine's and the LM head's backward)
  //   backward combine  dA<ej/e:out> -> dA<routed>
  // Member i of the group holds expert slice i (make_plan checks it). Each sends its rows for every member, by
  // member; an expert slice's rows are then put in its order, by expert then member, and back for the return.
  void all_to_all(const Op& op, int index);

  // Host numbers (token counts) in backend memory for a collective: the communicator moves backend memory (device
  // memory on CUDA, which NCCL reads; the host's on the CPU), so counts go there first and come back with
  // Kernels::to_host, which waits for the stream.
  BufferPtr staged(StreamContext& s, const std::vector<float>& host);

  // The TP group of an MoE layer's combine and its backward dispatch on `s` (exec/model.h): a TP slice whose layer
  // has the LM head all-gathers the final norm's sequence shards and sums the head's input grad there, over the
  // plan's TP communicator for the stream (make_plan counts these all-to-alls as the TP group's collective ops);
  // one without the head makes no TP call.
  TpComm<float> layer_tp(StreamContext& s, const Tensor& weight);

  // Floats of this rank's packed tokens for each of the `k` expert slices of `per` experts (the dispatch sends
  // them, the combine returns them), and floats of each member's tokens an expert slice got (`rows`).
  std::vector<std::size_t> to_slices(const MoeRouting& routing, int k, int per) const;
  std::vector<std::size_t> from_members(const ExpertRows& rows) const;

  std::shared_ptr<MoeSource> source_of(const Op& op, int layer, const IdSet& batches);

  // An expert slice's rows between the all-to-all's order (by member, then expert) and the slice's (by expert,
  // then member): `to_expert` for a dispatch, the other way for a combine.
  void reorder(StreamContext& s, const ExpertRows& rows, const float* src, float* dst, bool to_expert) const;

  // Which vocabulary slice of the logits a loss reads: (t, j) for slice j of t, (1, 0) for all of them. A TP
  // slice's LM head writes its vocabulary slice A_L<j/t>; an MoE last layer's TP slice writes A_L[j/t], which the
  // schedule names sequence shard j of the final activation (the sequence-parallel layer's output) and the executor
  // holds as the logits' vocabulary slice j of every token, the same elements (exec/model.h, moe_layer_combine).
  static std::pair<int, int> logits_slice(const Tensor& a);

  void loss(const Op& op, int index);

  // Where flat elements [b, e) of the layer of `dwt` (the grad an update op `u` reads) lie in its buffer: runs
  // contiguous within one shard.
  std::vector<std::pair<long, long>> grad_runs(const Op& u, const Tensor& dwt, long b, long e) const;

  void gradient_norm(const Op& first, int index);

  // Zeroes the floats of `buffer` outside the element ranges `written` [begin, end) (any order, disjoint).
  static void zero_unwritten(StreamContext& s, Buffer& buffer, std::vector<std::pair<long, long>>& written);

  void update(const Op& op, int index);

  void accumulate(const Op& op, int index);

  // ---- communication ----
  void send(const Op& op, int index);

  void recv(const Op& op, int index);

  void collective(const Op& op, int index);

  // Sequence parallelism's collectives over the TP group (exec/sequence_shard.h): an all-gather of sequence shards
  // of an activation or activation grad into the tensor they make up, a reduce-scatter of a whole one (a partial
  // sum) into this rank's sequence shard. The communicator moves member-major pieces; stream-ordered copies put
  // each sequence's rows in place (none when every microbatch is one sequence and the pieces come in order).
  void sequence_collective(const Op& op, int index, const SlotPtr& in, const SlotPtr& out, std::vector<EventPtr> deps);

  // Expert tensor parallelism (Megatron-Core's expert TP equal to TP; docs/executor.md "Expert tensor
  // parallelism"): each TP rank holds a TP slice of every expert of its expert slice, so the tokens the dispatch
  // gave the TP group's members (each member routed its own sequence shard) are all-gathered over the group before
  // the experts run, and the experts' partial outputs (row-parallel down projections) reduce-scattered back to
  // the member that got each token. The members' token counts differ, so they go first, and the tokens are
  // padded to the longest member's, as NCCL's equal-count calls take them. The gathered rows are in the slice's
  // order by expert, then by (shard q, member i) of the EP group: source q·k + i of the gathered ExpertRows.
  void expert_collective(const Op& op, int index, const SlotPtr& in, const SlotPtr& out, std::vector<EventPtr> deps);

  // Broadcast and reduce (NCCL's semantics, docs/schedule-format.md): a broadcast's root sends its tensor in
  // place and the others receive it into a new one; a reduce's members send theirs and the root alone gets the
  // sum into a new one.
  void rooted(const Op& op, int index);

  // Issues op `i` of the step (and the gradient norm before the first update).
  void issue(const Op& op, int i);


  // ---- the step ----
  StepOutput run(int step_index, RankState& st);

  // The plan's state tensors, from what the rank holds at the end of the step (updated copies, step 1).
  RankState next_state();
};

}  // namespace trainsim::exec
