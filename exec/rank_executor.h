// One rank of a replay (DESIGN §5): runs the rank's op list for one training step with real tensors. Each
// op is issued in program order and submitted to the stream the schedule names, to run after the ops that
// wrote what it reads (and, for a backward, after the forward that saved its activations); the tensor
// identities of the schedule name real buffers (exec/shapes.h). The loop knows nothing of the backend: it
// talks to a Device and a Communicator.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "exec/checkpoint.h"
#include "exec/comm.h"
#include "exec/data.h"
#include "exec/device.h"
#include "exec/model.h"
#include "exec/optimizer.h"
#include "exec/plan.h"

namespace trainsim::exec {

/// Faults a test can inject, to prove that a failing rank stops every rank and that the comparison with the
/// single-device reference can fail. Off by default; the command line never sets them (but the tests' copy of
/// trainsim, trainsim_fault_test, sets kill_rank and kill_op: `replay --test-kill-at RANK:OP`).
struct FaultInjection {
  int throw_rank = -1;  ///< with throw_op: this rank's op number `throw_op` (0-based) throws
  int throw_op = -1;
  bool local_reduce_scatter = false;  ///< reduce-scatters keep the rank's own shard of its local grad, unsummed
  int kill_rank = -1;  ///< with kill_op: this rank's op number `kill_op` kills its process (SIGKILL): one process per rank only
  int kill_op = -1;
  int thread_fail_rank = -1;  ///< creating this rank's thread throws std::system_error (as when a process has no threads left)
  /// MoE: in 0-based step `misroute_step`, this rank's MoE forwards send their first `misroute_tokens` tokens' last
  /// expert to another one (ModelContext::misroute_tokens): a routing that differs from the reference's
  int misroute_rank = -1, misroute_step = -1, misroute_tokens = 0;
};

/// What every rank of a replay shares, read-only.
struct ReplayContext {
  const Schedule* schedule = nullptr;
  const ReplayPlan* plan = nullptr;
  const ModelShapes* shapes = nullptr;
  const TokenData* data = nullptr;
  OptimizerConfig optimizer;
  int total_steps = 1;     ///< the length of the learning-rate schedule
  std::uint64_t seed = 0;  ///< initialisation seed
  FaultInjection fault;
  hw::Recompute recompute = hw::Recompute::None;  ///< activation recomputation (exec/model.h ModelContext)
  bool record_routing = false;  ///< report each MoE block's routing per microbatch (StepOutput::routing; --check)
};

/// The weights and optimizer state one rank carries from a step to the next: its plan's `state` tensors
/// (step-0 identities), in backend memory.
struct RankState {
  bool initialized = false;  ///< false: the next step loads them from the seed (fresh weights, zero moments)
  std::map<Tensor, BufferPtr> tensors;
};

/// What one rank reports after a step.
struct StepOutput {
  std::vector<double> loss_sums;   ///< per microbatch: the summed loss over its tokens, NaN where another rank reports it
  /// The MoE load-balancing loss (ModelConfig::aux_loss_coeff) of the routers whose backward ran on this rank,
  /// summed over their blocks and microbatches (each microbatch's, unweighted); 0 without it.
  double aux_loss_sum = 0;
  /// The rank's part of the squared global gradient norm, before clipping: the sum of squares of the gradient
  /// elements it counts (RankPlan::norm_parts, each element counted by one rank), in fp64; 0 when it updates
  /// nothing. The parts summed in rank order are the norm clipping uses (its all-reduce sums in member order).
  double grad_norm_sq = 0;
  std::size_t peak_bytes = 0;      ///< the most bytes the rank's device allocator had out during the step
  std::vector<WorkTiming> timings; ///< host-clock timing of each op's work (tag = op index; -1 = the gradient norm)
  /// Mixture of Experts, with ReplayContext::record_routing: the routing of each (MoE block, microbatch) whose
  /// forward ran on this rank (exec/moe.h RoutingDigest's hash), in (block, microbatch) order.
  struct Route {
    int block = 0, microbatch = 0;
    std::uint64_t hash = 0;
    std::vector<int> counts;  ///< (token, slot) pairs per expert
    int shard = 0, shards = 1;  ///< the microbatch's sequence shard routed (an MoE layer's TP slice), 0 of 1: all
  };
  std::vector<Route> routing;
  /// The rank's carried state after the step (weights and optimizer state), when the job asked for it (to
  /// evaluate the model on the validation split); otherwise empty.
  std::optional<HostState> state;
};

/// Replays one rank's ops, step after step.
class RankExecutor {
 public:
  /// Uploads the rotary tables. `ctx`, `device` and `comm` must outlive the executor.
  RankExecutor(const ReplayContext& ctx, int rank, Device& device, Communicator& comm);
  /// Waits for the device's work in flight (Device::drain): after a failure, abort the device and the
  /// communicator first, so that nothing waits for other ranks.
  ~RankExecutor();

  /// Runs 0-based training step `step` and replaces `state` with the state for the next one. Throws the first
  /// error of the step, naming the rank, the op and its file:line (CommError when another rank failed).
  StepOutput run_step(int step, RankState& state);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainsim::exec
