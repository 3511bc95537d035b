#include "schedules/stream_sim.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <unordered_map>

// Boost.Unordered's open-addressing map: interning a tensor is one probe in a flat array, no node per entry.
#include <boost/unordered/unordered_flat_map.hpp>
#include <fmt/format.h>

#include "sim/algebra.h"
#include "sim/all_to_all.h"
#include "schedules/cost_models.h"
#include "schedules/rank_source.h"
#include "schedules/update_check.h"
#include "sim/cost_model.h"
#include "sim/errors.h"
#include "sim/ledger.h"
#include "sim/wait_graph.h"

namespace trainsim {

namespace {


// Hash of a tensor's identity, for interning tensors to small ids per rank: the fields and each set's runs
// (a set of one run, almost every set, without a loop), mixed in with a multiply-xorshift step; one pass, no
// allocation. Mixed well enough to be used as is (is_avalanching).
struct TensorHash {
  using is_avalanching = void;
  static constexpr std::uint64_t kMul = 0x9E3779B97F4A7C15ull;
  static std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
    h = (h ^ v) * kMul;
    return h ^ (h >> 32);
  }
  static std::uint64_t pack(int lo, int hi) {
    return static_cast<std::uint32_t>(lo) | (static_cast<std::uint64_t>(static_cast<std::uint32_t>(hi)) << 32);
  }
  static std::uint64_t add_set(std::uint64_t h, const IdSet& s) {
    const auto runs = s.runs();
    if (runs.size() <= 1) return mix(h, runs.empty() ? 0 : pack(runs.front().first, runs.front().second));
    h = mix(h, runs.size() << 56);
    for (const auto& [lo, hi] : runs) h = mix(h, pack(lo, hi));
    return h;
  }
  std::size_t operator()(const Tensor& t) const noexcept {
    std::uint64_t h = mix(pack(t.layer, t.step), pack(t.num_shards, static_cast<int>(t.kind)));
    if (t.tp_size != 1) h = mix(h, t.tp_slices ^ (static_cast<std::uint64_t>(t.tp_size) << 48));  // TP slices
    return add_set(add_set(h, t.batches), t.shards);
  }
  std::size_t operator()(const Tensor* t) const noexcept { return (*this)(*t); }
};

// Tensors compared by value through pointers into the schedule's ops.
struct SameTensor {
  bool operator()(const Tensor* a, const Tensor* b) const noexcept { return *a == *b; }
};

// One rank's tensors, interned to ids: id -> tensor and its memory; and what each op allocates or releases.
// While the rank is issued, its tensors are held as pointers to their first mention in its ops (no tensor is
// copied); once it is issued only their memory is kept, and a message that names them numbers them again
// (tensor_table).
struct RankTensors {
  std::vector<const Tensor*> tensor;  // while the rank is issued
  std::vector<double> bytes;
  std::vector<TensorKind> kind;       // per tensor id (the peak's breakdown by kind)
  std::vector<int> memory_ids;    // per op: the ids it allocates (writes) or releases (a free's reads)
  std::vector<int> memory_begin;  // op i's ids are memory_ids[memory_begin[i], memory_begin[i + 1])
  // (op index, bytes) of the timed ops with a workspace (CostModel::workspace), in program order: few ops
  // have one, so they are listed rather than kept for every op.
  std::vector<std::pair<int, double>> workspace;

  // The workspace of op i (0: none).
  double workspace_of(int i) const {
    auto it = std::lower_bound(workspace.begin(), workspace.end(), std::pair<int, double>{i, -HUGE_VAL});
    return it != workspace.end() && it->first == i ? it->second : 0.0;
  }
};

// What only issuing a rank needs: the interning table, and per tensor id how many instances are resident,
// the last op that wrote it and the ops that used it since. One of these serves every rank in turn (reset
// between ranks, keeping its memory): a rank's ops are issued together.
struct Issuing {
  // How many instances of a tensor are resident, the last op that wrote it (-1: none) and the newest entry
  // of the list of ops that used it since (-1: none).
  struct Live {
    int count = 0, writer = -1, users = -1;
  };
  boost::unordered_flat_map<const Tensor*, int, TensorHash, SameTensor> ids;
  std::vector<Live> live;
  // The ops that used each tensor since it was last written, as linked lists in one pool: an entry is (op,
  // next entry). Cleared lists leave their entries unused.
  std::vector<std::pair<int, int>> user_pool;
  // (tensor, id) of the last few writes, a ring: most reads are of a tensor one of the last few ops wrote
  // (the activation a recv brought, the output a send or a free takes), so those are compared first, by
  // value, before the table is probed.
  static constexpr int kRecent = 4;
  std::array<std::pair<const Tensor*, int>, kRecent> recent{};
  int recent_next = 0;

  // Ready for a rank of `ops` ops. A table far larger than the rank needs is dropped rather than cleared
  // (clearing costs its capacity: a huge rank followed by thousands of small ones would cost their number
  // times its size).
  void reset(std::size_t ops) {
    if (ids.bucket_count() > 8 * ops + 1024) ids = {};
    else ids.clear();
    live.clear(), user_pool.clear();
    recent = {}, recent_next = 0;
  }
  int intern(const Tensor& t, RankTensors& ts, const CostModel& cost, int rank) {
    auto [it, fresh] = ids.try_emplace(&t, static_cast<int>(ts.tensor.size()));
    if (fresh) {
      ts.tensor.push_back(&t);
      ts.bytes.push_back(cost.memory(t, rank));
      ts.kind.push_back(t.kind);
      live.emplace_back();
    }
    return it->second;
  }
  int intern_read(const Tensor& t, RankTensors& ts, const CostModel& cost, int rank) {
    for (const auto& [written, id] : recent)
      if (written && *written == t) return id;
    return intern(t, ts, cost, rank);
  }
  int intern_write(const Tensor& t, RankTensors& ts, const CostModel& cost, int rank) {
    const int id = intern(t, ts, cost, rank);
    recent[recent_next] = {&t, id};
    recent_next = (recent_next + 1) % kRecent;
    return id;
  }
  // The resident tensors of the rank being issued, as the ledger prints them ("W0, O0, A0{0}").
  std::string summary(const RankTensors& ts, const CostModel& cost, int rank) const {
    MemoryLedger ledger(cost, rank);
    for (std::size_t id = 0; id < ts.tensor.size(); ++id)
      for (int k = 0; k < live[id].count; ++k) ledger.add(*ts.tensor[id]);
    return ledger.summary();
  }
};

// One op of the schedule as a node of the dependency graph. Node ids number every rank's ops in order; the op
// itself is not kept (a source that makes each rank's ops when asked holds one rank at a time: op_of).
// `end` doubles as the node's state while it is timed: kNew, kActive (its dependencies are being timed),
// kBlocked (it never runs: it waits, directly or not, for a cycle, a missing message or a call a member
// never makes), or its end time (>= 0) once done. Until a node is done, `start` holds its ready time: the
// latest end among the dependencies that ended.
struct Node {
  static constexpr Time kNew = -1, kActive = -2, kBlocked = -3;
  Time start = 0, end = kNew;
  int call = -1;              // collectives: the call it belongs to
  int member = -1;            // collectives: the rank's position in the call's group
  bool done() const { return end >= 0; }
};

// One collective call: the k-th call of a group, one op per member.
struct Call {
  int group = 0;
  std::uint64_t seq = 0;
  OpKind kind = OpKind::Barrier;  // the members' op, and its layer
  int layer = -1;
  int root = -1;              // broadcast, reduce: the root rank
  std::vector<int> nodes;     // by member index; -1 where the member never calls it
  Tensor result;              // once combined: the inputs folded (result_of gives each member's output)
  bool combined = false;      // every member calls it and the outputs are as the members expect
  Time state = Node::kNew;    // as Node::end: kNew, kActive, kBlocked, or >= 0 once its members ran
};

// A send or recv waiting for its other side (match_at_issue): its node and tensor.
struct Pending {
  int node;
  Tensor tensor;
};
// The first op of a rank whose memory sample is over the limit or capacity (SimOptions): when it starts, the
// rank, its place in the rank's start order and in its program, and the memory resident.
struct Over {
  Time time;
  int rank;
  std::size_t k;
  int index;
  double total;
};

// The sends and receives of one (source, destination) pair.
struct Channel {
  std::vector<int> sends, recvs;
  std::map<std::size_t, int> any;  // send position -> the recv from any source that takes it
  std::deque<Pending> waiting;     // match_at_issue: the sends (waiting_sends) or recvs not matched yet
  bool waiting_sends = true;
  bool claimed(std::size_t k) const { return any.count(k) > 0; }
};

// Raised inside the engine, when it simulates a source that makes each rank's ops when asked, for a schedule it
// cannot simulate one rank at a time or a problem whose words need other ranks' ops: a receive from any source, a
// group not listed in rank order, any problem but memory over the limit. simulate_streams then simulates every
// rank's ops held at once, which finds the same problem in the same words.
struct NeedsHeldSchedule {};

class StreamSim {
 public:
  // `prepare`: the model learns each rank from its ops here even though the source holds them all (a model given
  // by the caller for a streaming source, which the held retry of simulate_streams simulates again).
  StreamSim(const RankSource& src, const SimOptions& o, bool prepare = false)
      : src_(src), h_(src.header()), o_(o), streaming_(!src.holds_all()), prepare_(streaming_ || (prepare && o.cost)),
        owned_cost_(o.cost ? nullptr : make_schedule_cost_model(src)), cost_(o.cost ? o.cost : owned_cost_.get()),
        updates_(h_.layers) {
    for (const auto& [limit, name] : {std::pair{o.memory_limit, "memory limit"}, {o.memory_capacity, "memory capacity"}})
      if (limit && !(std::isfinite(*limit) && *limit >= 0))
        throw std::invalid_argument(fmt::format("the {} must be a finite number of at least 0, got {}", name, *limit));
    const int world = h_.world_size;
    if (!o.mirror.empty()) {
      if (static_cast<int>(o.mirror.size()) != world)
        throw std::invalid_argument(fmt::format("the symmetric simulation's map has {} ranks, the schedule {}",
                                                o.mirror.size(), world));
      for (int r = 0; r < world; ++r)
        if (const int q = o.mirror[r]; q < 0 || q > r || o.mirror[q] != q)
          throw std::invalid_argument(fmt::format(
              "the symmetric simulation's map gives rank {} the representative {}, which is not a simulated rank "
              "at or below it", r, q));
      for (int r = 0; r < world; ++r) simulated_ += o.mirror[r] == r;
    } else {
      simulated_ = world;
    }
    offset_.reserve(world + 1);
    offset_.push_back(0);
    // Every node's arrays, reserved to the source's estimate (pages reserved and never written cost no memory)
    // and filled as the ranks are issued.
    const std::size_t estimate =
        world > 0 ? static_cast<std::size_t>(static_cast<double>(src.op_estimate()) * simulated_ / world) : 0;
    nodes_.reserve(estimate), matched_send_.reserve(estimate), kind_.reserve(estimate);
    duration_.reserve(estimate), paired_.reserve(estimate), stream_.reserve(estimate);
    groups_.push_back({});
    for (int r = 0; r < world; ++r) groups_[0].push_back(r);
    for (const auto& g : h_.groups) groups_.push_back(g);
    trace_.world_size = world;
    trace_.layers = h_.layers;
    trace_.batches = h_.microbatches;
    trace_.cost_model = cost_->name();
    trace_.memory_unit = cost_->memory_unit();
    trace_.ranks.resize(world);
    tensors_.resize(world);
  }

  void run() {
    check_groups();
    if (o_.observer) o_.observer->begin(h_.world_size, *cost_);
    // About three dependencies per op (stream order, a writer or two, the users a free waits for): reserved
    // so that the list is not copied as it grows.
    deps_.reserve(4 * nodes_.capacity());
    dep_begin_.reserve(nodes_.capacity() + 1);
    dep_begin_.push_back(0);
    for (int r = 0; r < h_.world_size; ++r) {
      if (simulated(r)) {  // (symmetric simulation: the others get their representative's figures, fill_trace)
        const std::vector<Op>& ops = src_.ops(r);
        // The model learns each rank before pricing it (make_schedule_cost_model did so for held ranks).
        if (prepare_) cost_->prepare_rank(r, ops);
        issue(r, ops);
      }
      offset_.push_back(static_cast<int>(nodes_.size()));
      if (o_.progress && ((r + 1) % std::max(1, h_.world_size / 64) == 0 || r + 1 == h_.world_size))
        o_.progress(r + 1, h_.world_size);
    }
    match_p2p();
    form_calls();
    time();
    timed_ = true;
    if (int blocked = count_unfinished(); blocked > 0) {
      if (streaming_) throw NeedsHeldSchedule{};
      const std::vector<int> first = first_unfinished();
      blocked_ = blocked_ranks(first);
      throw DeadlockError(deadlock_report(first));
    }
    if (!unmatched_sends_.empty()) {
      if (streaming_) throw NeedsHeldSchedule{};
      const Op& op = op_of(unmatched_sends_.front());
      throw SimError(fmt::format("rank {}: send of {} to rank {}{} was never received", op.rank, op.reads.front().str(),
                                 op.peer, op.where_suffix()));
    }
  }

  // The trace of what ran (in program order per rank), with memory samples; throws MemoryLimitError.
  void fill_trace() {
    if (filled_) return;
    filled_ = true;
    for (int r = 0; r < h_.world_size; ++r)
      if (simulated(r)) sample_memory(r);
      else copy_rank(r, o_.mirror[r]);
    const double span = static_cast<double>(summary_.makespan) * h_.world_size;
    summary_.bubble_fraction = span > 0 ? 1.0 - busy_ / span : 0.0;
  }

  /// True once the ops were timed (after a deadlock too: the trace then holds what ran before it).
  bool timed() const { return timed_; }
  /// After a deadlock: every rank left waiting (SimResult::blocked).
  std::vector<World::BlockedRank>& blocked() { return blocked_; }

  Trace& trace() { return trace_; }
  /// The updates issued, counted (UpdateCheck::finish throws their first problem).
  const UpdateCheck& updates() const { return updates_; }
  const RunSummary& summary() const { return summary_; }
  /// The ops issued, over every rank (with a symmetric simulation, each rank not simulated counting its
  /// representative's).
  std::size_t op_count() const {
    std::size_t n = nodes_.size();
    if (!o_.mirror.empty())
      for (int r = 0; r < h_.world_size; ++r)
        if (!simulated(r)) n += ops_of_rank(o_.mirror[r]);
    return n;
  }
  /// Throws the updates' first problem (UpdateCheck::finish); a symmetric simulation sees the updates of the
  /// simulated ranks only, which do not cover every shard, and checks nothing.
  void check_updates() const {
    if (o_.mirror.empty()) updates_.finish();
  }

 private:
  // True for a rank whose ops are simulated (every rank, but with SimOptions::mirror).
  bool simulated(int rank) const { return o_.mirror.empty() || o_.mirror[rank] == rank; }

  // The rank of node `id` (a rank without ops has no node: its offset equals the next rank's).
  int rank_of(int id) const {
    return static_cast<int>(std::upper_bound(offset_.begin(), offset_.end(), id) - offset_.begin()) - 1;
  }
  // The op of node `id`, from the source: with a source that makes ranks when asked, the reference is valid
  // until the next op_of or ops() of another rank (error messages, which use one op at a time, and records).
  const Op& op_of(int id) const {
    const int r = rank_of(id);
    return src_.ops(r)[id - offset_[r]];
  }
  int id_of(int rank, int index) const { return offset_[rank] + index; }
  // Number of ops of rank `rank` (issued).
  int ops_of_rank(int rank) const { return offset_[rank + 1] - offset_[rank]; }

  // Node `node` (the op being issued, the newest node) waits for node `on` of the same rank. Each node's
  // dependencies on its own rank are a range of deps_ (dep_begin_), appended as the ops are issued in id
  // order; a recv's message is its matched send (matched_send_), a collective's the other members (its call).
  void depend(int node, int on) {
    if (on < 0 || on == node) return;
    deps_.push_back(on);
  }

  // The source rank of a matched recv, or -1.
  int matched_src(int id) const { return matched_send_[id] >= 0 ? rank_of(matched_send_[id]) : -1; }

  void check_groups() {
    const int world = h_.world_size;
    std::vector<std::size_t> seen(world, 0);  // the last group (g) that listed each rank
    for (std::size_t g = 1; g < groups_.size(); ++g) {
      if (groups_[g].empty()) throw SimError(fmt::format("group {} has no member", g));
      for (int r : groups_[g]) {
        if (r < 0 || r >= world)
          throw SimError(fmt::format("group {}: member {} is not a rank (world size {})", g, r, world));
        if (seen[r] == g) throw SimError(fmt::format("group {}: rank {} is listed twice", g, r));
        seen[r] = g;
      }
    }
    std::size_t slots = 0;
    for (const auto& g : groups_) slots += g.size();
    member_.reserve(slots);
    for (std::size_t g = 0; g < groups_.size(); ++g)
      for (std::size_t m = 0; m < groups_[g].size(); ++m)
        member_.try_emplace(slot_key(static_cast<int>(g), groups_[g][m])).first->second.member = static_cast<int>(m);
    forming_.resize(groups_.size());
    for (std::size_t g = 0; g < groups_.size(); ++g)
      forming_[g].at_issue = std::is_sorted(groups_[g].begin(), groups_[g].end());
  }

  // Program order on one rank: the algebra and residency of every op (as the ledger says at issue), and
  // the dependencies on the same rank (stream order, writers of what it reads, users of what it frees).
  void issue(int rank, const std::vector<Op>& ops) {
    const ScheduleHeader& h = h_;
    RankTensors& ts = tensors_[rank];
    Issuing& is = issuing_;
    is.reset(ops.size());
    // The rank's nodes.
    const std::size_t nodes = nodes_.size() + ops.size();
    if (nodes > static_cast<std::size_t>(INT32_MAX))
      throw SimError(fmt::format("the schedule has more than 2^31 ops (rank {} passes it)", rank));
    nodes_.resize(nodes), matched_send_.resize(nodes, -1), kind_.resize(nodes), duration_.resize(nodes);
    paired_.resize(nodes, 0), stream_.resize(nodes);
    // The last op issued on each stream: streams below 64 (all real schedules) in an array, others in a map.
    std::array<int, 64> stream_tail;
    stream_tail.fill(-1);
    std::map<int, int> far_stream_tail;
    ts.memory_begin.assign(1, 0);
    ts.memory_begin.reserve(ops.size() + 1);
    ts.workspace.clear();
    // Most ops write one new tensor and frees drop them again: about one tensor per two ops, sized up front
    // so that the table is not rehashed as it grows.
    const std::size_t expect = ops.size() / 2 + 16;
    is.ids.reserve(expect), is.live.reserve(expect), is.user_pool.reserve(2 * ops.size());
    ts.tensor.reserve(expect), ts.bytes.reserve(expect), ts.kind.reserve(expect), ts.memory_ids.reserve(ops.size());
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Op& op = ops[i];
      const int id = id_of(rank, i);
      if (std::string p = algebra_problem(op, h.layers, h.microbatches); !p.empty()) throw op_error(op, p);
      read_ids_.clear();
      for (const Tensor& t : op.reads) {
        const int tid = is.intern_read(t, ts, *cost_, rank);
        if (is.live[tid].count == 0)
          throw op_error(op, fmt::format("it reads {} ({}), which is not resident; resident: {}", t.str(),
                                         long_name(t.kind), is.summary(ts, *cost_, rank)));
        read_ids_.push_back(tid);
      }
      if (op.kind == OpKind::Send && op.reads.size() != 1) throw op_error(op, "a send carries exactly one tensor");
      if (op.kind == OpKind::Recv && op.writes.size() != 1) throw op_error(op, "a recv receives exactly one tensor");
      if (op.kind == OpKind::Send) {
        if (op.peer < 0 || op.peer >= h.world_size)
          throw op_error(op, fmt::format("rank {} does not exist (world size {})", op.peer, h.world_size));
        if (op.peer == rank) throw op_error(op, "it sends to its own rank");
      }
      if ((op.kind == OpKind::Send || op.kind == OpKind::Recv) && op.peer >= 0 && !simulated(op.peer))
        throw op_error(op, fmt::format("the symmetric simulation does not simulate rank {} (it runs as rank {}): a "
                                       "schedule whose ranks exchange messages with them needs every rank simulated",
                                       op.peer, o_.mirror[op.peer]));
      if (op.kind == OpKind::Recv && op.peer >= h.world_size)
        throw op_error(op, fmt::format("rank {} does not exist (world size {})", op.peer, h.world_size));
      Membership* membership = nullptr;  // collectives: this rank's place in the op's group
      if (is_collective(op.kind)) {
        if (op.group < 0 || op.group >= static_cast<int>(groups_.size()))
          throw op_error(op, fmt::format("group {} does not exist", op.group));
        auto m = member_.find(slot_key(op.group, rank));
        if (m == member_.end())
          throw op_error(op, fmt::format("rank {} is not a member of group {} (ranks {})", rank, op.group,
                                         rank_list(groups_[op.group])));
        membership = &m->second;
        if (is_rooted(op.kind) && !member_.count(slot_key(op.group, op.peer)))
          throw op_error(op, fmt::format("the root, rank {}, is not a member of group {} (ranks {})", op.peer, op.group,
                                         rank_list(groups_[op.group])));
      }
      int& tail = op.stream >= 0 && op.stream < 64 ? stream_tail[op.stream] : far_stream_tail.try_emplace(op.stream, -1).first->second;
      depend(id, tail);
      // A send or a collective on a communication stream also waits for the compute stream as it stood when it
      // was issued: ProcessGroupNCCL makes its NCCL stream wait for the current (compute) stream before every
      // isend and collective (syncStream), so the message leaves once every compute issued before it has ended,
      // not only the op that wrote it (PyTorch's runtime posts an overlapped F/B pair's sends after both
      // passes), and DDP's bucket all-reduce, FSDP's reduce-scatter (its stream waits for the compute stream)
      // and FSDP's all-gather (its stream waits for the copy-out of an earlier layer) start no earlier than the
      // compute issued before them. Where an op is issued is thus what bounds how far it runs ahead: the
      // generators issue each prefetched all-gather after the compute that frees its slot.
      if ((op.kind == OpKind::Send || is_collective(op.kind)) && op.stream != 0) depend(id, stream_tail[0]);
      // A collective also waits for the rank's previous collective over the same group, whatever its stream: a
      // group is one NCCL communicator, and NCCL runs the operations of one communicator one at a time, in launch
      // order, even from different streams (it adds events between them: NVIDIA/nccl#574). FSDP2's all-gathers on
      // their stream and its reduce-scatters on theirs thus take turns on the data-parallel communicator.
      if (membership && !membership->calls.empty()) depend(id, membership->calls.back());
      // A free waits for the tensor's users (below) and what its stream ran before it, but holds nothing up:
      // the memory goes back when the last user ends, as CUDA's caching allocator frees a block another
      // stream still uses (record_stream), without making the compute after it wait for a send in flight.
      if (op.kind != OpKind::Free) tail = id;
      // What timing and sampling read of the op, kept by node so that they need not visit the op again: its
      // kind and its duration (a collective's for its group's size; the cost models are pure functions).
      kind_[id] = op.kind;
      stream_[id] = op.stream;
      if (o_.observer) o_.observer->issued(rank, op);
      if (is_timed(op.kind)) {
        duration_[id] = cost_->duration(op, membership ? static_cast<int>(groups_[op.group].size()) : 1);
        if (const double w = cost_->workspace(op); w != 0) ts.workspace.emplace_back(i, w);
      }
      if (op.kind == OpKind::Update || op.kind == OpKind::Load) updates_.add(op);
      for (int tid : read_ids_) {
        Issuing::Live& t = is.live[tid];
        depend(id, t.writer);
        if (op.kind == OpKind::Free) {
          for (int u = t.users; u >= 0; u = is.user_pool[u].second) depend(id, is.user_pool[u].first);
        } else {
          is.user_pool.emplace_back(id, t.users);
          t.users = static_cast<int>(is.user_pool.size()) - 1;
        }
      }
      if (op.kind == OpKind::Free) {
        for (int tid : read_ids_) {
          Issuing::Live& t = is.live[tid];
          --t.count;
          ts.memory_ids.push_back(tid);
          if (t.count == 0) t.writer = -1, t.users = -1;
        }
      } else {
        for (const Tensor& w : op.writes) {
          const int tid = is.intern_write(w, ts, *cost_, rank);
          Issuing::Live& t = is.live[tid];
          ++t.count;
          t.writer = id;
          t.users = -1;
          ts.memory_ids.push_back(tid);
        }
      }
      ts.memory_begin.push_back(static_cast<int>(ts.memory_ids.size()));
      if (deps_.size() > UINT32_MAX) throw op_error(op, "the schedule has more than 2^32 dependencies between its ops");
      dep_begin_.push_back(static_cast<std::uint32_t>(deps_.size()));
      if (op.kind == OpKind::Send) {
        Channel& ch = channels_[{rank, op.peer}];
        ch.sends.push_back(id);
        match_at_issue(ch, id, op.reads.front(), true);
      }
      if (op.kind == OpKind::Recv) {
        if (op.peer >= 0) {
          Channel& ch = channels_[{op.peer, rank}];
          ch.recvs.push_back(id);
          match_at_issue(ch, id, op.writes.front(), false);
        } else {
          if (streaming_) throw NeedsHeldSchedule{};  // (matched once every rank's sends are known: match_p2p)
          any_recvs_.push_back(id);
        }
      }
      if (membership) {
        form_at_issue(op.group, membership->member, static_cast<int>(membership->calls.size()), id, op);
        membership->calls.push_back(id);
      }
    }
    // What the rank's ops no longer need: the tensors' pointers into them (tensor_table numbers them again).
    ts.tensor = {};
  }

  // A send (`send`) or recv of channel `ch`, matched as it is issued: the k-th send of the channel with its k-th
  // recv, as match_p2p pairs them when no recv is from any source. The side that comes first waits in the
  // channel's queue with its tensor; a payload that is not the tensor the recv expects marks the matching
  // failed (match_p2p then pairs every channel again, for the message).
  void match_at_issue(Channel& ch, int id, const Tensor& t, bool send) {
    if (p2p_failed_) return;
    if (ch.waiting.empty() || ch.waiting_sends == send) {
      ch.waiting_sends = send;
      ch.waiting.push_back({id, t});
      return;
    }
    Pending& other = ch.waiting.front();
    const int send_id = send ? id : other.node, recv_id = send ? other.node : id;
    if (other.tensor != t) {
      if (streaming_) throw NeedsHeldSchedule{};
      p2p_failed_ = true;
      return;
    }
    matched_send_[recv_id] = send_id;
    paired_[send_id] = 1;
    ch.waiting.pop_front();
  }

  // Sends and receives: in order per (source, destination) pair; a recv from any source is matched to the
  // one rank whose next unmatched send to it carries that tensor. Without receives from any source the pairs
  // were made as the ops were issued (match_at_issue), and only the sends left over are collected here; with
  // them, or when a payload did not match, every channel is paired again here.
  void match_p2p() {
    if (any_recvs_.empty() && !p2p_failed_) {
      for (auto& [pair, ch] : channels_) {
        if (ch.waiting_sends)
          for (const Pending& p : ch.waiting) unmatched_sends_.push_back(p.node);
        ch.waiting = {};
      }
      std::sort(unmatched_sends_.begin(), unmatched_sends_.end());
      return;
    }
    std::fill(matched_send_.begin(), matched_send_.end(), -1);
    std::fill(paired_.begin(), paired_.end(), 0);
    for (int id : any_recvs_) {
      const Op& recv = op_of(id);
      const Tensor& want = recv.writes.front();
      std::vector<int> sources;
      // Candidates: for each source, the sends not claimed by its explicit receives, in order.
      for (auto& [pair, ch] : channels_) {
        if (pair.second != recv.rank) continue;
        for (std::size_t k = 0; k < ch.sends.size(); ++k)
          if (!ch.claimed(k) && op_of(ch.sends[k]).reads.front() == want) {
            sources.push_back(pair.first);
            break;
          }
      }
      if (sources.empty()) continue;  // never matched: a deadlock, reported with what it waits for
      if (sources.size() > 1)
        throw op_error(recv, fmt::format("ranks {} all send {} to rank {}: say which with 'recv from RANK'",
                                         rank_list(sources), want.str(), recv.rank));
      Channel& ch = channels_[{sources.front(), recv.rank}];
      for (std::size_t k = 0; k < ch.sends.size(); ++k)
        if (!ch.claimed(k) && op_of(ch.sends[k]).reads.front() == want) {
          ch.any.emplace(k, id);
          break;
        }
    }
    for (auto& [pair, ch] : channels_) {
      // The explicit receives take the sends in order, skipping those a recv-from-any claimed.
      std::size_t k = 0;
      for (int recv_id : ch.recvs) {
        while (k < ch.sends.size() && ch.any.count(k)) ++k;
        if (k == ch.sends.size()) break;  // a recv without a send: a deadlock, reported later
        pair_up(ch.sends[k++], recv_id);
      }
      for (auto& [at, recv_id] : ch.any) pair_up(ch.sends[at], recv_id);
      for (int send_id : ch.sends)
        if (!paired_[send_id]) unmatched_sends_.push_back(send_id);
    }
    std::sort(unmatched_sends_.begin(), unmatched_sends_.end());
    // A recv that no send matches waits for ever (time() blocks it; reported as a deadlock, with what it
    // waits for).
  }

  void pair_up(int send_id, int recv_id) {
    const Op& send = op_of(send_id);
    const Op& recv = op_of(recv_id);
    const Tensor& payload = send.reads.front();
    if (payload != recv.writes.front())
      throw op_error(recv, fmt::format("expected {} but rank {} sent {}{}", recv.writes.front().str(), send.rank,
                                       payload.str(), send.where_suffix()));
    matched_send_[recv_id] = send_id;
    paired_[send_id] = 1;
  }

  // A group's calls as they are formed, member after member (add_member). A group whose members are listed
  // in increasing rank order is formed while the ranks are issued (issuing ranks in order visits each call's
  // members in member order, as combine_inputs folds them), each op at hand; another after issue
  // (form_group_by_member). A problem marks the group, which is then formed again call by call for its
  // message.
  struct Forming {
    bool at_issue = false;   // members listed in increasing rank order
    bool failed = false;
    std::vector<int> call;   // k -> its index in calls_
    std::vector<int> callers;                            // k -> members that made call k so far
    std::vector<std::pair<Tensor, int>> first_output;  // k -> (output, member) of the first to expect one (-1: none yet)
    // k -> each member's input and expected output of an all-to-all call, until every member has made it (then
    // checked as combine_inputs checks it, and let go)
    std::vector<std::vector<Tensor>> a2a_in, a2a_out;
  };

  // Collectives: the k-th call of every member of a group forms call k; members must agree on the kind and
  // layer, and the inputs must combine to what each member expects. A group whose members are listed in
  // rank order was formed while the ranks were issued (form_at_issue), and only its last checks are left;
  // another group is formed now, member by member (a member's calls are near each other in memory, a call's
  // members are on different ranks, far apart). Should any check fail either way, the group is formed again
  // call by call, which throws the first problem in call order, as the messages name it.
  void form_calls() {
    for (int g = 0; g < static_cast<int>(groups_.size()); ++g) {
      if (forming_[g].at_issue) {
        if (finish_forming(forming_[g], g)) continue;
        if (streaming_) throw NeedsHeldSchedule{};
        // (the calls formed at issue are left unused: every member's node is given its new call)
      } else {
        if (streaming_) throw NeedsHeldSchedule{};  // (a member's calls are read from its ops after issue)
        const std::size_t base = calls_.size();
        if (form_group_by_member(g)) continue;
        calls_.resize(base);
      }
      form_group_in_order(g);
    }
  }

  // Rank `op.rank`, member `m` of group `g`, issues its k-th call of the group, op `id` (groups formed at
  // issue, see Forming).
  void form_at_issue(int g, int m, int k, int id, const Op& op) {
    if (Forming& f = forming_[g]; f.at_issue && !f.failed) add_member(f, g, m, k, id, op);
  }

  // Forms group `g`'s calls member by member, after issue; false (the calls left half formed) when a
  // check fails.
  bool form_group_by_member(int g) {
    const auto& members = groups_[g];
    Forming f;
    for (int m = 0; m < static_cast<int>(members.size()) && !f.failed; ++m) {
      const auto& mine = member_.at(slot_key(g, members[m])).calls;
      for (std::size_t k = 0; k < mine.size() && !f.failed; ++k)
        add_member(f, g, m, static_cast<int>(k), mine[k], op_of(mine[k]));
    }
    return finish_forming(f, g);
  }

  // Member `m` of group `g` makes its k-th call of the group, op `id`, members coming in member order: the
  // kind and layer agree with the call's first member, its input is folded into the call's result as
  // combine_inputs folds them (a call some member never makes is folded too, and not used), and its output
  // is what the first member with an output expects, but for the shard of a reduce-scatter (that first
  // output is compared with the folded inputs at the end, finish_forming). A problem marks `f` failed.
  void add_member(Forming& f, int g, int m, int k, int id, const Op& op) {
    if (k == static_cast<int>(f.call.size())) {
      f.call.push_back(static_cast<int>(calls_.size()));
      f.callers.push_back(0);
      f.first_output.emplace_back(Tensor{}, -1);
      Call& c = calls_.emplace_back();
      c.group = g, c.seq = k;
      c.nodes.assign(groups_[g].size(), -1);
    }
    Call& c = calls_[f.call[k]];
    const bool a2a = op.kind == OpKind::AllToAll;  // each member gets its own tokens (no folded result)
    try {
      if (f.callers[k]++ == 0) {
        c.kind = op.kind, c.layer = op.layer, c.root = root_of(op);
        c.result = input_of(op);
      } else if (op.kind != c.kind || op.layer != c.layer || root_of(op) != c.root) {
        f.failed = true;
      } else {
        fold(op, c.result);
      }
    } catch (const TensorError&) {
      f.failed = true;
    }
    if (!op.writes.empty() && !a2a) {
      auto& [out, at] = f.first_output[k];
      if (at < 0) out = op.writes.front(), at = m;
      else if (!same_output(c.kind, out, op.writes.front(), m, static_cast<int>(c.nodes.size()))) f.failed = true;
    }
    c.nodes[m] = id;
    nodes_[id].call = f.call[k];
    nodes_[id].member = m;
    if (a2a && !f.failed) add_all_to_all(f, g, m, k, op);
  }

  // An all-to-all's member `m` of call `k` of group `g` (add_member): its input and expected output are kept
  // until every member has made the call, which is then checked in call order as combine_inputs checks it
  // (sim/all_to_all.h: the dispatch's per-destination blocks, the combine's return). A problem marks `f` failed.
  void add_all_to_all(Forming& f, int g, int m, int k, const Op& op) {
    const int n = static_cast<int>(groups_[g].size());
    if (static_cast<int>(f.a2a_in.size()) <= k) f.a2a_in.resize(k + 1), f.a2a_out.resize(k + 1);
    std::vector<Tensor>&in = f.a2a_in[k], &out = f.a2a_out[k];
    if (in.empty()) in.assign(n, Tensor{}), out.assign(n, Tensor{});
    in[m] = input_of(op);
    if (op.writes.empty()) {
      f.failed = true;
      return;
    }
    out[m] = op.writes.front();
    if (f.callers[k] != n) return;
    std::vector<const Tensor*> inputs;
    for (const Tensor& t : in) inputs.push_back(&t);
    try {
      const std::vector<Tensor> got = all_to_all_[g].call(inputs);
      for (int i = 0; i < n; ++i)
        if (got[i] != out[i]) f.failed = true;
    } catch (const TensorError&) {  // (AllToAllError too)
      f.failed = true;
    }
    std::vector<Tensor>().swap(in);
    std::vector<Tensor>().swap(out);
  }

  // The checks left once every member of group `g` was added: a call every member makes is combined, and
  // its first output is what it gives. False when the group must be formed again.
  bool finish_forming(Forming& f, int g) {
    const int n = static_cast<int>(groups_[g].size());
    if (f.failed) return false;
    try {
      for (std::size_t k = 0; k < f.call.size(); ++k) {
        if (f.callers[k] != n) continue;
        Call& c = calls_[f.call[k]];
        if (c.kind == OpKind::ReduceScatter && !c.result.complete()) return false;
        c.combined = true;
        if (const auto& [out, at] = f.first_output[k]; at >= 0 && out != result_of(c, at)) return false;
      }
    } catch (const TensorError&) {
      return false;
    }
    return true;
  }

  // The collective's input on a member: its tensor, or none.
  static const Tensor& input_of(const Op& op) {
    static const Tensor none;
    return op.reads.empty() ? none : op.reads.front();
  }
  // The root of a broadcast or reduce, else -1 (the calls of a group agree on it).
  static int root_of(const Op& op) { return is_rooted(op.kind) ? op.peer : -1; }
  // The inputs of members 0..m-1 folded (`acc`) with member m's op: the union of shards for an all-gather, the
  // sum for an all-reduce, a reduce-scatter and a reduce, the root's input for a broadcast (the others have
  // none), the first input for a barrier. Throws TensorError.
  static void fold(const Op& op, Tensor& acc) {
    const Tensor& in = input_of(op);
    if (op.kind == OpKind::AllGather) acc = combine(acc, in);
    else if (op.kind == OpKind::AllReduce || op.kind == OpKind::ReduceScatter || op.kind == OpKind::Reduce) acc = sum(acc, in);
    else if (op.kind == OpKind::Broadcast && op.rank == op.peer) acc = in;
  }
  // What a complete call gives member `m`: its reduce-scatter shard, or the folded inputs.
  static Tensor result_of(const Call& c, int m) {
    return c.kind == OpKind::ReduceScatter ? shard(c.result, m, static_cast<int>(c.nodes.size())) : c.result;
  }
  // True when member `m`'s output `mine` of a call of `n` members is what the call gives it, given that
  // `first` is what it gives the member that expects `first`: the same tensor, or for a reduce-scatter the
  // same tensor but for the shard, which is m of n.
  static bool same_output(OpKind kind, const Tensor& first, const Tensor& mine, int m, int n) {
    if (kind != OpKind::ReduceScatter) return mine == first;
    return mine.kind == first.kind && mine.layer == first.layer && mine.step == first.step &&
           mine.batches == first.batches && mine.tp_size == first.tp_size && mine.tp_slices == first.tp_slices &&
           mine.partial == first.partial && mine.num_shards == n && mine.shards.size() == 1 && mine.shards.first() == m;
  }

  // Forms group `g`'s calls call by call, throwing the first problem.
  void form_group_in_order(int g) {
    const auto& members = groups_[g];
    all_to_all_[g] = AllToAllGroup{};
    std::size_t most = 0;
    for (int r : members) most = std::max(most, member_.at(slot_key(g, r)).calls.size());
    for (std::size_t k = 0; k < most; ++k) {
      Call call;
      call.group = g, call.seq = k;
      call.nodes.assign(members.size(), -1);
      int first = -1;
      for (std::size_t m = 0; m < members.size(); ++m) {
        const auto& mine = member_.at(slot_key(g, members[m])).calls;
        if (k >= mine.size()) continue;
        const int id = mine[k];
        const Op& op = op_of(id);
        if (first < 0) {
          first = id;
          call.kind = op.kind, call.layer = op.layer;
        } else if (const Op& a = op_of(first); a.kind != op.kind || a.layer != op.layer || root_of(a) != root_of(op)) {
          throw CollectiveMismatchError(fmt::format(
              "collective mismatch in group {} at call #{}: rank {} calls {}{} but rank {} called {}{}", g, k,
              op.rank, op.describe(), op.where_suffix(), a.rank, a.describe(), a.where_suffix()));
        }
        call.nodes[m] = id;
        nodes_[id].call = static_cast<int>(calls_.size());
        nodes_[id].member = static_cast<int>(m);
      }
      if (std::find(call.nodes.begin(), call.nodes.end(), -1) == call.nodes.end()) combine_inputs(call);
      calls_.push_back(std::move(call));
    }
  }

  void combine_inputs(Call& call) {
    const int n = static_cast<int>(call.nodes.size());
    const Op& first = op_of(call.nodes[0]);
    auto fail = [&](int m, const std::exception& e) {
      return SimError(fmt::format("{} layer {} (collective #{} of group {}): rank {}{} and the ranks before it: {}",
                                  op_name(first.kind), first.layer, call.seq, call.group, op_of(call.nodes[m]).rank,
                                  op_of(call.nodes[m]).where_suffix(), e.what()));
    };
    if (first.kind == OpKind::AllToAll) {
      // Expert parallelism's dispatch or combine: each member gets its own tokens (sim/all_to_all.h).
      std::vector<const Tensor*> inputs;
      for (int m = 0; m < n; ++m) inputs.push_back(&input_of(op_of(call.nodes[m])));
      std::vector<Tensor> out;
      try {
        out = all_to_all_[call.group].call(inputs);
      } catch (const AllToAllError& e) {
        throw fail(e.member, e);
      }
      for (int m = 0; m < n; ++m) {
        const Op& op = op_of(call.nodes[m]);
        if (op.writes.empty() || op.writes.front() != out[m])
          throw op_error(op, fmt::format("it expects {} but the all-to-all gives {}{}",
                                         op.writes.empty() ? "nothing" : op.writes.front().str(), out[m].str(),
                                         route_words(out[m])));
      }
      call.combined = true;
      return;
    }
    Tensor acc = input_of(first);
    for (int m = 1; m < n; ++m) {
      try {
        fold(op_of(call.nodes[m]), acc);
      } catch (const TensorError& e) {
        throw fail(m, e);
      }
    }
    call.result = acc;
    for (int m = 0; m < n; ++m) {
      Tensor result = acc;
      if (first.kind == OpKind::ReduceScatter) {
        try {
          result = shard(acc, m, n);
        } catch (const TensorError& e) {
          throw fail(m, e);
        }
      }
      const Op& op = op_of(call.nodes[m]);
      if (!op.writes.empty() && op.writes.front() != result)
        throw op_error(op, fmt::format("it expects {} but the {} gives {}", op.writes.front().str(), op_name(op.kind),
                                       result.str()));
    }
    call.combined = true;
  }

  // Longest path, by a depth-first search over each node's dependencies (with a stack of its own: a chain of
  // dependencies can be as long as the schedule): a node starts when the last of its dependencies ends, and
  // a collective's members when the last of them is ready. The search reads each dependency once and needs
  // no list of the nodes that wait for a node. A node that waits, directly or not, for itself (a cycle), for
  // a recv no send matches or for a call a member never makes is blocked: it never runs.
  void time() {
    for (int id = 0; id < static_cast<int>(nodes_.size()); ++id)
      if (nodes_[id].end == Node::kNew) resolve(id);
  }

  // A task of the search: a node (>= 0), or, for a collective's node, its call c (as ~c): a call's
  // dependencies are all its members'.
  int task_of(int id) const { return nodes_[id].call >= 0 ? ~nodes_[id].call : id; }
  Time& state(int task) { return task >= 0 ? nodes_[task].end : calls_[~task].state; }

  struct Frame {
    int task;
    int member = -1;                  // calls: the member whose dependencies are read
    std::uint32_t at = 0, stop = 0;   // the dependencies left to read, in deps_
    bool message = false;             // a recv: its message (the matched send) is still to read
    bool blocked = false;             // a dependency is blocked or on a cycle
  };

  void push(int task) {
    state(task) = Node::kActive;
    Frame& f = stack_.emplace_back();
    f.task = task;
    if (task >= 0) {
      f.at = dep_begin_[task], f.stop = dep_begin_[task + 1];
      f.message = kind_[task] == OpKind::Recv;
    }
  }

  // The node whose dependencies the frame reads now.
  int reader(const Frame& f) const { return f.task >= 0 ? f.task : calls_[~f.task].nodes[f.member]; }

  // The dependency the frame is at (kNoMessage for a recv no send matches), or false once it read them all.
  static constexpr int kNoMessage = -1;
  bool peek(Frame& f, int& dep) {
    for (;;) {
      if (f.at < f.stop) return dep = deps_[f.at], true;
      if (f.task >= 0) {
        if (!f.message) return false;
        return dep = matched_send_[f.task], true;
      }
      const Call& c = calls_[~f.task];
      if (f.member + 1 >= static_cast<int>(c.nodes.size())) return false;
      const int node = c.nodes[++f.member];
      if (node < 0) {
        // A member that never makes the call; one that is not simulated runs as its representative.
        if (simulated(groups_[c.group][f.member])) f.blocked = true;
        continue;
      }
      f.at = dep_begin_[node], f.stop = dep_begin_[node + 1];
    }
  }
  static void advance(Frame& f) {
    if (f.at < f.stop) ++f.at;
    else f.message = false;
  }

  void resolve(int root) {
    push(task_of(root));
    while (!stack_.empty()) {
      Frame& f = stack_.back();
      int dep;
      if (!peek(f, dep)) {
        const Frame done = f;
        stack_.pop_back();
        complete(done);
        continue;
      }
      if (dep == kNoMessage) {
        f.blocked = true;
      } else {
        const int task = task_of(dep);
        const Time st = state(task);
        if (st == Node::kNew) {
          push(task);  // (f is not used after this: the push may move the stack)
          continue;    // the dependency is read again once it is timed
        }
        if (st == Node::kActive || st == Node::kBlocked) {
          f.blocked = true;  // kActive: the dependency waits for this node: a cycle
        } else {
          Time& ready = nodes_[reader(f)].start;
          ready = std::max(ready, nodes_[dep].end);
        }
      }
      advance(f);
    }
  }

  // All of a task's dependencies were read: it runs (a call: all its members at once), or it is blocked.
  void complete(const Frame& f) {
    if (f.task >= 0) {
      if (f.blocked) {
        nodes_[f.task].end = Node::kBlocked;
        return;
      }
      finish(f.task, nodes_[f.task].start, duration_[f.task]);
      return;
    }
    Call& c = calls_[~f.task];
    if (f.blocked) {
      c.state = Node::kBlocked;
      for (int member : c.nodes)
        if (member >= 0) nodes_[member].end = Node::kBlocked;
      return;
    }
    Time latest = 0;
    for (int member : c.nodes)
      if (member >= 0) latest = std::max(latest, nodes_[member].start);
    for (int member : c.nodes)
      if (member >= 0) finish(member, latest, duration_[member]);
    c.state = latest;
  }

  void finish(int id, Time start, Time duration) {
    if (duration < 0 || duration > kMaxTime - start) {
      const Op& op = op_of(id);
      throw SimError(fmt::format("rank {}: {}{} starts at t={} and takes {} s: simulated time would pass its limit of "
                                 "{} s (2^63 ns, about 292 years)",
                                 op.rank, op.describe(), op.where_suffix(), format_time(start), format_time(duration),
                                 format_time(kMaxTime)));
    }
    Node& n = nodes_[id];
    n.start = start;
    n.end = start + duration;
    last_time_ = std::max(last_time_, n.end);
  }

  int count_unfinished() const {
    int k = 0;
    for (const Node& n : nodes_) k += !n.done();
    return k;
  }

  // True when every dependency of node `id` ran (a collective's member is then ready for its call).
  bool arrived(int id) const {
    for (std::uint32_t k = dep_begin_[id]; k < dep_begin_[id + 1]; ++k)
      if (!nodes_[deps_[k]].done()) return false;
    return op_of(id).kind != OpKind::Recv || (matched_send_[id] >= 0 && nodes_[matched_send_[id]].done());
  }

  // What rank `r`'s first unfinished op waits for: the ranks, and in words.
  std::pair<std::vector<int>, std::string> waits(int id) const {
    const Op& op = op_of(id);
    if (op.kind == OpKind::Recv) {
      int src = matched_src(id) >= 0 ? matched_src(id) : op.peer;
      if (src < 0) return {{}, "waiting for a message from any rank"};
      return {{src}, fmt::format("waiting for a message from rank {}", src)};
    }
    if (nodes_[id].call >= 0) {
      const Call& c = calls_[nodes_[id].call];
      std::vector<int> missing;
      const auto& members = groups_[c.group];
      for (std::size_t m = 0; m < members.size(); ++m)
        if (c.nodes[m] < 0 ? simulated(members[m]) : !arrived(c.nodes[m])) missing.push_back(members[m]);
      return {missing, fmt::format("collective #{} of group {}, waiting for rank{} {}", c.seq, c.group,
                                   missing.size() == 1 ? "" : "s", rank_list(missing))};
    }
    return {{}, "waiting for an op of its own that cannot start"};
  }

  // Each rank's first op that never ran, or -1 for a rank that finished.
  std::vector<int> first_unfinished() const {
    std::vector<int> first(h_.world_size, -1);
    for (int r = 0; r < h_.world_size; ++r)
      for (int i = 0; i < ops_of_rank(r); ++i)
        if (!nodes_[id_of(r, i)].done()) {
          first[r] = id_of(r, i);
          break;
        }
    return first;
  }

  // What a blocked op `id` waits for, for the timeline's marks: a message or a collective's missing members as
  // waits() words them, or, for an op held up on its own rank, the first of its dependencies that never ran
  // (with that op's own wait when it is a receive or a collective).
  std::string blocked_detail(int id) const {
    const Op& op = op_of(id);
    if (op.kind == OpKind::Recv || nodes_[id].call >= 0) return waits(id).second;
    for (std::uint32_t k = dep_begin_[id]; k < dep_begin_[id + 1]; ++k) {
      const int dep = deps_[k];
      if (nodes_[dep].done()) continue;
      const Op& d = op_of(dep);
      std::string s =
          fmt::format("waiting for {}{} (stream {}), which never ran", d.describe(), d.where_suffix(), d.stream);
      if (d.kind == OpKind::Recv || nodes_[dep].call >= 0) s += ": it is " + waits(dep).second;
      return s;
    }
    return waits(id).second;
  }

  // Every rank with an op that never ran (`first`: first_unfinished()), in rank order: its first such op,
  // then the first timed one of each other stream that has one (a stream runs in order, so nothing after it ran
  // there), each with when it was ready and what it waits for (a collective's words made once per call: one call of
  // thousands of members can block thousands of ranks).
  std::vector<World::BlockedRank> blocked_ranks(const std::vector<int>& first) const {
    std::vector<World::BlockedRank> out;
    std::unordered_map<int, std::string> call_detail;
    std::vector<int> streams;  // of the rank, marked so far
    for (int r = 0; r < h_.world_size; ++r) {
      if (first[r] < 0) continue;
      streams.clear();
      for (int id = first[r]; id < id_of(r, ops_of_rank(r)); ++id) {
        const Op& op = op_of(id);
        if (id != first[r] && (nodes_[id].done() || !is_timed(op.kind) ||
                               std::find(streams.begin(), streams.end(), op.stream) != streams.end()))
          continue;
        streams.push_back(op.stream);
        std::string detail;
        if (const int c = nodes_[id].call; c >= 0) {
          auto [it, fresh] = call_detail.try_emplace(c);
          if (fresh) it->second = waits(id).second;
          detail = it->second;
        } else {
          detail = blocked_detail(id);
        }
        out.push_back({r, nodes_[id].start, op.describe() + op.where_suffix(), std::move(detail), op.stream});
      }
    }
    return out;
  }

  // The deadlock's words (`first`: first_unfinished()): the blocked ranks, the first kListedRanks with what
  // they wait for, and the wait-for cycle.
  std::string deadlock_report(const std::vector<int>& first) const {
    const int world = h_.world_size;
    std::vector<int> blocked;
    for (int r = 0; r < world; ++r)
      if (first[r] >= 0) blocked.push_back(r);
    std::string s = fmt::format("deadlock: no event is left at t={} and rank{} {} {} blocked", format_time(last_time_),
                                blocked.size() == 1 ? "" : "s", rank_list(blocked), blocked.size() == 1 ? "is" : "are");
    for (std::size_t k = 0; k < blocked.size() && k < kListedRanks; ++k) {
      const int r = blocked[k];
      auto [on, detail] = waits(first[r]);
      std::vector<int> finished;
      for (int w : on)
        if (first[w] < 0) finished.push_back(w);
      const Op& op = op_of(first[r]);
      s += fmt::format("\n  rank {} at t={}: {}{}: {}", r, format_time(nodes_[first[r]].start), op.describe(),
                       op.where_suffix(), detail);
      if (!finished.empty())
        s += fmt::format(" (rank{} {} finished without it)", finished.size() == 1 ? "" : "s", rank_list(finished));
    }
    if (blocked.size() > kListedRanks) s += fmt::format("\n  ... and {} more blocked ranks", blocked.size() - kListedRanks);
    // The wait-for graph: ranks, and one node per collective call that blocked ranks wait in (its edges go to
    // the members that have not arrived), so that it stays as large as the groups.
    std::map<int, int> call_node;       // call -> node
    std::vector<std::vector<int>> call_edges;
    for (int r : blocked) {
      const int c = nodes_[first[r]].call;
      if (c < 0 || call_node.count(c)) continue;
      call_node[c] = world + static_cast<int>(call_edges.size());
      std::vector<int> edges;
      for (int w : waits(first[r]).first)
        if (first[w] >= 0) edges.push_back(w);
      call_edges.push_back(std::move(edges));
    }
    std::vector<int> unfinished = blocked;
    auto edge = [&](int node, std::size_t i, const std::vector<int>& stack) -> int {
      if (node >= world) {
        const auto& e = call_edges[node - world];
        return i < e.size() ? e[i] : -1;
      }
      const int id = first[node];
      if (id < 0) return -1;
      if (nodes_[id].call >= 0) return i == 0 ? call_node.at(nodes_[id].call) : -1;
      const Op& op = op_of(id);
      if (op.kind == OpKind::Recv && matched_send_[id] < 0 && op.peer < 0) {
        // Any source: the nearest rank below on the stack waits for this one, which waits for it: a cycle.
        for (std::size_t k = stack.size() - 1; k-- > 0;)
          if (stack[k] < world) return i == 0 ? stack[k] : -1;
        if (i >= unfinished.size()) return -1;
        return unfinished[i] == node ? -2 : unfinished[i];
      }
      auto on = waits(id).first;
      if (i >= on.size()) return -1;
      return first[on[i]] < 0 ? -2 : on[i];
    };
    const bool all_receive_from_any = std::all_of(blocked.begin(), blocked.end(), [&](int r) {
      const Op& op = op_of(first[r]);
      return op.kind == OpKind::Recv && matched_send_[first[r]] < 0 && op.peer < 0;
    });
    if (all_receive_from_any) return s + no_sender_text();
    return s + cycle_text(find_wait_cycle(world + static_cast<int>(call_edges.size()), world, blocked, edge));
  }

  // Rank `r`'s ops that ran, in (start, program order), into `order`. Each stream runs its ops one after the
  // other in program order, so per stream the starts never decrease and the order is a merge of the streams'
  // lists (a heap over the streams' heads): no sort of the whole rank. Returns false, leaving `order` empty,
  // when that order is program order (one stream, or starts that never decrease): the caller then walks the
  // ops that ran in program order, and nothing is built.
  bool ops_by_start(int r, std::vector<int>& order) const {
    const int n = ops_of_rank(r);
    auto start_of = [&](int i) { return nodes_[id_of(r, i)].start; };
    order.clear();
    Time last = 0;
    bool program_order = true;
    for (int i = 0; i < n && program_order; ++i) {
      if (!nodes_[id_of(r, i)].done()) continue;  // (after a deadlock: what ran before it)
      program_order = start_of(i) >= last;
      last = start_of(i);
    }
    if (program_order) return false;
    std::vector<std::pair<int, std::vector<int>>> lanes;  // (stream, its ops that ran, in program order)
    // stream -> lane: streams below 64 (all real schedules) in an array, others in a map (a rank may use many)
    std::array<int, 64> near_lane;
    near_lane.fill(-1);
    boost::unordered_flat_map<int, std::size_t> far_lane;
    std::size_t ran = 0;
    bool monotone = true;
    for (int i = 0; i < n; ++i) {
      if (!nodes_[id_of(r, i)].done()) continue;
      const int stream = stream_[id_of(r, i)];
      std::size_t k;
      if (stream >= 0 && stream < 64) {
        if (near_lane[stream] < 0) near_lane[stream] = static_cast<int>(lanes.size()), lanes.emplace_back(stream, std::vector<int>{});
        k = near_lane[stream];
      } else {
        auto [at, fresh] = far_lane.try_emplace(stream, lanes.size());
        if (fresh) lanes.emplace_back(stream, std::vector<int>{});
        k = at->second;
      }
      auto& lane = lanes[k].second;
      monotone = monotone && (lane.empty() || start_of(lane.back()) <= start_of(i));
      lane.push_back(i);
      ++ran;
    }
    auto later = [&](int a, int b) { return start_of(a) != start_of(b) ? start_of(a) > start_of(b) : a > b; };
    order.reserve(ran);
    using Head = std::pair<int, std::size_t>;  // (op, lane)
    auto head_later = [&](const Head& a, const Head& b) { return later(a.first, b.first); };
    std::priority_queue<Head, std::vector<Head>, decltype(head_later)> heads(head_later);
    std::vector<std::size_t> at(lanes.size(), 0);
    for (std::size_t k = 0; k < lanes.size(); ++k) heads.push({lanes[k].second.front(), k});
    while (!heads.empty()) {
      auto [i, k] = heads.top();
      heads.pop();
      order.push_back(i);
      if (++at[k] < lanes[k].second.size()) heads.push({lanes[k].second[at[k]], k});
    }
    // Stream order makes every lane monotone; should a cost model ever break that, sort instead.
    if (!monotone) std::sort(order.begin(), order.end(), [&](int a, int b) { return later(b, a); });
    return true;
  }

  // Memory of rank `r` over time; every timed op's sample; the limit (or the capacity noted).
  void sample_memory(int r) {
    const RankTensors& ts = tensors_[r];
    const int n_ops = ops_of_rank(r);
    // The rank's nodes and their kinds (the ops themselves are visited only to record them).
    const Node* node = nodes_.data() + offset_[r];  // (data(): a rank may have no ops, the schedule none)
    const OpKind* kind = kind_.data() + offset_[r];
    // In (start, program order), each timed op is sampled before its own allocations and releases apply.
    std::vector<int>& order = order_;
    const bool reordered = ops_by_start(r, order);
    const std::size_t ran = reordered ? order.size() : static_cast<std::size_t>(n_ops);
    std::vector<double>& sample = sample_;  // by op: memory resident as it starts
    sample.assign(n_ops, 0.0);  // (0 for the ops after a memory-limit error: they are not sampled)
    // The first op over the limit stops the sampling; the first over the capacity is only noted.
    bool check = o_.memory_limit || o_.memory_capacity;
    const double bound = o_.memory_limit ? *o_.memory_limit : o_.memory_capacity ? *o_.memory_capacity : 0.0;
    double total = 0;
    // For the observer: what is resident by kind, and its split at the rank's highest sample (the first op at it).
    std::array<double, 5> by_kind{};
    MemoryByKind peak;
    double peak_total = -1;
    for (std::size_t k = 0; k < ran; ++k) {
      const int i = reordered ? order[k] : static_cast<int>(k);
      if (!reordered && !node[i].done()) continue;
      if (is_timed(kind[i])) {
        const double workspace = ts.workspace.empty() ? 0.0 : ts.workspace_of(i);
        const double at = total + workspace;  // with what it holds inside
        sample[i] = at;
        if (o_.observer && at > peak_total) {
          peak_total = at;
          peak = MemoryByKind{by_kind[static_cast<int>(TensorKind::Weight)],
                              by_kind[static_cast<int>(TensorKind::WeightGrad)],
                              by_kind[static_cast<int>(TensorKind::OptState)],
                              by_kind[static_cast<int>(TensorKind::Activation)] +
                                  by_kind[static_cast<int>(TensorKind::ActivationGrad)],
                              workspace, node[i].start};
        }
        if (check && at > bound) {
          over_.push_back({node[i].start, r, k, i, at});
          if (o_.memory_limit) break;
          check = false;  // (noted once per rank)
        }
      }
      const double sign = kind[i] == OpKind::Free ? -1.0 : 1.0;
      for (int e = ts.memory_begin[i]; e < ts.memory_begin[i + 1]; ++e) {
        const int id = ts.memory_ids[e];
        total += sign * ts.bytes[id];
        by_kind[static_cast<int>(ts.kind[id])] += sign * ts.bytes[id];
      }
    }
    if (o_.observer && peak_total >= 0) o_.observer->peak(r, peak);
    RankFigures* fig = o_.mirror.empty() ? nullptr : &figures_[r];
    // The ops themselves only for the records.
    const std::vector<Op>* ops = o_.record_trace ? &src_.ops(r) : nullptr;
    std::vector<OpRun>& runs = trace_.ranks[r];
    if (o_.record_trace) {
      std::size_t timed = 0;
      for (int i = 0; i < n_ops; ++i) timed += is_timed(kind[i]) && node[i].done();
      runs.reserve(timed);
    }
    ran_.clear();
    Time busy = 0;
    for (int i = 0; i < n_ops; ++i) {
      if (!is_timed(kind[i]) || !node[i].done()) continue;
      const Node& n = node[i];
      // The trace's figures (sim/trace.cpp), in the same order: ranks in order, ops in program order.
      summary_.timesteps = std::max(summary_.timesteps, n.start);
      summary_.makespan = std::max(summary_.makespan, n.end);
      if (sample[i] > summary_.peak.memory) summary_.peak = MemoryPeak{sample[i], r, n.start};
      if (is_compute(kind[i])) busy += n.end - n.start;
      ++summary_.timed_ops;
      if (o_.observer) ran_.push_back({i, kind[i], n.start, n.end, sample[i]});
      if (!ops) continue;
      OpRun& run = runs.emplace_back();  // built in place: the op is copied once, not copied and moved
      run.op = (*ops)[i], run.start = n.start, run.end = n.end, run.memory = sample[i];
      Op& op = run.op;
      if (op.kind == OpKind::Recv) op.peer = matched_src(id_of(r, i));
      if (n.call >= 0) {
        const Call& c = calls_[n.call];
        // (an all-to-all's member writes its own tokens, checked when the call was combined)
        if (c.combined && c.kind != OpKind::AllToAll) op.writes = {result_of(c, n.member)};
      }
    }
    busy_ += static_cast<double>(busy);
    if (o_.observer) o_.observer->ran(r, ran_);
    if (fig) {
      fig->busy = static_cast<double>(busy);
      fig->timed = 0;
      for (int i = 0; i < n_ops; ++i) fig->timed += is_timed(kind[i]) && node[i].done();
      fig->peak = MemoryPeak{-1, r, 0};
      for (int i = 0; i < n_ops; ++i)
        if (is_timed(kind[i]) && node[i].done() && sample[i] > fig->peak.memory) fig->peak = MemoryPeak{sample[i], r, node[i].start};
      fig->over = -1;
      for (std::size_t k = 0; k < over_.size(); ++k)
        if (over_[k].rank == r) fig->over = static_cast<int>(k);
    }
  }

  // Symmetric simulation: rank `r` runs as its representative `q` (a lower rank, sampled already): the summary
  // takes its figures as sample_memory would (the same values in the same rank order), the observer is told, and
  // an op over the memory limit or capacity is noted for it too.
  void copy_rank(int r, int q) {
    const RankFigures& fig = figures_.at(q);
    if (fig.timed > 0) {
      // (timesteps and makespan are maxima over the ops: the representative's counted them)
      if (fig.peak.memory > summary_.peak.memory) summary_.peak = MemoryPeak{fig.peak.memory, r, fig.peak.time};
      summary_.timed_ops += fig.timed;
    }
    busy_ += fig.busy;
    if (fig.over >= 0) {
      Over o = over_[fig.over];
      o.rank = r;
      over_.push_back(o);
    }
    if (o_.observer) o_.observer->mirrored(r, q);
  }

  // Rank r's tensors as issue() numbered them, from its ops (first mention, each op's reads before its writes):
  // what a message about the memory resident on the rank names.
  std::vector<const Tensor*> tensor_table(const std::vector<Op>& ops) const {
    boost::unordered_flat_map<const Tensor*, int, TensorHash, SameTensor> ids;
    std::vector<const Tensor*> table;
    auto intern = [&](const Tensor& t) {
      if (ids.try_emplace(&t, static_cast<int>(table.size())).second) table.push_back(&t);
    };
    for (const Op& op : ops) {
      for (const Tensor& t : op.reads) intern(t);
      if (op.kind != OpKind::Free)
        for (const Tensor& t : op.writes) intern(t);
    }
    return table;
  }

  // The first op over `limit` on a rank (`o`, as sample_memory found it), in the memory-limit message's words,
  // with what is resident then.
  std::string over_message(const Over& o, double limit) {
    const int r = o.rank;
    const std::vector<Op>& ops = src_.ops(r);
    const std::vector<const Tensor*> tensor = tensor_table(ops);
    const RankTensors& ts = tensors_[r];
    const Node* node = nodes_.data() + offset_[r];
    const OpKind* kind = kind_.data() + offset_[r];
    std::vector<int> order;
    const bool reordered = ops_by_start(r, order);
    MemoryLedger resident(*cost_, r);  // what is resident as the op starts
    for (std::size_t j = 0; j < o.k; ++j) {
      const int before = reordered ? order[j] : static_cast<int>(j);
      if (!reordered && !node[before].done()) continue;
      for (int e = ts.memory_begin[before]; e < ts.memory_begin[before + 1]; ++e)
        kind[before] == OpKind::Free ? static_cast<void>(resident.remove(*tensor[ts.memory_ids[e]]))
                                     : resident.add(*tensor[ts.memory_ids[e]]);
    }
    const Op& op = ops[o.index];
    const double workspace = ts.workspace_of(o.index);
    const std::string inside =
        workspace == 0 ? "" : fmt::format(" and {} {} inside it", format_memory(workspace), cost_->memory_unit());
    return fmt::format("rank {}: memory limit exceeded at t={}: {}{} starts with {} {} resident{} (limit {}); resident: {}",
                       r, format_time(o.time), op.describe(), op.where_suffix(), format_memory(o.total - workspace),
                       cost_->memory_unit(), inside, format_memory(limit), resident.summary());
  }

  // The earliest op over the limit or capacity over the ranks (by time, then rank), or null.
  const Over* first_over() const {
    if (over_.empty()) return nullptr;
    return &*std::min_element(over_.begin(), over_.end(),
                              [](const Over& a, const Over& b) { return std::tie(a.time, a.rank) < std::tie(b.time, b.rank); });
  }

 public:
  // The earliest memory-limit error over the ranks (by time, then rank), if any.
  void throw_memory_limit() {
    if (!o_.memory_limit) return;
    if (const Over* first = first_over()) throw MemoryLimitError(over_message(*first, *o_.memory_limit));
  }
  // With SimOptions::memory_capacity: the earliest op over it, in the memory-limit message's words; else "".
  std::string over_capacity() {
    if (o_.memory_limit || !o_.memory_capacity) return "";
    const Over* first = first_over();
    return first ? over_message(*first, *o_.memory_capacity) : "";
  }

 private:
  const RankSource& src_;
  const ScheduleHeader& h_;
  const SimOptions& o_;
  const bool streaming_;  // the source makes each rank's ops when asked (RankSource::holds_all() is false)
  const bool prepare_;    // the model learns each rank as it is issued (CostModel::prepare_rank)
  std::unique_ptr<CostModel> owned_cost_;  // the header's model, unless SimOptions::cost replaces it
  CostModel* cost_;
  std::vector<int> offset_;
  std::vector<Node> nodes_;
  std::vector<std::vector<int>> groups_;
  std::map<std::pair<int, int>, Channel> channels_;  // (src, dst)
  std::vector<int> any_recvs_;
  std::vector<int> matched_send_;  // a recv's matched send, or -1
  std::vector<OpKind> kind_;       // by node: its op's kind
  std::vector<Time> duration_;     // by node: its op's duration (0 for untimed ops)
  std::vector<int> stream_;        // by node: its op's stream
  UpdateCheck updates_;            // the updates, counted as they are issued
  std::map<int, AllToAllGroup> all_to_all_;  // group -> its all-to-alls' dispatches waiting for their combines
  std::vector<char> paired_;  // sends matched with a recv
  std::vector<int> unmatched_sends_;
  // A rank's membership of a group, keyed by slot_key(group, rank): its collectives in order.
  struct Membership {
    int member = 0;          // the rank's place in the group's member list
    std::vector<int> calls;  // its collectives, in program order
  };
  static std::uint64_t slot_key(int group, int rank) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(group)) << 32 | static_cast<std::uint32_t>(rank);
  }
  boost::unordered_flat_map<std::uint64_t, Membership> member_;
  std::vector<Call> calls_;
  std::vector<Forming> forming_;  // by group
  std::vector<Over> over_;  // per rank, the first op over the memory limit or capacity
  // Symmetric simulation: what a simulated rank gives the ranks that run as it (copy_rank).
  struct RankFigures {
    double busy = 0;           // its compute time
    std::size_t timed = 0;     // its timed ops that ran
    MemoryPeak peak;           // its highest sample (memory -1: none)
    int over = -1;             // its entry of over_, or -1
  };
  std::map<int, RankFigures> figures_;  // by simulated rank
  int simulated_ = 0;                   // ranks simulated
  std::vector<RanOp> ran_;  // scratch of sample_memory: a rank's timed ops as they ran, for the observer
  bool p2p_failed_ = false;  // a payload matched at issue was not what its recv expects (match_at_issue)
  std::vector<RankTensors> tensors_;  // per rank
  Issuing issuing_;                   // the rank being issued
  std::vector<int> read_ids_;         // scratch: the interned reads of the op being issued
  std::vector<int> deps_;                  // each node's dependencies on its own rank, node after node
  std::vector<std::uint32_t> dep_begin_;   // node id's are deps_[dep_begin_[id], dep_begin_[id + 1])
  std::vector<Frame> stack_;               // the search of time()
  std::vector<int> order_;                 // scratch of sample_memory: a rank's ops in start order
  std::vector<double> sample_;             // scratch of sample_memory: memory resident as each op starts
  Time last_time_ = 0;
  RunSummary summary_;
  double busy_ = 0;  // compute time summed over the ranks
  bool timed_ = false, filled_ = false;
  Trace trace_;
  std::vector<World::BlockedRank> blocked_;  // after a deadlock
};

}  // namespace

SimResult simulate_streams(const Schedule& schedule, const SimOptions& options) {
  if (static_cast<int>(schedule.ranks.size()) != schedule.header.world_size) {
    SimResult result;
    result.error = fmt::format("the schedule has op lists for {} ranks but world_size is {}", schedule.ranks.size(),
                               schedule.header.world_size);
    return result;
  }
  return simulate_streams(ScheduleView(schedule), options);
}

namespace {

// simulate_streams, `prepare` as StreamSim takes it.
SimResult run_streams(const RankSource& source, const SimOptions& options, bool prepare) {
  SimResult result;
  // The header's cost model, made here rather than in StreamSim: a model refuses what it cannot price (an EP degree
  // that does not split the model's experts, a CP group of the wrong size, ...) as it is built, and that is the
  // schedule's result, never an exception out of simulate() (the options' own errors still throw, from StreamSim).
  std::unique_ptr<CostModel> model;
  SimOptions with_model = options;
  if (!options.cost) {
    try {
      model = make_schedule_cost_model(source);
    } catch (const std::exception& e) {
      if (!source.holds_all()) {  // (the held pass words it as every other problem)
        const Schedule held = RankSource::collect(source);
        return run_streams(ScheduleView(held), options, true);
      }
      result.error = e.what();
      return result;
    }
    with_model.cost = model.get();
  }
  // (a model made here has learnt every held rank: StreamSim prepares it again only for a caller's model)
  StreamSim sim(source, with_model, prepare && options.cost != nullptr);
  // A streaming source's problem is found again with every rank's ops held. The caller's cost model learnt only
  // the ranks the streaming pass reached (up to the one that failed, whose refusal the model may have raised
  // itself), so the held pass prepares it again: else it would time the held ranks unprepared, e.g. an MoE
  // layer without its experts and without the refusal that stopped the streaming pass.
  auto held_again = [&] {
    const Schedule held = RankSource::collect(source);
    return run_streams(ScheduleView(held), options, true);
  };
  try {
    sim.run();
    sim.fill_trace();
    sim.throw_memory_limit();
    sim.check_updates();
    result.ok = true;
    result.over_capacity = sim.over_capacity();
  } catch (const NeedsHeldSchedule&) {
    // Every rank's ops at once: the same problem, in the same words, with what ran before it.
    return held_again();
  } catch (const MemoryLimitError& e) {
    result.error = e.what();
  } catch (const std::exception& e) {
    if (!source.holds_all()) return held_again();
    result.error = e.what();
    if (sim.timed()) sim.fill_trace();  // what ran before the problem (a deadlock, a lost message)
  }
  result.trace = std::move(sim.trace());
  result.summary = sim.summary();
  result.blocked = std::move(sim.blocked());
  result.op_count = sim.op_count();
  return result;
}

}  // namespace

SimResult simulate_streams(const RankSource& source, const SimOptions& options) {
  return run_streams(source, options, false);
}

}  // namespace trainsim
