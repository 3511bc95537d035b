// A backend (DESIGN §5): it makes each rank's Device and the job's CommHub, for ranks that run as threads of
// this process or for one rank per process (exec/process_group.h). "cpu": host memory, oneDNN and OpenBLAS GEMMs, an
// in-process communicator between threads (exec/cpu/thread_comm.h) or one over the rendezvous's TCP
// connections between processes (exec/cpu/tcp_comm.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "exec/comm.h"
#include "exec/device.h"
#include "exec/process_group.h"

namespace trainsim::exec {

class LocalBackend {
 public:
  virtual ~LocalBackend() = default;
  virtual std::string name() const = 0;
  /// Rank `rank`'s device; `epoch` is time zero of the job's timings.
  virtual std::unique_ptr<Device> make_device(int rank, std::chrono::steady_clock::time_point epoch) = 0;
  /// The communicator of `world_size` ranks over `groups` (groups[0] = every rank); calls wait at most
  /// `timeout_seconds`.
  virtual std::unique_ptr<CommHub> make_hub(int world_size, const std::vector<std::vector<int>>& groups,
                                            double timeout_seconds) = 0;
  /// The communicator of a job with one process per rank: this process's rank over `processes` (its
  /// transport, or the job id the backend's own library needs). Calls wait at most `timeout_seconds`.
  virtual std::unique_ptr<CommHub> make_process_hub(ProcessGroup& processes, const std::vector<std::vector<int>>& groups,
                                                    double timeout_seconds) = 0;
  /// Whether its kernels run tensor parallelism (the vocabulary-parallel embedding and cross-entropy of
  /// exec/kernels.h): a TP schedule on a backend without them is refused before it starts.
  virtual bool supports_tensor_parallel() const { return false; }
  /// Whether its kernels and communicator run Mixture-of-Experts models (exec/moe.h's kernels of exec/kernels.h and
  /// Communicator::all_to_all on its memory): an MoE model on a backend without them is refused before it starts.
  virtual bool supports_moe() const { return false; }
};

/// The backends built into this binary: "cpu" (and "cuda" where it was built with CUDA).
std::vector<std::string> backend_names();
/// The backend called `name`. Throws std::invalid_argument listing the available ones, or, for "cpu", naming
/// TRAINSIM_GEMM or TRAINSIM_SIMD when the environment asks for a library or instruction set it cannot use.
std::unique_ptr<LocalBackend> make_backend(const std::string& name);

}  // namespace trainsim::exec
