// The TCP rendezvous of a multi-process job (DESIGN §5), over Boost.Asio: rank 0 listens on
// MASTER_ADDR:MASTER_PORT, every other rank connects (retrying until the deadline) and introduces itself.
// Before any work, rank 0 checks that every peer presents the job's token (TRAINSIM_TOKEN, compared in
// constant time: a connection without it is turned away and logged, and the rendezvous goes on waiting),
// that the world sizes agree, that no rank comes twice and that every rank replays the same schedule with the
// same model and settings. Then it hands every rank the job's id (exec/process_group.h: the NCCL unique id
// on CUDA) and the connections stay open as the job's transport: a star through rank 0, with heartbeats.
//
// The token keeps stray and mistaken processes out of a job (another user's job on the same port, a rank of
// an earlier run); it travels in clear text, so it is no defence against someone who can read the network.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "exec/dist/env.h"
#include "exec/process_group.h"

namespace trainsim::exec::dist {

/// The rendezvous failed; the message names the rank(s) and what went wrong.
struct RendezvousError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RendezvousOptions {
  double timeout_seconds = 300;   ///< the whole rendezvous: every rank must have joined by then
  double heartbeat_seconds = 1;   ///< after it: how often each end says it is alive
  double silence_seconds = 60;    ///< a peer heard from for this long is declared gone
  std::string token;              ///< the job's token ("" = none: any peer without one is accepted)
  /// Where rank 0 reports the connections it turned away (may be empty).
  std::function<void(const std::string&)> log;
};

/// Meets the other ranks. Returns this process's ProcessGroup (its connections open, a thread serving
/// them). Throws RendezvousError when the deadline passes (naming the ranks that did not join), when a check
/// fails (naming the rank and what differs), when rank 0 turns this process away, or when a rank dies.
std::unique_ptr<ProcessGroup> rendezvous(const RankEnv& env, const JobIdentity& identity, const RendezvousOptions& options);

/// True when `a` equals `b`; the time taken depends on the lengths only, not on where they differ.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace trainsim::exec::dist
