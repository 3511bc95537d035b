// `trainsim launch`: forwarding the ranks' output. Each rank's stdout and stderr come to the launcher through
// a pipe; every line goes out on the launcher's stream of the same name, prefixed "[rank R] ". A line longer
// than kMaxPiece bytes comes out in pieces of at most kMaxPiece bytes, each prefixed on its own line (cut
// before a UTF-8 sequence, not inside one), so a rank that prints without newlines costs the launcher at most
// kMaxPiece bytes of memory per stream, and every byte still comes out, in order.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace trainsim::apps::launch {

/// The longest piece of a line the launcher holds for one stream before writing it out (bytes).
constexpr std::size_t kMaxPiece = 64 * 1024;

/// One of the launcher's own output streams (file descriptor 1 or 2). Writes go out whole, retried on EINTR,
/// partial writes and EAGAIN (a non-blocking descriptor). When a write fails (EPIPE: the reader is gone; the
/// launcher ignores SIGPIPE), the stream is marked broken and everything written to it later is dropped;
/// new_error() reports the failure once.
class Sink {
 public:
  explicit Sink(int fd) : fd_(fd) {}
  /// Writes all of `bytes`; false (dropped) when the stream is broken.
  bool write(std::string_view bytes);
  /// The errno of the write that broke the stream, the first time it is asked for after that; else nothing.
  std::optional<int> new_error();
  int fd() const { return fd_; }

 private:
  int fd_;
  int error_ = 0;
  bool reported_ = false;
};

/// One rank's stream (its stdout or its stderr): bytes in, prefixed lines out to a Sink.
class RankStream {
 public:
  RankStream(int rank, Sink* to) : prefix_("[rank " + std::to_string(rank) + "] "), to_(to) {}
  /// Takes bytes read from the rank; writes out every complete line, and pieces of kMaxPiece bytes of a
  /// longer one, in one write.
  void take(std::string_view bytes);
  /// At the end of the stream: the rest (a last line without a newline) goes out as a line.
  void finish();

 private:
  void line(std::string_view text);  ///< appends `text` to out_ as one prefixed line

  std::string prefix_;
  Sink* to_;
  std::string pending_;  ///< the start of a line not yet written: at most kMaxPiece bytes between calls
  std::string out_;      ///< what one call writes (kept to reuse its memory)
};

/// Where to cut `text` (longer than `limit` bytes) so that the first piece has at most `limit` bytes and no
/// UTF-8 sequence is split: `limit`, or up to 3 bytes less. Bytes that are not UTF-8 are cut at `limit`.
std::size_t piece_end(std::string_view text, std::size_t limit);

}  // namespace trainsim::apps::launch
