// The TCP rendezvous of a multi-process job (DESIGN §5), over Boost.Asio: rank 0 listens on
// MASTER_ADDR:MASTER_PORT, every other rank connects (retrying until its deadline), and the two prove to
// each other that they hold the job's token (TRAINSIM_TOKEN) by challenge and response, without sending it
// (protocol 2, exec/dist/handshake.h). Only then does a peer say who it is, and rank 0 check that the world
// sizes agree, that no rank comes twice and that every rank replays the same schedule with the same model and
// settings. Then it hands every rank the job's id (exec/process_group.h: the NCCL unique id on CUDA) and the
// connections stay open as the job's transport: a star through rank 0, with heartbeats, every frame
// authenticated with the connection's keys.
//
// Before a peer has proven the token, nothing it sends costs the job more than a bounded amount of memory, one
// pending slot until its handshake deadline and one log line: a connection that sends anything unexpected,
// too long or too late is turned away, logged once and dropped, and the rendezvous goes on. A peer, in turn,
// believes nothing rank 0 says until rank 0 has proven the token, and bounds every wait by its own deadline.
// docs/executor.md, "Security and failure model", says what this protects against and what it does not.
#pragma once

#include <cstddef>
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

/// The rendezvous protocol this build speaks; both ends must speak the same.
inline constexpr int kRendezvousProtocol = 2;
/// The shortest token accepted (bytes). Whoever reaches the port can obtain values computed from the token
/// and try to guess it offline, so it must not be guessable: `openssl rand -hex 16` gives 32 characters.
inline constexpr std::size_t kMinTokenBytes = 16;

struct RendezvousOptions {
  double timeout_seconds = 300;   ///< the whole rendezvous: every rank must have joined by then
  double heartbeat_seconds = 1;   ///< after it: how often each end says it is alive
  double silence_seconds = 60;    ///< a peer heard from for this long is declared gone
  /// The job's token, the same on every rank (at least kMinTokenBytes). "" only with `insecure`.
  std::string token;
  /// Allow an empty token: any process that reaches the port can then join (the handshake still runs, keyed
  /// by the empty string, which proves nothing).
  bool insecure = false;
  /// Rank 0: how long a connection may take from its acceptance to proving the token and introducing itself.
  double handshake_seconds = 10;
  /// Rank 0: how many connections may be in their handshake at once; more wait in the listen backlog.
  int max_pending = 64;
  /// Where rank 0 reports the connections it turned away (may be empty). At most `max_logged` lines name a
  /// connection each; after that they are counted, and the count is reported when the rendezvous ends.
  std::function<void(const std::string&)> log;
  int max_logged = 16;
};

/// What is wrong with `token` for a job of several processes ("" when nothing): empty without `insecure`, or
/// shorter than kMinTokenBytes. The message says how to make one.
std::string token_problem(const std::string& token, bool insecure);

/// Meets the other ranks. Returns this process's ProcessGroup (its connections open, a thread serving
/// them). Throws RendezvousError when the token is unusable (token_problem), when the deadline passes (naming
/// the ranks that did not join), when a check fails (naming the rank and what differs), when rank 0 does not
/// prove the token or turns this process away, or when a rank dies.
std::unique_ptr<ProcessGroup> rendezvous(const RankEnv& env, const JobIdentity& identity, const RendezvousOptions& options);

}  // namespace trainsim::exec::dist
