// The ProcessGroup a TCP rendezvous leaves behind (exec/dist/rendezvous.h): rank 0 holds a connection to
// every other rank, the others one to rank 0 (a star: frames between two other ranks go through rank 0, in
// order). One thread runs the connections' io_context; heartbeats every `heartbeat_seconds`, and a peer
// silent for `silence_seconds`, or whose connection ends before it said goodbye, fails the job naming it.
// Every frame carries its connection's MAC (exec/dist/link.h); rank 0 relays a frame under the rank its
// connection proved, whatever the header says; an error text from a peer is escaped and bounded.
// Internal to exec/dist: made by rendezvous().
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "exec/dist/link.h"
#include "exec/dist/rendezvous.h"

namespace trainsim::exec::dist {

class TcpGroup final : public ProcessGroup {
 public:
  TcpGroup(int rank, int world_size, int local_rank, const RendezvousOptions& options);
  /// close() if it was not called; stops the thread.
  ~TcpGroup() override;

  /// The io_context the rendezvous runs its connections on (in its own thread, before start()).
  asio::io_context& io() { return io_; }
  /// Takes over the rendezvous's started connections (rank 0: indexed by rank, [0] empty; the others: [0]
  /// only): their frames come here from now on. Call while no thread runs io().
  void adopt(std::vector<std::shared_ptr<Link>> links, const JobId& id);
  /// Starts the thread serving the connections and the heartbeats.
  void run();

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  const JobId& job_id() const override { return job_id_; }
  void post(Frame f) override;
  void set_frame_handler(std::function<void(Frame&&)> handler) override;
  std::vector<std::string> gather(const std::string& blob, double timeout_seconds) override;
  std::string broadcast(const std::string& blob, double timeout_seconds) override;
  void fail(const std::string& why) override;
  void set_failure_handler(std::function<void(const std::string&)> handler) override;
  std::string failure() const override;
  void close() override;

 private:
  using Clock = std::chrono::steady_clock;
  void on_frame(Link& from, Frame&& f);            // io thread
  void on_end(Link& link, const std::string& why);  // io thread
  void deliver(Frame&& f);
  void local_fail(const std::string& why);
  void tick();
  Link& route(int dst);
  template <typename Pred>
  void wait(std::unique_lock<std::mutex>& lock, double timeout_seconds, Pred done, const std::function<std::string()>& what);

  int rank_, world_, local_rank_;
  RendezvousOptions options_;
  JobId job_id_{};
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  asio::steady_timer heartbeat_;
  std::vector<std::shared_ptr<Link>> links_;
  std::thread thread_;
  std::atomic<bool> closing_{false}, closed_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string failed_;
  std::uint64_t gather_seq_ = 0, broadcast_seq_ = 0;
  std::map<std::uint64_t, std::vector<std::optional<std::string>>> gathers_;  // rank 0
  std::map<std::uint64_t, std::string> broadcasts_;                          // the others
  std::deque<Frame> early_;  // frames for the communicator before it set its handler
  int open_links_ = 0;

  std::recursive_mutex handler_mu_;  // held while a handler runs, so that clearing one waits for it
  std::function<void(Frame&&)> frame_handler_;
  std::function<void(const std::string&)> failure_handler_;
};

}  // namespace trainsim::exec::dist
