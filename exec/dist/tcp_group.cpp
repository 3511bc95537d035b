#include "exec/dist/tcp_group.h"

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "exec/comm.h"
#include "exec/deadline.h"
#include "exec/dist/rendezvous_internal.h"

namespace trainsim::exec::dist {

TcpGroup::TcpGroup(int rank, int world_size, int local_rank, const RendezvousOptions& options)
    : rank_(rank), world_(world_size), local_rank_(local_rank), options_(options), heartbeat_(io_) {}

TcpGroup::~TcpGroup() {
  if (thread_.joinable()) {
    close();
    work_.reset();
    io_.stop();
    thread_.join();
  }
  for (auto& l : links_)
    if (l) l->close();
}

void TcpGroup::adopt(std::vector<std::shared_ptr<Link>> links, const JobId& id) {
  links_ = std::move(links);
  job_id_ = id;
  for (auto& l : links_) {
    if (!l) continue;
    ++open_links_;
    Link* raw = l.get();
    l->set_handlers([this, raw](Frame&& f) { on_frame(*raw, std::move(f)); },
                    [this, raw](const std::string& why) { on_end(*raw, why); });
  }
}

void TcpGroup::run() {
  for (auto& l : links_)
    if (l && l->ended()) on_end(*l, "it closed the connection as the rendezvous ended");
  work_.emplace(io_.get_executor());
  io_.restart();
  asio::post(io_, [this] { tick(); });
  thread_ = std::thread([this] {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {  // (a handler's bug, or memory): the job fails, the process does not abort
        try {
          fail(fmt::format("rank {}: the transport failed: {}", rank_, e.what()));
        } catch (...) {  // (no memory for the message: nothing may leave this thread, std::terminate)
          try {
            local_fail("out of memory");
          } catch (...) {
          }
        }
      }
    }
  });
}

void TcpGroup::tick() {
  const auto now = Clock::now();
  const Clock::duration silence = duration_from_seconds(options_.silence_seconds);
  for (auto& l : links_) {
    if (!l || l->ended()) continue;
    Frame hb;
    hb.kind = kHeartbeat, hb.src = rank_, hb.dst = l->rank;
    l->send(std::move(hb));
    if (!closing_ && !l->said_bye && now - l->last_heard() > silence)
      fail(fmt::format("rank {} ({}) has sent nothing for {:g} s, not even a heartbeat: it hangs, or the network "
                       "between it and rank {} is down",
                       l->rank, l->peer(), options_.silence_seconds, rank_));
  }
  heartbeat_.expires_after(std::max<Clock::duration>(duration_from_seconds(options_.heartbeat_seconds),
                                                     std::chrono::milliseconds(10)));
  heartbeat_.async_wait([this](boost::system::error_code ec) {
    if (!ec) tick();
  });
}

Link& TcpGroup::route(int dst) {
  if (dst < 0 || dst >= world_) throw CommError(fmt::format("rank {}: no rank {} in a job of {}", rank_, dst, world_));
  return *links_[rank_ == 0 ? dst : 0];
}

void TcpGroup::post(Frame f) {
  f.src = rank_;
  if (f.dst == rank_) {
    asio::post(io_, [this, f = std::move(f)]() mutable { deliver(std::move(f)); });
    return;
  }
  route(f.dst).send(std::move(f));
}

void TcpGroup::deliver(Frame&& f) {
  std::lock_guard h(handler_mu_);
  if (!frame_handler_) {
    std::lock_guard lock(mu_);
    early_.push_back(std::move(f));
    return;
  }
  frame_handler_(std::move(f));
}

void TcpGroup::set_frame_handler(std::function<void(Frame&&)> handler) {
  std::lock_guard h(handler_mu_);
  frame_handler_ = std::move(handler);
  if (!frame_handler_) return;
  std::deque<Frame> early;
  {
    std::lock_guard lock(mu_);
    early.swap(early_);
  }
  for (Frame& f : early) frame_handler_(std::move(f));
}

void TcpGroup::on_frame(Link& from, Frame&& f) {
  // Rank 0 knows who sent a frame (the connection proved its rank); the header's word for it does not count.
  if (rank_ == 0) f.src = from.rank;
  switch (f.kind) {
    case kHeartbeat:
    case kBye:
      return;
    case kError: {
      const std::string why = peer_text(f.tag, 2000);  // one line, bounded, whatever the peer sent
      if (rank_ == 0)  // tell the others, before this rank's own handler may start closing the links
        for (auto& l : links_)
          if (l && l.get() != &from) {
            Frame e;
            e.kind = kError, e.tag = why;
            l->send(std::move(e));
          }
      local_fail(why);
      return;
    }
    case kGather: {
      std::lock_guard lock(mu_);
      auto& slots = gathers_[f.seq];
      slots.resize(world_);
      if (from.rank >= 0 && from.rank < world_) slots[from.rank] = std::string(f.data.begin(), f.data.end());
      cv_.notify_all();
      return;
    }
    case kBroadcast: {
      std::lock_guard lock(mu_);
      broadcasts_[f.seq] = std::string(f.data.begin(), f.data.end());
      cv_.notify_all();
      return;
    }
    default:
      break;
  }
  if (f.kind < Frame::kFirstUserKind) return;  // a rendezvous frame arriving late: nothing to do
  if (f.dst == rank_) return deliver(std::move(f));
  if (rank_ == 0 && f.dst > 0 && f.dst < world_) return links_[f.dst]->send(std::move(f));  // relay
  fail(fmt::format("rank {} got a frame for rank {} from {}: the transport is confused", rank_, f.dst, from.peer()));
}

void TcpGroup::on_end(Link& link, const std::string& why) {
  {
    std::lock_guard lock(mu_);
    --open_links_;
    cv_.notify_all();
  }
  if (closing_ || link.said_bye) return;
  if (rank_ == 0)
    fail(fmt::format("rank {} ({}) is gone: its connection ended ({}) in the middle of the job; its process died or "
                     "was killed",
                     link.rank, link.peer(), why));
  else
    local_fail(fmt::format("{} is gone: the connection to it ended ({}) in the middle of the job; its process "
                           "died or was killed",
                           link.peer(), why));
}

void TcpGroup::local_fail(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (!failed_.empty()) return;
    failed_ = why.empty() ? "the job failed" : why;
  }
  cv_.notify_all();
  std::lock_guard h(handler_mu_);
  if (failure_handler_) failure_handler_(why);
}

void TcpGroup::fail(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (!failed_.empty()) return;
  }
  // The others are told first: the local failure handler wakes this process's main thread, which may close
  // the group at once, and a link drops what is queued after its goodbye (a rank then waited for its
  // timeout instead of hearing of the failure).
  for (auto& l : links_)
    if (l) {
      Frame e;
      e.kind = kError, e.src = rank_, e.tag = why;
      l->send(std::move(e));
    }
  local_fail(why);
}

void TcpGroup::set_failure_handler(std::function<void(const std::string&)> handler) {
  std::lock_guard h(handler_mu_);
  failure_handler_ = std::move(handler);
  std::string why = failure();
  if (failure_handler_ && !why.empty()) failure_handler_(why);
}

std::string TcpGroup::failure() const {
  std::lock_guard lock(mu_);
  return failed_;
}

template <typename Pred>
void TcpGroup::wait(std::unique_lock<std::mutex>& lock, double timeout_seconds, Pred done,
                    const std::function<std::string()>& what) {
  const auto deadline = deadline_after(timeout_seconds);
  while (failed_.empty() && !done()) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && failed_.empty() && !done()) {
      std::string why = fmt::format("rank {}: timed out after {:g} s waiting for {}", rank_, timeout_seconds, what());
      lock.unlock();
      fail(why);
      throw CommError(why);
    }
  }
  if (!done()) throw CommError(failed_);
}

std::vector<std::string> TcpGroup::gather(const std::string& blob, double timeout_seconds) {
  std::unique_lock lock(mu_);
  if (!failed_.empty()) throw CommError(failed_);
  const std::uint64_t seq = gather_seq_++;
  if (rank_ != 0) {
    lock.unlock();
    Frame f;
    f.kind = kGather, f.src = rank_, f.dst = 0, f.seq = seq;
    f.data.assign(blob.begin(), blob.end());
    links_[0]->send(std::move(f));
    return {};
  }
  auto& slots = gathers_[seq];
  slots.resize(world_);
  slots[0] = blob;
  auto complete = [&] {
    auto& s = gathers_[seq];
    return std::all_of(s.begin(), s.end(), [](const auto& x) { return x.has_value(); });
  };
  wait(lock, timeout_seconds, complete, [&] {
    std::string missing;
    auto& s = gathers_[seq];
    for (int r = 0; r < world_; ++r)
      if (!s[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    return fmt::format("the results of rank(s) {}", missing);
  });
  std::vector<std::string> out;
  for (auto& x : gathers_[seq]) out.push_back(std::move(*x));
  gathers_.erase(seq);
  return out;
}

std::string TcpGroup::broadcast(const std::string& blob, double timeout_seconds) {
  std::unique_lock lock(mu_);
  if (!failed_.empty()) throw CommError(failed_);
  const std::uint64_t seq = broadcast_seq_++;
  if (rank_ == 0) {
    lock.unlock();
    for (auto& l : links_)
      if (l) {
        Frame f;
        f.kind = kBroadcast, f.src = 0, f.dst = l->rank, f.seq = seq;
        f.data.assign(blob.begin(), blob.end());
        l->send(std::move(f));
      }
    return blob;
  }
  wait(lock, timeout_seconds, [&] { return broadcasts_.count(seq) > 0; }, [] { return std::string("rank 0's result"); });
  std::string out = std::move(broadcasts_[seq]);
  broadcasts_.erase(seq);
  return out;
}

void TcpGroup::close() {
  if (closed_.exchange(true)) return;
  closing_ = true;
  for (auto& l : links_) {
    if (!l) continue;
    // Goodbye first: the peer may not have read everything yet, and the end of the connection that follows
    // must not look like a death to it.
    Frame bye;
    bye.kind = kBye, bye.src = rank_, bye.dst = l->rank;
    l->send(std::move(bye));
    l->finish_sending();
  }
  // Wait for the peers to close their ends too: closing a socket with unread data resets the connection,
  // which could cost a peer the last frames sent to it.
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::seconds(5), [&] { return open_links_ == 0; });
}

}  // namespace trainsim::exec::dist
