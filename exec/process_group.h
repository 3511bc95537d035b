// The processes of a multi-process job (DESIGN §5): one process per rank, started by torchrun-style
// environment variables, Slurm, mpirun or `trainsim launch`, met at a rendezvous (exec/dist/rendezvous.h).
// The job runner (exec/training.cpp) uses it to collect every rank's results on rank 0 and to hear of a
// failure elsewhere; a backend uses it as the transport of its communicator (the CPU backend's TcpHub,
// exec/cpu/tcp_comm.h) or for the job's id (the NCCL unique id on CUDA). The replay loop, the model and
// the data never see it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trainsim::exec {

/// 128 opaque bytes, the same on every process of a job and fresh for every job (the size of an NCCL unique id).
using JobId = std::array<unsigned char, 128>;

/// What every rank of a job must agree on before any work, compared as strings (rank 0's against each peer's).
struct JobIdentity {
  std::string schedule_hash;  ///< hash of the canonical schedule text
  std::string model;          ///< the model configuration (JSON)
  std::string settings;       ///< everything else that shapes the run: steps, seed, optimizer, data... (JSON)
};

/// A message between two processes of a job, for a backend's communicator. The transport carries the fields
/// as they are; their meaning is the communicator's.
struct Frame {
  static constexpr std::uint8_t kFirstUserKind = 32;  ///< kinds below are the transport's own
  std::uint8_t kind = kFirstUserKind;
  std::int32_t src = 0, dst = 0;  ///< ranks
  std::int32_t group = 0;
  std::uint64_t seq = 0, count = 0;
  std::string tag;
  std::vector<unsigned char> data;
};

/// This process's view of the job. Methods throw CommError (exec/comm.h) once the job has failed.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// The process's index on its machine (LOCAL_RANK: its GPU on CUDA).
  virtual int local_rank() const = 0;
  virtual const JobId& job_id() const = 0;

  // ---- transport for a backend's communicator ----
  /// Delivers `f` (f.src = this rank, f.kind >= Frame::kFirstUserKind) to process f.dst, in order with this
  /// process's other frames to f.dst. Queues and returns; never waits for the peer.
  virtual void post(Frame f) = 0;
  /// `handler` receives the frames posted to this process, on the transport's thread, in order per sender;
  /// frames that arrived before it was set are handed over first. It must not block.
  virtual void set_frame_handler(std::function<void(Frame&&)> handler) = 0;

  // ---- the job's own exchange of host data ----
  /// Rank 0 gets every rank's `blob` (index = rank); the others get an empty vector at once. Calls match in
  /// order. Throws CommError after `timeout_seconds` on rank 0, naming the ranks missing.
  virtual std::vector<std::string> gather(const std::string& blob, double timeout_seconds) = 0;
  /// Every rank gets rank 0's `blob` (the others' argument is ignored). Calls match in order.
  virtual std::string broadcast(const std::string& blob, double timeout_seconds) = 0;

  // ---- failure ----
  /// Ends the job on every process: each one's failure handler gets `why` (this one's too). Idempotent: the
  /// first reason stays.
  virtual void fail(const std::string& why) = 0;
  /// `handler` is called once, on some thread, when the job fails: fail() here or on a peer, a peer whose
  /// connection ended (its process died) or that stopped sending heartbeats. Called at once when the job
  /// has already failed. Must not block long.
  virtual void set_failure_handler(std::function<void(const std::string&)> handler) = 0;
  /// Why the job failed; "" while it has not.
  virtual std::string failure() const = 0;
  /// Orderly end after the last broadcast: flushes what is queued, then waits (a few seconds at most) for
  /// the peers to close their ends. A peer's connection closing after this is not a failure.
  virtual void close() = 0;
};

}  // namespace trainsim::exec
