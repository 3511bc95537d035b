// The CPU backend's communicator: ranks are threads of one process, and a ThreadHub carries their messages
// and collectives with NCCL's semantics (exec/comm.h). Sums run in member order, every member computing its
// own result from every member's input, so results are bitwise the same on all members and in every run.
// A call waits at most `timeout` seconds; abort() ends every waiting and later call with CommError.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec/comm.h"

namespace trainsim::exec {

/// What the ranks of one process share.
class ThreadHub final : public CommHub {
 public:
  /// `groups[0]` must be every rank in order. Throws std::invalid_argument for a bad group.
  ThreadHub(int world_size, std::vector<std::vector<int>> groups, double timeout_seconds);
  ~ThreadHub() override;
  std::unique_ptr<Communicator> communicator(int rank) override;
  void abort(const std::string& why) override;

 private:
  friend class ThreadCommunicator;
  struct Message {
    std::vector<unsigned char> data;
    std::string tag;
  };
  struct Call {
    std::string what;
    std::size_t count = 0;
    std::vector<const void*> inputs;
    std::vector<bool> present;
    int arrived = 0, departed = 0;
  };
  using Clock = std::chrono::steady_clock;

  int world_;
  std::vector<std::vector<int>> groups_;
  std::chrono::duration<double> timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, int>, std::deque<Message>> channels_;      // (src, dst)
  std::map<std::pair<int, std::uint64_t>, std::shared_ptr<Call>> calls_;  // (group, sequence)
  bool aborted_ = false;
  std::string abort_reason_;
};

}  // namespace trainsim::exec
