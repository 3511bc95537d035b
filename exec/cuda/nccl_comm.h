// The CUDA backend's communicator across processes (issue 8): NCCL, one rank per GPU. Group 0 is the
// world communicator (ncclCommInitRank from a unique id that the job's rendezvous hands out); every other
// schedule group gets its own communicator by ncclCommSplit (colour: membership, key: the index in the
// group, so member i is NCCL rank i: NCCL's rank-major layout is the group's member order).
//
// Each call is enqueued on the calling work's stream; it then waits for its completion while polling
// ncclCommGetAsyncError, so that a failed or vanished peer ends the call with CommError (and the
// communicators are aborted) instead of hanging; the same after `timeout_seconds`, or once abort() was called.
//
// Differences from the in-process communicators: NCCL does not carry tags or sizes, so a mismatched
// send/recv pair is not detected (the schedule was validated by the simulator before replay); sums use
// NCCL's own order (deterministic for a fixed topology, not member order). Send and recv are each their
// own ncclGroupStart/End: pairing the two halves of one exchange in a group needs the replay loop to batch
// them (not done yet).
//
// NOT YET RUN ON A GPU (not even with one rank); not yet wired to a multi-process launcher.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "exec/comm.h"

namespace trainsim::exec::cuda {

/// A new NCCL unique id (ncclGetUniqueId), as bytes, for the rendezvous to hand to every rank.
std::string nccl_unique_id();

/// One rank's NCCL communicators. Construction is collective: every rank of the world makes its own with
/// the same id, groups and world size, on its own GPU (the current device).
std::unique_ptr<Communicator> make_nccl_communicator(const std::string& unique_id, int world_size, int rank,
                                                     const std::vector<std::vector<int>>& groups, double timeout_seconds,
                                                     std::shared_ptr<std::atomic<bool>> abort_flag = nullptr);

/// A hub of one rank in this process over NCCL (world size 1): exercises the NCCL path on one GPU.
std::unique_ptr<CommHub> make_nccl_single_hub(const std::vector<std::vector<int>>& groups, double timeout_seconds);

}  // namespace trainsim::exec::cuda
