#include "exec/dist/link.h"

#include <cstring>
#include <new>

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

namespace trainsim::exec::dist {

namespace {

constexpr std::uint32_t kMagic = 0x31465354;  // "TSF1"
constexpr std::size_t kHeader = 48;
constexpr unsigned char kFlagMac = 1;               // header byte 5: a MAC follows the data
constexpr std::uint64_t kChunk = std::uint64_t{1} << 20;  // data is read (and its buffer grown) 1 MiB at a time

template <typename T>
void put(unsigned char* p, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(v) >> (8 * i));
}
template <typename T>
T get(const unsigned char* p) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}

std::string read_error(const boost::system::error_code& ec) {
  return ec == asio::error::eof ? "end of file" : ec.message();
}

}  // namespace

std::vector<unsigned char> encode_frame(const Frame& f, bool mac) {
  std::vector<unsigned char> out(kHeader + f.tag.size() + f.data.size() + (mac ? kMacBytes : 0));
  unsigned char* p = out.data();
  put<std::uint32_t>(p, kMagic);
  p[4] = f.kind;
  p[5] = mac ? kFlagMac : 0;
  put<std::int32_t>(p + 8, f.src);
  put<std::int32_t>(p + 12, f.dst);
  put<std::int32_t>(p + 16, f.group);
  put<std::uint64_t>(p + 20, f.seq);
  put<std::uint64_t>(p + 28, f.count);
  put<std::uint32_t>(p + 36, static_cast<std::uint32_t>(f.tag.size()));
  put<std::uint64_t>(p + 40, f.data.size());
  std::memcpy(p + kHeader, f.tag.data(), f.tag.size());
  if (!f.data.empty()) std::memcpy(p + kHeader + f.tag.size(), f.data.data(), f.data.size());
  return out;
}

Link::Link(tcp::socket socket, std::string peer) : socket_(std::move(socket)), peer_(std::move(peer)) {
  boost::system::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
}

void Link::start(std::function<void(Frame&&)> on_frame, std::function<void(const std::string&)> on_end) {
  on_frame_ = std::move(on_frame);
  on_end_ = std::move(on_end);
  last_heard_ = Clock::now();
  read_header();
}

void Link::set_handlers(std::function<void(Frame&&)> on_frame, std::function<void(const std::string&)> on_end) {
  on_frame_ = std::move(on_frame);
  if (!ended_) on_end_ = std::move(on_end);
}

void Link::protect(const SessionKeys& keys) {
  keys_ = keys;
  sent_ = received_ = 0;
  protected_ = true;
}

void Link::read_header() {
  asio::async_read(socket_, asio::buffer(header_), [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
    if (ec) return self->end(read_error(ec));
    const unsigned char* p = self->header_.data();
    if (get<std::uint32_t>(p) != kMagic) return self->end("not a trainsim peer (bad frame header)");
    self->incoming_mac_ = (p[5] & kFlagMac) != 0;
    if (self->protected_ && !self->incoming_mac_)
      return self->end("a frame without a MAC on an authenticated connection (the connection was tampered with)");
    if (!self->protected_ && self->incoming_mac_) return self->end("a frame with a MAC before the handshake");
    const std::uint64_t tag = get<std::uint32_t>(p + 36), data = get<std::uint64_t>(p + 40);
    // Checked before anything is allocated: the lengths are the peer's word.
    if (tag > kMaxFrameTag || data > self->max_body_ || tag + data > self->max_body_)
      return self->end(fmt::format("a frame of {} bytes, above the limit of {} bytes{}", tag + data, self->max_body_,
                                   self->protected_ ? "" : " before authentication"));
    Frame& f = self->incoming_;
    f = Frame{};
    f.kind = p[4];
    f.src = get<std::int32_t>(p + 8);
    f.dst = get<std::int32_t>(p + 12);
    f.group = get<std::int32_t>(p + 16);
    f.seq = get<std::uint64_t>(p + 20);
    f.count = get<std::uint64_t>(p + 28);
    f.tag.resize(tag);  // at most 64 KiB (4 KiB before authentication)
    asio::async_read(self->socket_, asio::buffer(f.tag), [self, data](boost::system::error_code ec2, std::size_t) {
      if (ec2) return self->end(read_error(ec2));
      if (data > 0) {
        try {
          self->incoming_.data.reserve(std::min(data, kChunk * 16));
        } catch (const std::bad_alloc&) {
          return self->end(fmt::format("no memory for a frame of {} bytes", data));
        }
      }
      self->read_data(data);
    });
  });
}

void Link::read_data(std::uint64_t remaining) {
  if (remaining == 0) return read_mac();
  std::vector<unsigned char>& d = incoming_.data;
  const std::size_t have = d.size(), chunk = static_cast<std::size_t>(std::min(remaining, kChunk));
  try {
    d.resize(have + chunk);  // grows with the bytes that arrive (geometrically: amortised constant)
  } catch (const std::bad_alloc&) {
    return end(fmt::format("no memory for a frame of {} bytes", have + remaining));
  }
  asio::async_read(socket_, asio::buffer(d.data() + have, chunk),
                   [self = shared_from_this(), remaining, chunk](boost::system::error_code ec, std::size_t) {
                     if (ec) return self->end(read_error(ec));
                     self->read_data(remaining - chunk);
                   });
}

void Link::read_mac() {
  if (!incoming_mac_) return deliver();
  asio::async_read(socket_, asio::buffer(mac_), [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
    if (ec) return self->end(read_error(ec));
    const Frame& f = self->incoming_;
    const Mac expected = frame_mac(self->keys_.recv, self->received_++, self->header_.data(), self->header_.size(),
                                   reinterpret_cast<const unsigned char*>(f.tag.data()), f.tag.size(), f.data.data(),
                                   f.data.size());
    if (!mac_matches(expected, self->mac_.data(), self->mac_.size()))
      return self->end("a frame whose MAC is wrong (the connection was tampered with)");
    self->deliver();
  });
}

void Link::deliver() {
  last_heard_ = Clock::now();
  if (incoming_.kind == kBye) said_bye = true;
  if (on_frame_) on_frame_(std::move(incoming_));
  if (!ended_) read_header();
}

void Link::send(Frame f) {
  const bool mac = protected_;
  auto bytes = encode_frame(f, mac);
  asio::post(socket_.get_executor(), [self = shared_from_this(), bytes = std::move(bytes), mac]() mutable {
    if (self->ended_ || self->finish_) return;
    if (mac) {  // numbered here, on the io thread, in the order the frames go out
      const std::size_t body = bytes.size() - kHeader - kMacBytes;
      const Mac m = frame_mac(self->keys_.send, self->sent_++, bytes.data(), kHeader, bytes.data() + kHeader, body,
                              nullptr, 0);
      std::memcpy(bytes.data() + kHeader + body, m.data(), m.size());
    }
    self->queue_.push_back(std::move(bytes));
    if (!self->writing_) self->write_next();
  });
}

void Link::finish_sending() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->finish_ = true;
    if (!self->writing_ && !self->ended_) {
      boost::system::error_code ec;
      self->socket_.shutdown(tcp::socket::shutdown_send, ec);
    }
  });
}

void Link::write_next() {
  if (queue_.empty() || ended_) {
    writing_ = false;
    if (finish_ && !ended_) {
      boost::system::error_code ec;
      socket_.shutdown(tcp::socket::shutdown_send, ec);
    }
    return;
  }
  writing_ = true;
  asio::async_write(socket_, asio::buffer(queue_.front()), [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
    if (ec) {
      self->writing_ = false;
      self->queue_.clear();
      return self->end(ec.message());
    }
    self->queue_.pop_front();
    self->write_next();
  });
}

void Link::end(const std::string& why) {
  if (ended_) return;
  ended_ = true;
  boost::system::error_code ec;
  socket_.close(ec);
  if (on_end_) {
    auto cb = std::move(on_end_);
    on_end_ = nullptr;
    cb(why);
  }
}

void Link::close() { end("closed here"); }

}  // namespace trainsim::exec::dist
