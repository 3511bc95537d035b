// One TCP connection between two processes of a job, carrying Frames (exec/process_group.h) with Boost.Asio.
// Wire format of a frame: a 48-byte little-endian header (magic "TSF1", kind, src, dst, group, seq, count,
// tag length, data length) then the tag and the data. Everything on a Link runs on its io_context's thread:
// send() may be called from any thread (it posts), the handlers run on the io thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "exec/process_group.h"

namespace trainsim::exec::dist {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

/// Transport frame kinds (below Frame::kFirstUserKind).
enum FrameKind : std::uint8_t {
  kHello = 1,      ///< peer -> rank 0: who it is (JSON in data)
  kRefused = 2,    ///< rank 0 -> a connection it turned away: why (tag)
  kWait = 3,       ///< rank 0 -> peer: accepted, the rendezvous ends within `count` ms
  kWelcome = 4,    ///< rank 0 -> peer: everyone is here; data = the JobId
  kError = 5,      ///< either way: the job failed, tag = why
  kGather = 6,     ///< peer -> rank 0: seq, data
  kBroadcast = 7,  ///< rank 0 -> peer: seq, data
  kHeartbeat = 8,
  kBye = 9,        ///< either way, last: done; the connection closing next is not a failure
};

class Link : public std::enable_shared_from_this<Link> {
 public:
  using Clock = std::chrono::steady_clock;
  /// `peer` describes the other end in messages ("127.0.0.1:40412").
  Link(tcp::socket socket, std::string peer);

  /// Starts reading: `on_frame` gets every frame, `on_end` once, when the connection ends (end of file, an
  /// error, or a malformed frame: the string says which). Call on the io thread.
  void start(std::function<void(Frame&&)> on_frame, std::function<void(const std::string&)> on_end);
  /// Replaces the handlers of a started link (on the io thread, or while no thread runs the io_context).
  void set_handlers(std::function<void(Frame&&)> on_frame, std::function<void(const std::string&)> on_end);
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
  void write_next();
  void end(const std::string& why);

  tcp::socket socket_;
  std::string peer_;
  std::function<void(Frame&&)> on_frame_;
  std::function<void(const std::string&)> on_end_;
  std::array<unsigned char, 48> header_{};
  Frame incoming_;
  std::vector<unsigned char> body_;
  std::deque<std::vector<unsigned char>> queue_;
  bool writing_ = false, finish_ = false, ended_ = false;
  Clock::time_point last_heard_ = Clock::now();
};

/// The bytes of `f` on the wire.
std::vector<unsigned char> encode_frame(const Frame& f);

}  // namespace trainsim::exec::dist
