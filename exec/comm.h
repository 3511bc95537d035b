// Communication between the ranks of a replay (DESIGN §5), with NCCL's semantics: point-to-point messages
// matched in order per (source, destination) pair; all-gather, reduce-scatter, all-reduce, broadcast and
// reduce over a group,
// with pieces in rank-major order (member i of the group contributes / receives the i-th piece) and sums
// in a fixed order, so results are the same on every member and in every run. Calls run inside a stream's
// work (exec/device.h) and block that stream until done.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/device.h"

namespace trainsim::exec {

/// A communication that cannot complete: a rank failed (the job was aborted), a peer is gone, a timeout.
struct CommError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `rank`'s index in group `group` of `groups` (its shard in reduce-scatter). Throws CommError naming the
/// collective (`what`) for an unknown group or a rank that is not a member. Shared by every communicator.
inline int member_index(const std::vector<std::vector<int>>& groups, int group, int rank, const char* what) {
  if (group < 0 || group >= static_cast<int>(groups.size()))
    throw CommError("rank " + std::to_string(rank) + ": " + what + " over unknown group " + std::to_string(group));
  const std::vector<int>& members = groups[group];
  for (std::size_t i = 0; i < members.size(); ++i)
    if (members[i] == rank) return static_cast<int>(i);
  throw CommError("rank " + std::to_string(rank) + ": " + what + " over group " + std::to_string(group) +
                  ", which it is not in");
}

/// Throws CommError when a received message is not the one `rank` expected from `peer` (tag and size).
inline void check_received(int rank, int peer, const std::string& tag, std::size_t bytes, const std::string& got_tag,
                           std::size_t got_bytes) {
  if (got_tag != tag || got_bytes != bytes)
    throw CommError("rank " + std::to_string(rank) + ": recv from rank " + std::to_string(peer) + " expected " + tag +
                    " (" + std::to_string(bytes) + " bytes) but got " + got_tag + " (" + std::to_string(got_bytes) +
                    " bytes)");
}

/// One rank's end of the job's communicator. Groups are indices into the list the communicator was made
/// with (group 0 = every rank, in rank order).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  /// Sends `bytes` to `peer`. `tag` names the tensor; backends that carry it check it on receipt.
  virtual void send(StreamContext& s, const void* data, std::size_t bytes, int peer, const std::string& tag) = 0;
  /// Receives the next message from `peer` into `data` (exactly `bytes`). Throws CommError when the message
  /// differs in size (or in tag, where carried).
  virtual void recv(StreamContext& s, void* data, std::size_t bytes, int peer, const std::string& tag) = 0;
  /// out (k·count floats, k = group size) = every member's `count` floats, member-major.
  virtual void all_gather(StreamContext& s, const float* in, float* out, std::size_t count, int group) = 0;
  /// out (count floats) = Σ over members of their in[i·count, (i+1)·count), i = this rank's index in the
  /// group; `in` holds k·count floats.
  virtual void reduce_scatter(StreamContext& s, const float* in, float* out, std::size_t count, int group) = 0;
  /// out = Σ over members of in (count floats; out may be in).
  virtual void all_reduce(StreamContext& s, const float* in, float* out, std::size_t count, int group) = 0;
  /// As above, for doubles (gradient norms).
  virtual void all_reduce(StreamContext& s, const double* in, double* out, std::size_t count, int group) = 0;
  /// Returns when every member has called it.
  virtual void barrier(StreamContext& s, int group) = 0;
  /// out (count floats, on every member) = the root's `in` (ncclBroadcast). `root` is a global rank, a member
  /// of the group; `in` is read on the root only (null elsewhere), and on the root `out` may be `in`.
  virtual void broadcast(StreamContext& s, const float* in, float* out, std::size_t count, int root, int group) = 0;
  /// out (count floats, on the root only) = Σ over members of in, in member order (ncclReduce). `root` is a
  /// global rank, a member of the group; `out` is written on the root only (null elsewhere) and may be `in`.
  virtual void reduce(StreamContext& s, const float* in, float* out, std::size_t count, int root, int group) = 0;
};

/// What the ranks of a job that live in this process share: it hands each rank its Communicator and can end
/// every call of every rank at once.
class CommHub {
 public:
  virtual ~CommHub() = default;
  /// Rank `rank`'s end; the hub must outlive it. Throws std::invalid_argument for a rank out of range.
  virtual std::unique_ptr<Communicator> communicator(int rank) = 0;
  /// Ends every waiting and later call with CommError(`why`). Idempotent: the first reason stays.
  virtual void abort(const std::string& why) = 0;
};

}  // namespace trainsim::exec
