// Communication between the ranks of a replay (DESIGN §5), with NCCL's semantics: point-to-point messages
// matched in order per (source, destination) pair; all-gather, reduce-scatter, all-reduce, broadcast and
// reduce over a group,
// with pieces in rank-major order (member i of the group contributes / receives the i-th piece) and sums
// in a fixed order, so results are the same on every member and in every run. Calls run inside a stream's
// work (exec/device.h) and block that stream until done.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
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

/// Throws CommError unless an all-to-all of `rank` over `group`, of `k` members, has a send and a receive count per
/// member (`sends`, `receives` of them). Shared by every communicator.
inline void check_all_to_all_counts(int rank, int group, std::size_t k, std::size_t sends, std::size_t receives) {
  if (sends != k || receives != k)
    throw CommError("rank " + std::to_string(rank) + ": all-to-all over group " + std::to_string(group) + " of " +
                    std::to_string(k) + " members with " + std::to_string(sends) + " send and " +
                    std::to_string(receives) + " receive counts");
}
/// The error of an all-to-all of `rank` over `group` that expects `expected` floats from member `member`, which
/// sends `sent`. Shared by every communicator.
inline CommError all_to_all_mismatch(int rank, int group, std::size_t expected, std::size_t member, std::size_t sent) {
  return CommError("rank " + std::to_string(rank) + ": all-to-all over group " + std::to_string(group) + " expects " +
                   std::to_string(expected) + " floats from member " + std::to_string(member) + ", which sends " +
                   std::to_string(sent));
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
  /// The all-to-all of Mixture-of-Experts dispatch and combine (torch.distributed.all_to_all_single with split
  /// sizes; NCCL has no primitive: grouped send/recv): `in` holds this rank's blocks for members 0..k-1 of the
  /// group back to back, send_counts[j] floats for member j; `out` receives recv_counts[i] floats from member i,
  /// back to back in member order. Every member's send_counts[me] must be this rank's recv_counts[its index]
  /// (CommError otherwise). The default runs it as two all-gathers (every member's counts, then every member's
  /// blocks padded to the longest), staged in host memory: k times the bytes of a real all-to-all, for backends
  /// whose buffers are host memory (the TCP communicator); the threads' communicator overrides it.
  virtual void all_to_all(StreamContext& s, const float* in, const std::vector<std::size_t>& send_counts, float* out,
                          const std::vector<std::size_t>& recv_counts, int group);
};

// (inline: the CUDA backend's module links no exec/ library)
inline void Communicator::all_to_all(StreamContext& s, const float* in, const std::vector<std::size_t>& send_counts,
                                     float* out, const std::vector<std::size_t>& recv_counts, int group) {
  const std::size_t k = send_counts.size();
  const std::string who = "rank " + std::to_string(rank()) + ": all-to-all over group " + std::to_string(group);
  if (recv_counts.size() != k) throw CommError(who + " with unequal count lists");
  // 1. Every member's rank and send counts, each number as two floats holding its 32-bit halves (an all-gather
  // copies bits); a member finds its index by its rank.
  const std::size_t per = 2 * (k + 1);
  std::vector<float> mine(per), all(per * k);
  auto put = [&](std::size_t at, std::uint64_t v) {
    const std::uint32_t half[2] = {static_cast<std::uint32_t>(v), static_cast<std::uint32_t>(v >> 32)};
    std::memcpy(&mine[at], half, sizeof half);
  };
  auto get = [&](std::size_t at) {
    std::uint32_t half[2];
    std::memcpy(half, &all[at], sizeof half);
    return static_cast<std::size_t>(half[0]) | static_cast<std::size_t>(half[1]) << 32;
  };
  put(0, static_cast<std::uint64_t>(rank()));
  for (std::size_t j = 0; j < k; ++j) put(2 * (j + 1), send_counts[j]);
  all_gather(s, mine.data(), all.data(), per, group);
  auto count = [&](std::size_t from, std::size_t to) { return get(from * per + 2 * (to + 1)); };
  std::size_t me = k;
  for (std::size_t i = 0; i < k; ++i)
    if (get(i * per) == static_cast<std::size_t>(rank())) me = i;
  if (me == k) throw CommError(who + ": the group has another size than the count lists");
  std::size_t longest = 0;
  for (std::size_t i = 0; i < k; ++i) {
    std::size_t total = 0;
    for (std::size_t j = 0; j < k; ++j) total += count(i, j);
    longest = std::max(longest, total);
    if (count(i, me) != recv_counts[i]) throw all_to_all_mismatch(rank(), group, recv_counts[i], i, count(i, me));
  }
  // 2. Every member's blocks, padded to the longest.
  std::vector<float> padded(longest, 0.0f), blocks(longest * k);
  std::size_t mine_total = 0;
  for (std::size_t c : send_counts) mine_total += c;
  if (mine_total) std::memcpy(padded.data(), in, mine_total * sizeof(float));
  all_gather(s, padded.data(), blocks.data(), longest, group);
  std::size_t at = 0;
  for (std::size_t i = 0; i < k; ++i) {
    std::size_t offset = 0;
    for (std::size_t j = 0; j < me; ++j) offset += count(i, j);
    if (recv_counts[i]) std::memcpy(out + at, blocks.data() + i * longest + offset, recv_counts[i] * sizeof(float));
    at += recv_counts[i];
  }
}

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
