// The CPU backend's communicator when every rank is its own process (exec/process_group.h): messages and
// collectives travel as Frames over the rendezvous's TCP connections, with the same NCCL semantics and the
// same bits as the threaded ThreadHub (exec/cpu/thread_comm.h). Point-to-point messages go from the sender's
// process to the receiver's (through rank 0: the transport is a star) and are matched in order per
// (source, destination). A collective's members send their inputs to rank 0, which computes each member's
// result exactly as ThreadHub does (sums in member order, starting from member 0's value) and sends it back;
// collectives are matched per group by their sequence number, and a member calling another kind or size
// than the others fails the job. A broadcast's and a reduce's tag names the root ("broadcast 3"), so members
// naming different roots fail it too; a broadcast's input comes from the root only, a reduce's sum goes to the
// root only. Simple and correct, not fast: for tests and small runs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "exec/comm.h"
#include "exec/process_group.h"

namespace trainsim::exec {

class TcpHub final : public CommHub {
 public:
  /// This process's rank over `processes`; `groups[0]` must be every rank in order. A call waits at most
  /// `timeout_seconds`. Throws std::invalid_argument for a bad group.
  TcpHub(ProcessGroup& processes, std::vector<std::vector<int>> groups, double timeout_seconds);
  /// Stops taking frames from the process group.
  ~TcpHub() override;
  /// This process's rank only; throws std::invalid_argument for another.
  std::unique_ptr<Communicator> communicator(int rank) override;
  /// Ends this process's waiting and later calls (the job runner tells the other processes).
  void abort(const std::string& why) override;

 private:
  friend class TcpCommunicator;
  struct Pending {  // rank 0: a collective being collected
    std::string what;
    std::uint64_t count = 0;
    std::vector<std::optional<std::vector<unsigned char>>> inputs;
    int arrived = 0;
  };
  using Clock = std::chrono::steady_clock;
  void on_frame(Frame&& f);  // the transport's thread
  std::string coordinate(Frame&& f);  // rank 0; returns an error, "" when fine
  void finish(int group, std::uint64_t seq, Pending& p);

  ProcessGroup& pg_;
  std::vector<std::vector<int>> groups_;
  std::chrono::duration<double> timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, std::deque<Frame>> inbox_;                        // point-to-point, by source
  std::map<std::pair<int, std::uint64_t>, Frame> results_;        // collective results, by (group, seq)
  std::map<std::pair<int, std::uint64_t>, Pending> pending_;      // rank 0
  bool aborted_ = false;
  std::string abort_reason_;
};

}  // namespace trainsim::exec
