// Hostile and honest peers of a rendezvous for the tests (exec/dist/): raw TCP connections on 127.0.0.1 that
// send whatever a test wants (a header claiming 60 GiB, malformed JSON, nothing at all), a listener that plays
// a fake rank 0, and a job member that performs the real handshake (it knows the token) and then misbehaves.
// Blocking POSIX sockets, every read bounded by a time limit.
#pragma once

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "exec/dist/handshake.h"
#include "exec/dist/link.h"

namespace trainsim::testing {

/// A frame as read off the wire by a test.
struct RawFrame {
  std::uint8_t kind = 0;
  bool mac = false;
  std::uint64_t count = 0;
  std::string tag;
  std::vector<unsigned char> data;
  std::vector<unsigned char> bytes;  ///< everything read for it, header to MAC
};

/// A 48-byte frame header with the lengths a test chooses (the peer's word, not the truth).
inline std::vector<unsigned char> raw_header(std::uint8_t kind, std::uint32_t tag_bytes, std::uint64_t data_bytes,
                                             std::uint8_t flags = 0) {
  exec::Frame f;
  f.kind = kind;
  auto h = exec::dist::encode_frame(f);
  h[5] = flags;
  for (int i = 0; i < 4; ++i) h[36 + i] = static_cast<unsigned char>(tag_bytes >> (8 * i));
  for (int i = 0; i < 8; ++i) h[40 + i] = static_cast<unsigned char>(data_bytes >> (8 * i));
  return h;
}

/// A whole frame without a MAC.
inline std::vector<unsigned char> raw_frame(std::uint8_t kind, const std::string& data, const std::string& tag = "",
                                            std::uint64_t count = 0) {
  exec::Frame f;
  f.kind = kind, f.tag = tag, f.count = count;
  f.data.assign(data.begin(), data.end());
  return exec::dist::encode_frame(f);
}

class RawPeer {
 public:
  RawPeer() = default;
  explicit RawPeer(int fd) : fd_(fd) {}
  RawPeer(RawPeer&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RawPeer& operator=(RawPeer&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~RawPeer() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  /// Connects to 127.0.0.1:`port`, retrying for up to `limit_s` (the listener may not be up yet).
  static RawPeer connect(int port, double limit_s = 30) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
    do {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // (not inherited by the ranks the test starts)
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<std::uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return RawPeer(fd);
      }
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling for the listener, not synchronising
    } while (std::chrono::steady_clock::now() < until);
    return RawPeer();
  }

  /// Writes all of `bytes`; false when the connection is gone.
  bool send(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    while (n > 0) {
      ssize_t w = ::send(fd_, b, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      b += w, n -= static_cast<std::size_t>(w);
    }
    return true;
  }
  bool send(const std::vector<unsigned char>& v) { return send(v.data(), v.size()); }
  bool send(const std::string& s) { return send(s.data(), s.size()); }

  /// Reads exactly `n` bytes within `limit_s`; false when the connection ended or the time ran out.
  bool read_exact(void* p, std::size_t n, double limit_s) {
    auto* b = static_cast<unsigned char*>(p);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
    while (n > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
      ssize_t r = ::recv(fd_, b, n, 0);
      if (r <= 0) return false;
      b += r, n -= static_cast<std::size_t>(r);
    }
    return true;
  }

  /// Reads until the other end closes the connection (true) or `limit_s` passes (false); what arrived is
  /// appended to `got`.
  bool wait_closed(double limit_s, std::string* got = nullptr) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
    char buf[4096];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
      ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
      if (r <= 0) return true;  // end of file, or a reset
      if (got) got->append(buf, static_cast<std::size_t>(r));
    }
  }

  /// Reads one frame (its MAC too when its header says one follows) within `limit_s`.
  std::optional<RawFrame> read_frame(double limit_s) {
    RawFrame f;
    f.bytes.resize(48);
    if (!read_exact(f.bytes.data(), 48, limit_s)) return std::nullopt;
    auto get = [&](int at, int n) {
      std::uint64_t v = 0;
      for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(f.bytes[at + i]) << (8 * i);
      return v;
    };
    f.kind = f.bytes[4];
    f.mac = (f.bytes[5] & 1) != 0;
    f.count = get(28, 8);
    const std::uint64_t tag = get(36, 4), data = get(40, 8);
    if (tag + data > (1u << 24)) return std::nullopt;  // (a test's peer: nothing that large is expected)
    std::vector<unsigned char> rest(tag + data + (f.mac ? exec::dist::kMacBytes : 0));
    if (!read_exact(rest.data(), rest.size(), limit_s)) return std::nullopt;
    f.tag.assign(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(tag));
    f.data.assign(rest.begin() + static_cast<std::ptrdiff_t>(tag), rest.begin() + static_cast<std::ptrdiff_t>(tag + data));
    f.bytes.insert(f.bytes.end(), rest.begin(), rest.end());
    return f;
  }

 private:
  int fd_ = -1;
};

/// A listening socket on 127.0.0.1:`port` (0: a port the kernel picks): the place of a fake rank 0.
class RawListener {
 public:
  explicit RawListener(int port = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 16) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port_ = ntohs(a.sin_port);
  }
  ~RawListener() { ::close(fd_); }
  int port() const { return port_; }
  /// The next connection, within `limit_s` (not ok() when none came).
  RawPeer accept(double limit_s) {
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(limit_s * 1000)) <= 0) return RawPeer();
    return RawPeer(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

/// One end of a connection that has done the handshake: it numbers and MACs the frames it sends.
struct MacSender {
  exec::dist::Key key{};
  std::uint64_t sent = 0;
  std::vector<unsigned char> frame(exec::Frame f) {
    auto bytes = exec::dist::encode_frame(f, true);
    const std::size_t body = bytes.size() - 48 - exec::dist::kMacBytes;
    auto m = exec::dist::frame_mac(key, sent++, bytes.data(), 48, bytes.data() + 48, body, nullptr, 0);
    std::memcpy(bytes.data() + 48 + body, m.data(), m.size());
    return bytes;
  }
};

/// A job member played by the test: it knows the token and does the peer's side of the handshake by hand,
/// so that it can then send what an honest rank would not.
struct HostileMember {
  RawPeer peer;
  MacSender out;
  std::string error;  ///< why the handshake failed ("" when it went through)

  /// Connects to rank 0 at `port`, says hello as `rank`, checks rank 0's proof and sends its own.
  HostileMember(int port, const std::string& token, int rank) {
    using namespace exec::dist;
    peer = RawPeer::connect(port);
    if (!peer.ok()) {
      error = "cannot connect";
      return;
    }
    const Nonce mine = fresh_nonce();
    const nlohmann::json hello{{"protocol", 2}, {"rank", rank}, {"nonce", to_hex(mine.data(), mine.size())}};
    peer.send(raw_frame(kHello, hello.dump()));
    auto ch = peer.read_frame(30);
    if (!ch || ch->kind != kChallenge || ch->data.size() != 64) {
      error = "no challenge";
      return;
    }
    Nonce theirs;
    std::copy(ch->data.begin(), ch->data.begin() + 32, theirs.begin());
    if (!proof_matches(make_proof(token, Role::rank0, mine, theirs, rank), ch->data.data() + 32, 32)) {
      error = "rank 0's proof is wrong";
      return;
    }
    out.key = session_keys(token, Role::peer, mine, theirs, rank).send;
    exec::Frame p;
    p.kind = kProof;
    const Proof proof = make_proof(token, Role::peer, mine, theirs, rank);
    p.data.assign(proof.begin(), proof.end());
    peer.send(out.frame(p));
  }
  bool send(exec::Frame f) { return peer.send(out.frame(std::move(f))); }
  /// The introduction an honest rank `rank` of `world` sends for the identity {"h", "m", "s"}.
  static nlohmann::json intro(int rank, int world) {
    return {{"rank", rank}, {"world_size", world}, {"local_rank", rank}, {"schedule_hash", "h"},
            {"model", "m"},  {"settings", "s"},     {"host", "test"}};
  }
};

}  // namespace trainsim::testing
