#include "apps/launch_output.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace trainsim::apps::launch {

bool Sink::write(std::string_view bytes) {
  while (!bytes.empty() && error_ == 0) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};  // a descriptor left non-blocking by whoever opened it: wait until it drains
      if (poll(&p, 1, -1) < 0 && errno != EINTR) error_ = errno;
    } else {
      error_ = n < 0 ? errno : EIO;
    }
  }
  return error_ == 0;
}

std::optional<int> Sink::new_error() {
  if (error_ == 0 || reported_) return std::nullopt;
  reported_ = true;
  return error_;
}

std::size_t piece_end(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return text.size();
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  auto continuation = [](unsigned char b) { return (b & 0xC0) == 0x80; };  // 10xxxxxx
  // When the byte at `limit` continues a sequence, cut before that sequence's lead byte (at most 3 back),
  // if the lead byte announces a sequence that reaches past `limit`.
  if (!continuation(byte(limit))) return limit;
  for (std::size_t back = 1; back <= 3 && back < limit; ++back) {
    const unsigned char b = byte(limit - back);
    if (continuation(b)) continue;
    const std::size_t length = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    return length > back ? limit - back : limit;
  }
  return limit;
}

void RankStream::take(std::string_view bytes) {
  // pending_ holds at most kMaxPiece bytes between calls, and `bytes` is one read: this stays bounded.
  pending_.append(bytes);
  out_.clear();
  const std::string_view text = pending_;
  std::size_t start = 0;
  for (;;) {
    const std::size_t nl = text.find('\n', start);
    const std::size_t end = nl == std::string_view::npos ? text.size() : nl;
    if (end - start > kMaxPiece) {  // longer than a piece (with or without its newline yet): cut one off
      const std::size_t cut = piece_end(text.substr(start), kMaxPiece);
      line(text.substr(start, cut));
      start += cut;
      continue;
    }
    if (nl == std::string_view::npos) break;
    line(text.substr(start, nl - start));
    start = nl + 1;
  }
  pending_.erase(0, start);
  if (!out_.empty()) to_->write(out_);
}

void RankStream::line(std::string_view text) {
  out_ += prefix_;
  out_ += text;
  out_ += '\n';
}

void RankStream::finish() {
  if (pending_.empty()) return;
  out_.clear();
  line(pending_);
  pending_.clear();
  to_->write(out_);
}

}  // namespace trainsim::apps::launch
