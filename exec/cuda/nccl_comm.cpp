#include "exec/cuda/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "exec/cuda/cuda_check.h"

namespace trainsim::exec::cuda {

namespace {

void check_nccl(ncclResult_t r, const char* call, const char* file, int line) {
  if (r != ncclSuccess)
    throw CudaError(fmt::format("NCCL error {} ({}) in {} at {}:{}", static_cast<int>(r), ncclGetErrorString(r), call,
                                file, line));
}
#define TS_NCCL(call) check_nccl((call), #call, __FILE__, __LINE__)

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const std::string& id, int world, int rank, const std::vector<std::vector<int>>& groups,
                   double timeout, std::shared_ptr<std::atomic<bool>> abort_flag)
      : world_(world), rank_(rank), timeout_(timeout), abort_(std::move(abort_flag)), groups_(groups) {
    if (!abort_) abort_ = std::make_shared<std::atomic<bool>>(false);
    if (id.size() != sizeof(ncclUniqueId)) throw std::invalid_argument("an NCCL unique id has the wrong size");
    if (groups.empty()) throw std::invalid_argument("the communicator needs group 0 (every rank)");
    ncclUniqueId uid;
    std::memcpy(&uid, id.data(), sizeof uid);
    ncclComm_t world_comm = nullptr;
    TS_NCCL(ncclCommInitRank(&world_comm, world, uid, rank));
    comms_.push_back(world_comm);
    for (std::size_t g = 1; g < groups.size(); ++g) {  // collective over the world, in the same order everywhere
      int index = -1;
      for (std::size_t i = 0; i < groups[g].size(); ++i)
        if (groups[g][i] == rank) index = static_cast<int>(i);
      ncclComm_t c = nullptr;
      TS_NCCL(ncclCommSplit(world_comm, index < 0 ? NCCL_SPLIT_NOCOLOR : 0, index < 0 ? 0 : index, &c, nullptr));
      comms_.push_back(c);  // null where this rank is not a member
    }
    TS_CUDA(cudaMalloc(&scratch_, sizeof(float)));
    TS_CUDA(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclCommunicator() override {
    for (ncclComm_t c : comms_)
      if (c) aborted_ ? ncclCommAbort(c) : ncclCommDestroy(c);
    if (scratch_) cudaFree(scratch_);
    if (done_) cudaEventDestroy(done_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  void send(StreamContext& s, const void* data, std::size_t bytes, int peer, const std::string& tag) override {
    cudaStream_t st = stream_of(s);
    TS_NCCL(ncclGroupStart());
    TS_NCCL(ncclSend(data, bytes, ncclUint8, peer, comms_[0], st));
    TS_NCCL(ncclGroupEnd());
    finish(st, 0, fmt::format("send of {} to rank {}", tag, peer));
  }
  void recv(StreamContext& s, void* data, std::size_t bytes, int peer, const std::string& tag) override {
    cudaStream_t st = stream_of(s);
    TS_NCCL(ncclGroupStart());
    TS_NCCL(ncclRecv(data, bytes, ncclUint8, peer, comms_[0], st));
    TS_NCCL(ncclGroupEnd());
    finish(st, 0, fmt::format("recv of {} from rank {}", tag, peer));
  }
  void all_gather(StreamContext& s, const float* in, float* out, std::size_t count, int group) override {
    cudaStream_t st = stream_of(s);
    TS_NCCL(ncclAllGather(in, out, count, ncclFloat32, comm(group, "all-gather"), st));
    finish(st, group, fmt::format("all-gather over group {}", group));
  }
  void reduce_scatter(StreamContext& s, const float* in, float* out, std::size_t count, int group) override {
    cudaStream_t st = stream_of(s);
    TS_NCCL(ncclReduceScatter(in, out, count, ncclFloat32, ncclSum, comm(group, "reduce-scatter"), st));
    finish(st, group, fmt::format("reduce-scatter over group {}", group));
  }
  void all_reduce(StreamContext& s, const float* in, float* out, std::size_t count, int group) override {
    cudaStream_t st = stream_of(s);
    TS_NCCL(ncclAllReduce(in, out, count, ncclFloat32, ncclSum, comm(group, "all-reduce"), st));
    finish(st, group, fmt::format("all-reduce over group {}", group));
  }
  void all_reduce(StreamContext& s, const double* in, double* out, std::size_t count, int group) override {
    cudaStream_t st = stream_of(s);
    TS_NCCL(ncclAllReduce(in, out, count, ncclFloat64, ncclSum, comm(group, "all-reduce"), st));
    finish(st, group, fmt::format("all-reduce over group {}", group));
  }
  void broadcast(StreamContext& s, const float* in, float* out, std::size_t count, int root, int group) override {
    cudaStream_t st = stream_of(s);
    ncclComm_t c = comm(group, "broadcast");
    TS_NCCL(ncclBroadcast(in, out, count, ncclFloat32, root_index(group, root, "broadcast"), c, st));
    finish(st, group, fmt::format("broadcast from rank {} over group {}", root, group));
  }
  void reduce(StreamContext& s, const float* in, float* out, std::size_t count, int root, int group) override {
    cudaStream_t st = stream_of(s);
    ncclComm_t c = comm(group, "reduce");
    TS_NCCL(ncclReduce(in, out, count, ncclFloat32, ncclSum, root_index(group, root, "reduce"), c, st));
    finish(st, group, fmt::format("reduce to rank {} over group {}", root, group));
  }
  // NCCL has no all-to-all primitive: grouped send/recv to and from every member, as PyTorch's all_to_all_single
  // does (member j of the group is NCCL rank j of its communicator, ncclCommSplit's key).
  void all_to_all(StreamContext& s, const float* in, const std::vector<std::size_t>& send_counts, float* out,
                  const std::vector<std::size_t>& recv_counts, int group) override {
    cudaStream_t st = stream_of(s);
    ncclComm_t c = comm(group, "all-to-all");
    const std::size_t k = groups_.at(group).size();
    check_all_to_all_counts(rank_, group, k, send_counts.size(), recv_counts.size());
    std::size_t sent = 0, received = 0;
    TS_NCCL(ncclGroupStart());
    for (std::size_t j = 0; j < k; ++j) {
      if (send_counts[j]) TS_NCCL(ncclSend(in + sent, send_counts[j], ncclFloat32, static_cast<int>(j), c, st));
      if (recv_counts[j]) TS_NCCL(ncclRecv(out + received, recv_counts[j], ncclFloat32, static_cast<int>(j), c, st));
      sent += send_counts[j], received += recv_counts[j];
    }
    TS_NCCL(ncclGroupEnd());
    finish(st, group, fmt::format("all-to-all over group {}", group));
  }
  void barrier(StreamContext& s, int group) override {
    cudaStream_t st = stream_of(s);
    TS_NCCL(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm(group, "barrier"), st));
    finish(st, group, fmt::format("barrier over group {}", group));
  }

 private:
  static cudaStream_t stream_of(StreamContext& s) {
    auto* st = static_cast<cudaStream_t>(s.native());
    if (!st) throw CommError("the NCCL communicator needs a CUDA stream (the device is not a CudaDevice)");
    return st;
  }
  ncclComm_t comm(int group, const char* what) {
    if (group < 0 || group >= static_cast<int>(comms_.size()))
      throw CommError(fmt::format("rank {}: {} over unknown group {}", rank_, what, group));
    if (!comms_[group]) throw CommError(fmt::format("rank {}: {} over group {}, which it is not in", rank_, what, group));
    return comms_[group];
  }
  // NCCL's rank of global rank `root` in `group`'s communicator: its index in the group (ncclCommSplit's key).
  int root_index(int group, int root, const char* what) const {
    const auto& m = groups_.at(group);
    for (std::size_t i = 0; i < m.size(); ++i)
      if (m[i] == root) return static_cast<int>(i);
    throw CommError(fmt::format("rank {}: {} over group {} from root {}, which is not in it", rank_, what, group, root));
  }
  void abort_all() {
    aborted_ = true;
    for (ncclComm_t c : comms_)
      if (c) ncclCommAbort(c);
    comms_.assign(comms_.size(), nullptr);
  }
  // Waits until the call enqueued on `st` completes, watching NCCL's asynchronous errors, the deadline and
  // the abort flag.
  void finish(cudaStream_t st, int group, const std::string& what) {
    TS_CUDA(cudaEventRecord(done_, st));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_);
    for (;;) {
      cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) throw_cuda(e, "cudaEventQuery (NCCL call)", __FILE__, __LINE__);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comms_[group], &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        std::string why = fmt::format("rank {}: NCCL error in the {}: {}", rank_, what, ncclGetErrorString(async));
        abort_all();
        throw CommError(why);
      }
      if (abort_->load()) {
        abort_all();
        throw CommError(fmt::format("rank {}: the {} was aborted", rank_, what));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        abort_all();
        throw CommError(fmt::format("rank {}: timed out after {:g} s waiting for the {}", rank_, timeout_, what));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  int world_, rank_;
  double timeout_;
  std::shared_ptr<std::atomic<bool>> abort_;
  std::vector<std::vector<int>> groups_;  // by group: the members, in NCCL rank order
  std::vector<ncclComm_t> comms_;  // by group; null where not a member
  void* scratch_ = nullptr;
  cudaEvent_t done_ = nullptr;
  bool aborted_ = false;
};

class NcclSingleHub final : public CommHub {
 public:
  NcclSingleHub(std::vector<std::vector<int>> groups, double timeout) : groups_(std::move(groups)), timeout_(timeout) {}
  std::unique_ptr<Communicator> communicator(int rank) override {
    if (rank != 0) throw std::invalid_argument(fmt::format("rank {} is out of range", rank));
    return make_nccl_communicator(nccl_unique_id(), 1, 0, groups_, timeout_, flag_);
  }
  void abort(const std::string&) override { flag_->store(true); }

 private:
  std::vector<std::vector<int>> groups_;
  double timeout_;
  std::shared_ptr<std::atomic<bool>> flag_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

std::string nccl_unique_id() {
  ncclUniqueId id;
  TS_NCCL(ncclGetUniqueId(&id));
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

std::unique_ptr<Communicator> make_nccl_communicator(const std::string& unique_id, int world_size, int rank,
                                                     const std::vector<std::vector<int>>& groups, double timeout_seconds,
                                                     std::shared_ptr<std::atomic<bool>> abort_flag) {
  return std::make_unique<NcclCommunicator>(unique_id, world_size, rank, groups, timeout_seconds, std::move(abort_flag));
}

std::unique_ptr<CommHub> make_nccl_single_hub(const std::vector<std::vector<int>>& groups, double timeout_seconds) {
  return std::make_unique<NcclSingleHub>(groups, timeout_seconds);
}

}  // namespace trainsim::exec::cuda
