// One TCP connection between two processes of a job, carrying Frames (exec/process_group.h) with Boost.Asio.
// Wire format of a frame: a 48-byte little-endian header (magic "TSF1", kind, flags, src, dst, group, seq,
// count, tag length, data length), the tag, the data, and, once the connection is protected (after the
// rendezvous's handshake, exec/dist/handshake.h), a 32-byte MAC of the frame and its number.
// Everything on a Link runs on its io_context's thread: send() may be called from any thread (it posts), the
// handlers run on the io thread.
//
// A frame's lengths come from the peer: a frame longer than the link's bound (small until the peer has
// proven the job's token, set_max_body) ends the connection before anything is allocated for it, and the
// data of a longer frame is read in chunks, so memory follows the bytes that really arrive, not the length
// a header claims.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "exec/dist/handshake.h"
#include "exec/process_group.h"

namespace trainsim::exec::dist {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

/// Transport frame kinds (below Frame::kFirstUserKind).
enum FrameKind : std::uint8_t {
  kHello = 1,      ///< peer -> rank 0: protocol, claimed rank, the peer's nonce (JSON; before authentication)
  kRefused = 2,    ///< rank 0 -> a connection it turned away: why (tag)
  kWait = 3,       ///< rank 0 -> peer: accepted, the rendezvous ends within `count` ms
  kWelcome = 4,    ///< rank 0 -> peer: everyone is here; data = the JobId
  kError = 5,      ///< either way: the job failed, tag = why
  kGather = 6,     ///< peer -> rank 0: seq, data
  kBroadcast = 7,  ///< rank 0 -> peer: seq, data
  kHeartbeat = 8,
  kBye = 9,        ///< either way, last: done; the connection closing next is not a failure
  kChallenge = 10, ///< rank 0 -> peer: rank 0's nonce, then its proof of the token (data, 64 bytes)
  kProof = 11,     ///< peer -> rank 0: the peer's proof of the token (data, 32 bytes)
  kIntro = 12,     ///< peer -> rank 0, after the proofs: rank, world size, schedule, model, settings (JSON)
};

/// The longest tag a frame may carry (64 KiB).
inline constexpr std::uint64_t kMaxFrameTag = std::uint64_t{1} << 16;
/// The longest tag + data a frame may carry on a protected link (64 GiB: a sanity bound, not a limit in practice).
inline constexpr std::uint64_t kMaxFrameBody = std::uint64_t{1} << 36;
/// The longest tag + data before the peer has proven the job's token (the hello, the proofs, a refusal).
inline constexpr std::uint64_t kMaxUnauthenticatedBody = 4096;

class Link : public std::enable_shared_from_this<Link> {
 public:
  using Clock = std::chrono::steady_clock;
  /// `peer` describes the other end in messages ("127.0.0.1:40412"). Frames start bounded by
  /// kMaxUnauthenticatedBody.
  Link(tcp::socket socket, std::string peer);

  /// Starts reading: `on_frame` gets every frame, `on_end` once, when the connection ends (end of file, an
  /// error, or a malformed, oversized or unauthenticated frame: the string says which). Call on the io thread.
  void start(std::function<void(Frame&&)> on_frame, std::function<void(const std::string&)> on_end);
  /// Replaces the handlers of a started link (on the io thread, or while no thread runs the io_context).
  void set_handlers(std::function<void(Frame&&)> on_frame, std::function<void(const std::string&)> on_end);
  /// Frames received from now on may carry up to `bytes` of tag and data (io thread).
  void set_max_body(std::uint64_t bytes) { max_body_ = bytes; }
  /// From now on every frame sent carries a MAC under keys.send, and every frame received must carry a valid
  /// one under keys.recv, numbered from 0 in each direction; a frame without one, or with a wrong one, ends
  /// the connection. Frames queued by send() before this call go out without. Call on the io thread before
  /// another thread sends.
  void protect(const SessionKeys& keys);
  bool is_protected() const { return protected_; }
  /// Queues `f` (thread-safe).
  void send(Frame f);
  /// After everything queued is written, shuts down the sending side (thread-safe).
  void finish_sending();
  /// Closes the socket now (on the io thread).
  void close();

  const std::string& peer() const { return peer_; }
  bool idle() const { return !writing_ && queue_.empty(); }  ///< io thread only
  bool ended() const { return ended_; }                        ///< io thread only
  Clock::time_point last_heard() const { return last_heard_; } ///< io thread only
  int rank = -1;          ///< the peer's rank once known
  bool said_bye = false;  ///< the peer sent kBye

 private:
  void read_header();
  void read_data(std::uint64_t remaining);
  void read_mac();
  void deliver();
  void write_next();
  void end(const std::string& why);

  tcp::socket socket_;
  std::string peer_;
  std::function<void(Frame&&)> on_frame_;
  std::function<void(const std::string&)> on_end_;
  std::array<unsigned char, 48> header_{};
  std::array<unsigned char, kMacBytes> mac_{};
  bool incoming_mac_ = false;
  Frame incoming_;
  std::uint64_t max_body_ = kMaxUnauthenticatedBody;
  std::atomic<bool> protected_{false};
  SessionKeys keys_{};
  std::uint64_t sent_ = 0, received_ = 0;  // frames numbered for their MACs (io thread)
  std::deque<std::vector<unsigned char>> queue_;
  bool writing_ = false, finish_ = false, ended_ = false;
  Clock::time_point last_heard_ = Clock::now();
};

/// The bytes of `f` on the wire, without a MAC; with `mac`, the header says one follows and kMacBytes of room
/// are left for it at the end.
std::vector<unsigned char> encode_frame(const Frame& f, bool mac = false);

}  // namespace trainsim::exec::dist
