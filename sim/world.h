// The simulated cluster: ranks with their clocks and memory ledgers, point-to-point mailboxes, collective
// groups, and the checks (DESIGN §2). Programs talk to it through Rank (sim/rank.h).
#pragma once

#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/all_to_all.h"
#include "sim/cost_model.h"
#include "sim/errors.h"
#include "sim/kernel.h"
#include "sim/ledger.h"
#include "sim/op.h"
#include "sim/trace.h"

namespace trainsim {

/// How sends are buffered.
enum class P2PMode {
  /// The puzzles' rule: each destination has one slot; a sender waits while it is full.
  OneSlotPerDestination,
  /// NCCL's rule for asynchronous sends (isend/irecv): each (source, destination) pair is its own in-order
  /// channel; a send never waits, its message is queued until the destination receives it.
  PerPairChannel,
};

/// A message in flight.
struct Message {
  int src = 0;
  Tensor payload;
  Time ready = 0;     ///< sender's clock after its send
  std::string where;  ///< where the send came from
};

/// Settings of one simulated run.
struct WorldOptions {
  int world_size = 1;
  int layers = 0;   ///< for the trace header only
  int batches = 0;  ///< for the trace header only
  P2PMode p2p = P2PMode::OneSlotPerDestination;
  std::optional<double> memory_limit;  ///< per rank, cost model unit; exceeding it is a MemoryLimitError
};

/// Simulated cluster. Single-threaded; not copyable.
class World {
 public:
  /// Throws std::invalid_argument when world_size < 1 or the memory limit is negative or not finite.
  World(WorldOptions options, const CostModel& cost);
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  ~World();

  int world_size() const { return options_.world_size; }
  const CostModel& cost() const { return *cost_; }
  Kernel& kernel() { return *kernel_; }

  /// Registers a collective group and returns its id. Group 0 is every rank and always exists.
  /// Throws std::invalid_argument for an empty group, a duplicate member or a rank out of range.
  int add_group(std::vector<int> members);
  /// Members of group `id` in order; a member's index is its shard in reduce-scatter.
  const std::vector<int>& group(int id) const;

  /// Rank's clock: the time its next op would start.
  Time clock(int rank) const { return ranks_.at(rank).clock; }
  /// Rank's resident tensors.
  MemoryLedger& ledger(int rank) { return ranks_.at(rank).ledger; }

  /// Runs a timed local op now on its rank: samples memory, records it, advances the rank's clock.
  /// Throws MemoryLimitError over the limit, SimError when the clock would pass kMaxTime.
  void execute(Op op);
  /// Point-to-point send of `payload` (puzzle `pass_to`). Records the Send at the rank's clock, then
  /// waits while the destination's slot is full. Throws SimError for a bad destination.
  Task send(Op op, Tensor payload);
  /// Receive from op.peer (-1: any source, first come first served). Waits for a message; the rank's
  /// clock rises to the sender's time; records the Recv with the actual source.
  asio::awaitable<Message> recv(Op op);
  /// All-gather, reduce-scatter, all-reduce, barrier, broadcast or reduce of `input` over op.group (the
  /// last two rooted at op.peer, a member: a broadcast gives every member the root's input and records a read
  /// on the root only; a reduce gives the root the sum and the others their input back, recording a write on
  /// the root only). Waits for every member; the start is the latest arrival. Throws CollectiveMismatchError
  /// when members disagree on the call (kind, layer, root) and SimError when the inputs do not combine or the
  /// root is not a member.
  asio::awaitable<Tensor> collective(Op op, Tensor input);

  /// Starts `program` as rank `rank`'s program.
  void spawn(int rank, Task program);
  /// Runs to the end. Throws the first error a program raised (as SimError unless it already was one),
  /// DeadlockError when ranks are left blocked, SimError when a sent message was never received.
  void run();
  /// What was executed so far.
  const Trace& trace() const { return trace_; }

  /// A rank left waiting when the run stopped: since when, in which op, and for what.
  struct BlockedRank {
    int rank = 0;
    Time since = 0;      ///< when it began to wait
    std::string op;      ///< the op it waits in, with its source ("receive (ddp.cpp:31)")
    std::string detail;  ///< what it waits for ("waiting for a message from rank 1")
    int stream = 0;      ///< the stream it waits on (the stream engine lists one per blocked stream of a rank)
    /// "op: detail", as a timeline mark's tooltip gives it.
    std::string what() const { return op + ": " + detail; }
  };
  /// The ranks that have not finished and wait in a primitive, in rank order (after a deadlock, what the
  /// report lists; after another rank's error, those still waiting: a rank whose wait was met, e.g. in a
  /// collective the last member completed, is not listed); empty when every rank finished.
  std::vector<BlockedRank> blocked_ranks() const;
  /// Calls `f` with every timed op as it is recorded, in each rank's program order (after its memory sample).
  void set_op_observer(std::function<void(const Op&)> f) { observer_ = std::move(f); }

 private:
  struct Blocked {
    Op op;
    Time since = 0;
    std::vector<int> waits_for;  // for a collective: computed when a report needs it (see missing_members)
    std::string detail;
    int group = -1;              // collective: its group and call number
    std::uint64_t seq = 0;
    bool any_source = false;     // a receive from any source: waits for every other rank (waits_for empty)
  };
  struct RankState {
    explicit RankState(const CostModel& c) : ledger(c) {}
    Time clock = 0;
    MemoryLedger ledger;
    Waiter waiter;
    std::optional<Blocked> blocked;
    bool started = false;
    bool finished = false;
  };
  struct Mailbox {
    std::deque<Message> messages;
    std::vector<int> blocked_senders;
    bool receiver_waiting = false;
  };
  struct Arrival {
    Op op;
    Tensor input;
    Time clock = 0;
  };
  struct Call {
    std::vector<std::optional<Arrival>> arrivals;  // by member index
    std::vector<Tensor> results;
    int arrived = 0;
    bool done = false;
  };
  struct Group {
    std::vector<int> members;
    std::map<int, int> index_of;
    std::vector<std::uint64_t> next_seq;  // per member
    std::map<std::uint64_t, Call> calls;
    AllToAllGroup all_to_all;  // its all-to-alls' dispatches waiting for their combines
  };

  asio::awaitable<void> sync(int rank);
  asio::awaitable<void> block(int rank, Blocked b);
  // Wakes a blocked rank; `satisfied`: what it waited for happened, so it no longer counts as blocked.
  void resume(int rank, bool satisfied);
  void record(int rank, Op op, int group_size);
  void complete(Group& g, std::uint64_t seq, Call& call);
  // The deadlock message: the blocked ranks (the first few in detail, then a count) and a wait-for cycle.
  std::string deadlock_report() const;
  // The members of a blocked collective's group that have not arrived at its call.
  std::vector<int> missing_members(const Blocked& b) const;
  // A cycle of waits among the blocked ranks, first rank repeated at the end; empty when there is none.
  // Iterative, linear in the ranks and group members.
  std::vector<int> wait_for_cycle(const std::vector<int>& blocked) const;
  void check_rank(int rank, const char* what) const;

  WorldOptions options_;
  const CostModel* cost_;
  std::vector<RankState> ranks_;
  std::vector<Mailbox> mailboxes_;
  std::vector<Group> groups_;
  Trace trace_;
  std::function<void(const Op&)> observer_;
  std::exception_ptr error_;
  std::unique_ptr<Kernel> kernel_;  // last: destroyed first, while the state its coroutines use is alive
};

/// Formats a time in seconds without trailing zeros: "2.2", "17".
std::string format_time(Time t);
/// Formats a memory amount without a fractional part when whole: "2600000", "16384.5".
std::string format_memory(double m);

}  // namespace trainsim
