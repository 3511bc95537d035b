#include "exec/cpu/thread_comm.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "exec/deadline.h"

namespace trainsim::exec {

ThreadHub::ThreadHub(int world_size, std::vector<std::vector<int>> groups, double timeout_seconds)
    : world_(world_size), groups_(std::move(groups)), timeout_(timeout_seconds) {
  if (groups_.empty()) throw std::invalid_argument("the communicator needs group 0 (every rank)");
  for (const auto& g : groups_) {
    if (g.empty()) throw std::invalid_argument("a communicator group is empty");
    for (int r : g)
      if (r < 0 || r >= world_) throw std::invalid_argument(fmt::format("group member {} is not a rank", r));
  }
}

ThreadHub::~ThreadHub() = default;

void ThreadHub::abort(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = why;
  }
  cv_.notify_all();
}

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadHub& hub, int rank) : hub_(hub), rank_(rank), next_seq_(hub.groups_.size(), 0) {}

  int rank() const override { return rank_; }
  int world_size() const override { return hub_.world_; }

  void send(StreamContext&, const void* data, std::size_t bytes, int peer, const std::string& tag) override {
    check_peer(peer, "send to");
    ThreadHub::Message m;
    m.data.assign(static_cast<const unsigned char*>(data), static_cast<const unsigned char*>(data) + bytes);
    m.tag = tag;
    {
      std::lock_guard lock(hub_.mu_);
      if (hub_.aborted_) throw CommError(hub_.abort_reason_);
      hub_.channels_[{rank_, peer}].push_back(std::move(m));
    }
    hub_.cv_.notify_all();
  }

  void recv(StreamContext&, void* data, std::size_t bytes, int peer, const std::string& tag) override {
    check_peer(peer, "recv from");
    std::unique_lock lock(hub_.mu_);
    auto& q = hub_.channels_[{peer, rank_}];
    wait(lock, [&] { return !q.empty(); }, [&] { return fmt::format("recv of {} from rank {}", tag, peer); });
    ThreadHub::Message m = std::move(q.front());
    q.pop_front();
    lock.unlock();
    check_received(rank_, peer, tag, bytes, m.tag, m.data.size());
    std::memcpy(data, m.data.data(), bytes);
  }

  void all_gather(StreamContext&, const float* in, float* out, std::size_t count, int group) override {
    collective(group, "all-gather", count, in, [&](const std::vector<const void*>& inputs, int) {
      for (std::size_t j = 0; j < inputs.size(); ++j)
        std::memcpy(out + j * count, inputs[j], count * sizeof(float));
    });
  }

  void reduce_scatter(StreamContext&, const float* in, float* out, std::size_t count, int group) override {
    collective(group, "reduce-scatter", count, in, [&](const std::vector<const void*>& inputs, int me) {
      sum_into(inputs, out, static_cast<std::size_t>(me) * count, count);
    });
  }

  void all_reduce(StreamContext&, const float* in, float* out, std::size_t count, int group) override {
    reduce_all<float>(in, out, count, group);
  }
  void all_reduce(StreamContext&, const double* in, double* out, std::size_t count, int group) override {
    reduce_all<double>(in, out, count, group);
  }

  void barrier(StreamContext&, int group) override {
    collective(group, "barrier", 0, nullptr, [](const std::vector<const void*>&, int) {});
  }

  void broadcast(StreamContext&, const float* in, float* out, std::size_t count, int root, int group) override {
    const int r = root_index(group, root, "broadcast");
    const bool is_root = r == member_index(hub_.groups_, group, rank_, "broadcast");
    const std::string what = fmt::format("broadcast from rank {}", root);
    collective(group, what.c_str(), count, is_root ? in : nullptr, [&](const std::vector<const void*>& inputs, int me) {
      if (me != r && count) std::memcpy(out, inputs[r], count * sizeof(float));
    });
    if (is_root && out != in && count) std::memcpy(out, in, count * sizeof(float));
  }

  void reduce(StreamContext&, const float* in, float* out, std::size_t count, int root, int group) override {
    const int r = root_index(group, root, "reduce");
    const std::string what = fmt::format("reduce to rank {}", root);
    // out may be in on the root: every member reads every input before anyone departs, so sum into a copy
    std::vector<float> acc;
    collective(group, what.c_str(), count, in, [&](const std::vector<const void*>& inputs, int me) {
      if (me != r) return;
      acc.resize(count);
      sum_into<float>(inputs, acc.data(), 0, count);
    });
    if (!acc.empty()) std::memcpy(out, acc.data(), count * sizeof(float));
  }

  void all_to_all(StreamContext&, const float* in, const std::vector<std::size_t>& send_counts, float* out,
                  const std::vector<std::size_t>& recv_counts, int group) override {
    struct Part {
      const float* in;
      const std::vector<std::size_t>* send;
    } mine{in, &send_counts};
    member_index(hub_.groups_, group, rank_, "all-to-all");  // (an unknown group or a non-member, named)
    check_all_to_all_counts(rank_, group, hub_.groups_[group].size(), send_counts.size(), recv_counts.size());
    std::optional<CommError> error;  // (every member checked its own counts' number before publishing them)
    collective(group, "all-to-all", 0, &mine, [&](const std::vector<const void*>& inputs, int me) {
      std::size_t at = 0;
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        const Part& p = *static_cast<const Part*>(inputs[i]);
        std::size_t offset = 0;
        for (int j = 0; j < me; ++j) offset += (*p.send)[j];
        if ((*p.send)[me] != recv_counts[i]) {
          error = all_to_all_mismatch(rank_, group, recv_counts[i], i, (*p.send)[me]);
          return;
        }
        if (recv_counts[i]) std::memcpy(out + at, p.in + offset, recv_counts[i] * sizeof(float));
        at += recv_counts[i];
      }
    });
    if (error) throw *error;
  }

 private:
  template <typename T>
  void reduce_all(const T* in, T* out, std::size_t count, int group) {
    // out may be in: every member reads every input before anyone departs, so sum into a private copy first
    std::vector<T> acc(count);
    collective(group, "all-reduce", count * sizeof(T), in, [&](const std::vector<const void*>& inputs, int) {
      sum_into<T>(inputs, acc.data(), 0, count);
    });
    std::memcpy(out, acc.data(), count * sizeof(T));
  }

  template <typename T = float>
  static void sum_into(const std::vector<const void*>& inputs, T* out, std::size_t offset, std::size_t count) {
    const T* first = static_cast<const T*>(inputs[0]) + offset;
    std::copy(first, first + count, out);
    for (std::size_t j = 1; j < inputs.size(); ++j) {
      const T* x = static_cast<const T*>(inputs[j]) + offset;
      for (std::size_t e = 0; e < count; ++e) out[e] += x[e];
    }
  }

  // The member index of `root` in `group`; CommError when it is not a member.
  int root_index(int group, int root, const char* what) const {
    member_index(hub_.groups_, group, rank_, what);  // (an unknown group or a non-member, named)
    const auto& m = hub_.groups_[group];
    const auto it = std::find(m.begin(), m.end(), root);
    if (it == m.end())
      throw CommError(fmt::format("rank {}: {} over group {} from root {}, which is not in it", rank_, what, group, root));
    return static_cast<int>(it - m.begin());
  }

  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= hub_.world_ || peer == rank_)
      throw CommError(fmt::format("rank {}: {} rank {}: no such peer", rank_, what, peer));
  }

  // Waits for `done` under `lock`; throws CommError on abort or after the timeout (and then aborts the hub).
  template <typename Pred, typename Describe>
  void wait(std::unique_lock<std::mutex>& lock, Pred done, Describe describe) {
    const auto deadline = deadline_after(hub_.timeout_.count());  // (saturates: --timeout 1e300 waits, not fails)
    while (!hub_.aborted_ && !done()) {
      if (hub_.cv_.wait_until(lock, deadline) == std::cv_status::timeout && !hub_.aborted_ && !done()) {
        std::string why = fmt::format("rank {}: timed out after {:g} s waiting for the {}", rank_, hub_.timeout_.count(),
                                      describe());
        hub_.aborted_ = true;
        hub_.abort_reason_ = why;
        hub_.cv_.notify_all();
        throw CommError(why);
      }
    }
    if (hub_.aborted_ && !done()) throw CommError(hub_.abort_reason_);
  }

  template <typename F>
  void collective(int group, const char* what, std::size_t count, const void* in, F compute) {
    const int me = member_index(hub_.groups_, group, rank_, what);
    const std::vector<int>& members = hub_.groups_[group];
    const int n = static_cast<int>(members.size());
    const std::pair<int, std::uint64_t> key{group, next_seq_[group]++};
    std::shared_ptr<ThreadHub::Call> call;
    {
      std::unique_lock lock(hub_.mu_);
      if (hub_.aborted_) throw CommError(hub_.abort_reason_);
      auto& slot = hub_.calls_[key];
      if (!slot) {
        slot = std::make_shared<ThreadHub::Call>();
        slot->what = what, slot->count = count;
        slot->inputs.assign(n, nullptr), slot->present.assign(n, false);
      }
      call = slot;
      if (call->what != what || call->count != count)
        throw CommError(fmt::format("rank {}: call {} over group {} is a {} of {} here but a {} of {} on another member",
                                    rank_, key.second, group, what, count, call->what, call->count));
      call->inputs[me] = in, call->present[me] = true;
      ++call->arrived;
      hub_.cv_.notify_all();
      wait(lock, [&] { return call->arrived == n; }, [&] {
        std::string missing;
        for (int j = 0; j < n; ++j)
          if (!call->present[j]) missing += (missing.empty() ? "" : ", ") + std::to_string(members[j]);
        return fmt::format("{} over group {} (ranks {} have not arrived)", what, group, missing);
      });
    }
    compute(call->inputs, me);
    std::unique_lock lock(hub_.mu_);
    ++call->departed;
    hub_.cv_.notify_all();
    wait(lock, [&] { return call->departed == n; }, [&] { return fmt::format("{} over group {} to finish", what, group); });
    hub_.calls_.erase(key);
  }

  ThreadHub& hub_;
  int rank_;
  std::vector<std::uint64_t> next_seq_;
};

std::unique_ptr<Communicator> ThreadHub::communicator(int rank) {
  if (rank < 0 || rank >= world_) throw std::invalid_argument(fmt::format("rank {} is out of range", rank));
  return std::make_unique<ThreadCommunicator>(*this, rank);
}

}  // namespace trainsim::exec
