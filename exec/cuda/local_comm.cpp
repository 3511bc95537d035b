#include "exec/cuda/local_comm.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_kernels.h"

namespace trainsim::exec::cuda {

namespace {

using Clock = std::chrono::steady_clock;

cudaEvent_t record(cudaStream_t s) {
  cudaEvent_t ev;
  TS_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  TS_CUDA(cudaEventRecord(ev, s));
  return ev;
}

cudaStream_t stream_of(StreamContext& s) {
  auto* st = static_cast<cudaStream_t>(s.native());
  if (!st) throw CommError("the cuda communicator needs a CUDA stream (the device is not a CudaDevice)");
  return st;
}

class LocalHub;

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(LocalHub& hub, int rank);
  int rank() const override { return rank_; }
  int world_size() const override;
  void send(StreamContext& s, const void* data, std::size_t bytes, int peer, const std::string& tag) override;
  void recv(StreamContext& s, void* data, std::size_t bytes, int peer, const std::string& tag) override;
  void all_gather(StreamContext& s, const float* in, float* out, std::size_t count, int group) override;
  void reduce_scatter(StreamContext& s, const float* in, float* out, std::size_t count, int group) override;
  void all_reduce(StreamContext& s, const float* in, float* out, std::size_t count, int group) override;
  void all_reduce(StreamContext& s, const double* in, double* out, std::size_t count, int group) override;
  void barrier(StreamContext& s, int group) override;
  void broadcast(StreamContext& s, const float* in, float* out, std::size_t count, int root, int group) override;
  void reduce(StreamContext& s, const float* in, float* out, std::size_t count, int root, int group) override;
  void all_to_all(StreamContext& s, const float* in, const std::vector<std::size_t>& send_counts, float* out,
                  const std::vector<std::size_t>& recv_counts, int group) override;

 private:
  enum class Kind { AllGather, ReduceScatter, AllReduceF, AllReduceD, Barrier, Broadcast, Reduce, AllToAll };
  // `root`: a broadcast's or reduce's root, a global rank (-1 for the others). All-to-all: each member's send
  // counts (`send`, published with its input) and this member's receive counts (`recv`).
  void collective(StreamContext& s, Kind kind, const void* in, void* out, std::size_t count, int group, int root = -1,
                  const std::vector<std::size_t>* send = nullptr, const std::vector<std::size_t>* recv = nullptr);
  template <typename Pred, typename Describe>
  void wait(std::unique_lock<std::mutex>& lock, Pred done, Describe describe);

  LocalHub& hub_;
  int rank_;
  std::vector<std::uint64_t> next_seq_;
};

class LocalHub final : public CommHub {
 public:
  LocalHub(int world, std::vector<std::vector<int>> groups, double timeout)
      : world_(world), groups_(std::move(groups)), timeout_(timeout) {
    if (groups_.empty()) throw std::invalid_argument("the communicator needs group 0 (every rank)");
    for (const auto& g : groups_) {
      if (g.empty()) throw std::invalid_argument("a communicator group is empty");
      for (int r : g)
        if (r < 0 || r >= world_) throw std::invalid_argument(fmt::format("group member {} is not a rank", r));
    }
  }
  ~LocalHub() override {
    for (auto& [key, q] : channels_)
      for (Message& m : q) {  // never received: wait for the copy, then free
        cudaEventSynchronize(m.ready);
        cudaEventDestroy(m.ready);
        cudaFree(m.staging);
      }
  }
  std::unique_ptr<Communicator> communicator(int rank) override {
    if (rank < 0 || rank >= world_) throw std::invalid_argument(fmt::format("rank {} is out of range", rank));
    return std::make_unique<LocalCommunicator>(*this, rank);
  }
  void abort(const std::string& why) override {
    {
      std::lock_guard lock(mu_);
      if (aborted_) return;
      aborted_ = true;
      abort_reason_ = why;
    }
    cv_.notify_all();
  }

 private:
  friend class LocalCommunicator;
  struct Message {
    void* staging = nullptr;
    std::size_t bytes = 0;
    std::string tag;
    cudaEvent_t ready = nullptr;
  };
  struct Call {
    int kind = 0;
    int root = -1;
    std::size_t count = 0;
    std::vector<const void*> inputs;
    std::vector<const std::vector<std::size_t>*> sends;  // all-to-all: each member's send counts
    std::vector<cudaEvent_t> ready, read;
    std::vector<bool> present;
    int arrived = 0, finished = 0, departed = 0;
  };
  int world_;
  std::vector<std::vector<int>> groups_;
  std::chrono::duration<double> timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, int>, std::deque<Message>> channels_;
  std::map<std::pair<int, std::uint64_t>, std::shared_ptr<Call>> calls_;
  bool aborted_ = false;
  std::string abort_reason_;
};

LocalCommunicator::LocalCommunicator(LocalHub& hub, int rank) : hub_(hub), rank_(rank), next_seq_(hub.groups_.size(), 0) {}

int LocalCommunicator::world_size() const { return hub_.world_; }

template <typename Pred, typename Describe>
void LocalCommunicator::wait(std::unique_lock<std::mutex>& lock, Pred done, Describe describe) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(hub_.timeout_);
  while (!hub_.aborted_ && !done()) {
    if (hub_.cv_.wait_until(lock, deadline) == std::cv_status::timeout && !hub_.aborted_ && !done()) {
      std::string why =
          fmt::format("rank {}: timed out after {:g} s waiting for the {}", rank_, hub_.timeout_.count(), describe());
      hub_.aborted_ = true;
      hub_.abort_reason_ = why;
      hub_.cv_.notify_all();
      throw CommError(why);
    }
  }
  if (hub_.aborted_ && !done()) throw CommError(hub_.abort_reason_);
}

void LocalCommunicator::send(StreamContext& s, const void* data, std::size_t bytes, int peer, const std::string& tag) {
  if (peer < 0 || peer >= hub_.world_ || peer == rank_)
    throw CommError(fmt::format("rank {}: send to rank {}: no such peer", rank_, peer));
  cudaStream_t st = stream_of(s);
  LocalHub::Message m;
  m.bytes = bytes, m.tag = tag;
  if (bytes) {
    TS_CUDA(cudaMallocAsync(&m.staging, bytes, st));
    TS_CUDA(cudaMemcpyAsync(m.staging, data, bytes, cudaMemcpyDeviceToDevice, st));
  }
  m.ready = record(st);
  {
    std::lock_guard lock(hub_.mu_);
    if (hub_.aborted_) {
      cudaEventDestroy(m.ready);
      if (m.staging) cudaFreeAsync(m.staging, st);
      throw CommError(hub_.abort_reason_);
    }
    hub_.channels_[{rank_, peer}].push_back(std::move(m));
  }
  hub_.cv_.notify_all();
}

void LocalCommunicator::recv(StreamContext& s, void* data, std::size_t bytes, int peer, const std::string& tag) {
  if (peer < 0 || peer >= hub_.world_ || peer == rank_)
    throw CommError(fmt::format("rank {}: recv from rank {}: no such peer", rank_, peer));
  cudaStream_t st = stream_of(s);
  std::unique_lock lock(hub_.mu_);
  auto& q = hub_.channels_[{peer, rank_}];
  wait(lock, [&] { return !q.empty(); }, [&] { return fmt::format("recv of {} from rank {}", tag, peer); });
  LocalHub::Message m = std::move(q.front());
  q.pop_front();
  lock.unlock();
  TS_CUDA(cudaStreamWaitEvent(st, m.ready, 0));
  cudaEventDestroy(m.ready);
  const bool match = m.tag == tag && m.bytes == bytes;
  if (match && bytes) TS_CUDA(cudaMemcpyAsync(data, m.staging, bytes, cudaMemcpyDeviceToDevice, st));
  if (m.staging) TS_CUDA(cudaFreeAsync(m.staging, st));
  if (!match) check_received(rank_, peer, tag, bytes, m.tag, m.bytes);
}

void LocalCommunicator::all_gather(StreamContext& s, const float* in, float* out, std::size_t count, int group) {
  collective(s, Kind::AllGather, in, out, count, group);
}
void LocalCommunicator::reduce_scatter(StreamContext& s, const float* in, float* out, std::size_t count, int group) {
  collective(s, Kind::ReduceScatter, in, out, count, group);
}
void LocalCommunicator::all_reduce(StreamContext& s, const float* in, float* out, std::size_t count, int group) {
  collective(s, Kind::AllReduceF, in, out, count, group);
}
void LocalCommunicator::all_reduce(StreamContext& s, const double* in, double* out, std::size_t count, int group) {
  collective(s, Kind::AllReduceD, in, out, count, group);
}
void LocalCommunicator::barrier(StreamContext& s, int group) { collective(s, Kind::Barrier, nullptr, nullptr, 0, group); }
void LocalCommunicator::broadcast(StreamContext& s, const float* in, float* out, std::size_t count, int root, int group) {
  collective(s, Kind::Broadcast, root == rank_ ? in : nullptr, out, count, group, root);
}
void LocalCommunicator::reduce(StreamContext& s, const float* in, float* out, std::size_t count, int root, int group) {
  collective(s, Kind::Reduce, in, out, count, group, root);
}

void LocalCommunicator::all_to_all(StreamContext& s, const float* in, const std::vector<std::size_t>& send_counts,
                                   float* out, const std::vector<std::size_t>& recv_counts, int group) {
  member_index(hub_.groups_, group, rank_, "all-to-all");
  check_all_to_all_counts(rank_, group, hub_.groups_[group].size(), send_counts.size(), recv_counts.size());
  collective(s, Kind::AllToAll, in, out, 0, group, -1, &send_counts, &recv_counts);
}

void LocalCommunicator::collective(StreamContext& s, Kind kind, const void* in, void* out, std::size_t count, int group,
                                   int root, const std::vector<std::size_t>* send,
                                   const std::vector<std::size_t>* recv) {
  static const char* names[] = {"all-gather", "reduce-scatter", "all-reduce", "all-reduce", "barrier", "broadcast", "reduce",
                                "all-to-all"};
  const char* what = names[static_cast<int>(kind)];
  const int me = member_index(hub_.groups_, group, rank_, what);
  const std::vector<int>& members = hub_.groups_[group];
  const int n = static_cast<int>(members.size());
  int r = -1;  // the root's member index
  if (root >= 0) {
    r = static_cast<int>(std::find(members.begin(), members.end(), root) - members.begin());
    if (r == n)
      throw CommError(fmt::format("rank {}: {} over group {} from root {}, which is not in it", rank_, what, group, root));
  }
  const std::pair<int, std::uint64_t> key{group, next_seq_[group]++};
  cudaStream_t st = kind == Kind::Barrier ? nullptr : stream_of(s);
  std::shared_ptr<LocalHub::Call> call;
  auto missing = [&](const std::vector<bool>& present) {
    std::string m;
    for (int j = 0; j < n; ++j)
      if (!present[j]) m += (m.empty() ? "" : ", ") + std::to_string(members[j]);
    return m;
  };
  // 1. arrive: the input is ready on this stream at `ready`.
  cudaEvent_t ready = st ? record(st) : nullptr;
  {
    std::unique_lock lock(hub_.mu_);
    if (hub_.aborted_) {
      if (ready) cudaEventDestroy(ready);
      throw CommError(hub_.abort_reason_);
    }
    auto& slot = hub_.calls_[key];
    if (!slot) {
      slot = std::make_shared<LocalHub::Call>();
      slot->kind = static_cast<int>(kind), slot->count = count, slot->root = root;
      slot->inputs.assign(n, nullptr), slot->present.assign(n, false), slot->sends.assign(n, nullptr);
      slot->ready.assign(n, nullptr), slot->read.assign(n, nullptr);
    }
    call = slot;
    if (call->kind != static_cast<int>(kind) || call->count != count || call->root != root)
      throw CommError(fmt::format("rank {}: call {} over group {} is a {} of {} (root {}) here but a {} of {} (root {}) "
                                  "on another member",
                                  rank_, key.second, group, what, count, root, names[call->kind], call->count, call->root));
    call->inputs[me] = in, call->ready[me] = ready, call->present[me] = true, call->sends[me] = send;
    ++call->arrived;
    hub_.cv_.notify_all();
    wait(lock, [&] { return call->arrived == n; },
         [&] { return fmt::format("{} over group {} (ranks {} have not arrived)", what, group, missing(call->present)); });
  }
  // 2. compute this member's result from every member's input, on this stream.
  void* tmp = nullptr;
  std::string failure;  // an all-to-all whose members disagree on a block's size
  if (st) {
    for (int j = 0; j < n; ++j)
      if (j != me) TS_CUDA(cudaStreamWaitEvent(st, call->ready[j], 0));
    const std::size_t fsz = sizeof(float);
    switch (kind) {
      case Kind::AllGather:
        for (int j = 0; j < n; ++j)
          if (count)
            TS_CUDA(cudaMemcpyAsync(static_cast<float*>(out) + j * count, call->inputs[j], count * fsz,
                                    cudaMemcpyDeviceToDevice, st));
        break;
      case Kind::ReduceScatter:
        sum_inputs(call->inputs.data(), n, static_cast<std::size_t>(me) * count, count, out, false, st);
        break;
      case Kind::AllReduceF:
      case Kind::AllReduceD: {  // into a temporary: `out` may be `in`, which the others are reading
        const std::size_t esz = kind == Kind::AllReduceD ? sizeof(double) : fsz;
        if (count) {
          TS_CUDA(cudaMallocAsync(&tmp, count * esz, st));
          sum_inputs(call->inputs.data(), n, 0, count, tmp, kind == Kind::AllReduceD, st);
        }
        break;
      }
      case Kind::Broadcast:  // the root's input; the root's own output may be its input
        if (count && (me != r || out != call->inputs[r]))
          TS_CUDA(cudaMemcpyAsync(out, call->inputs[r], count * fsz, cudaMemcpyDeviceToDevice, st));
        break;
      case Kind::Reduce:  // the root only, into a temporary: `out` may be `in`, which the others are reading
        if (me == r && count) {
          TS_CUDA(cudaMallocAsync(&tmp, count * fsz, st));
          sum_inputs(call->inputs.data(), n, 0, count, tmp, false, st);
        }
        break;
      case Kind::AllToAll: {  // member j's block for this member, after j's blocks for the members before it
        std::size_t at = 0;
        for (int j = 0; j < n; ++j) {
          const std::vector<std::size_t>& theirs = *call->sends[j];
          if (theirs[me] != (*recv)[j]) {  // (thrown once every member departed; the counts' number each checked)
            failure = all_to_all_mismatch(rank_, group, (*recv)[j], j, theirs[me]).what();
            break;
          }
          std::size_t offset = 0;
          for (int q = 0; q < me; ++q) offset += theirs[q];
          if ((*recv)[j])
            TS_CUDA(cudaMemcpyAsync(static_cast<float*>(out) + at, static_cast<const float*>(call->inputs[j]) + offset,
                                    (*recv)[j] * fsz, cudaMemcpyDeviceToDevice, st));
          at += (*recv)[j];
        }
        break;
      }
      case Kind::Barrier:
        break;
    }
  }
  cudaEvent_t read = st ? record(st) : nullptr;
  {
    std::unique_lock lock(hub_.mu_);
    call->read[me] = read;
    ++call->finished;
    hub_.cv_.notify_all();
    wait(lock, [&] { return call->finished == n; }, [&] { return fmt::format("{} over group {} to finish", what, group); });
  }
  // 3. go on only once every member has read this member's input.
  if (st) {
    for (int j = 0; j < n; ++j)
      if (j != me) TS_CUDA(cudaStreamWaitEvent(st, call->read[j], 0));
    if (tmp) {
      const std::size_t esz = kind == Kind::AllReduceD ? sizeof(double) : sizeof(float);
      TS_CUDA(cudaMemcpyAsync(out, tmp, count * esz, cudaMemcpyDeviceToDevice, st));
      TS_CUDA(cudaFreeAsync(tmp, st));
    }
  }
  std::lock_guard lock(hub_.mu_);
  if (++call->departed == n) {  // every member has enqueued its waits: the events can go
    for (cudaEvent_t ev : call->ready)
      if (ev) cudaEventDestroy(ev);
    for (cudaEvent_t ev : call->read)
      if (ev) cudaEventDestroy(ev);
    hub_.calls_.erase(key);
  }
  if (!failure.empty()) throw CommError(failure);
}

}  // namespace

std::unique_ptr<CommHub> make_local_hub(int world_size, std::vector<std::vector<int>> groups, double timeout_seconds) {
  return std::make_unique<LocalHub>(world_size, std::move(groups), timeout_seconds);
}

}  // namespace trainsim::exec::cuda
