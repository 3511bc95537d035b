// The CUDA backend's communicator for logical ranks (issue 8): several ranks of one process on one GPU,
// which one NCCL communicator cannot hold. Matching, ordering and timeouts as the CPU's ThreadHub
// (exec/cpu/thread_comm.h); the data moves on the GPU, in stream order:
//  - send: the bytes are copied (cudaMemcpyAsync) into a staging buffer on the sender's stream, an event is
//    recorded and the message posted; recv waits for the message on the host, makes its stream wait on the
//    event, copies into place and frees the staging buffer in stream order. Sends never block.
//  - collectives: every member records an event when it arrives; once all have arrived, each member's
//    stream waits on the others' events and computes its own result (copies for the all-gather, a kernel
//    summing in member order for the sums, as the CPU does); then each waits on every member's "done
//    reading" event before its stream goes on, so no input is overwritten or freed while another member's
//    stream may still read it.
// NOT YET RUN ON A GPU.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "exec/comm.h"

namespace trainsim::exec::cuda {

/// Makes the hub of `world_size` logical ranks sharing the current GPU; `groups[0]` is every rank.
std::unique_ptr<CommHub> make_local_hub(int world_size, std::vector<std::vector<int>> groups, double timeout_seconds);

}  // namespace trainsim::exec::cuda
