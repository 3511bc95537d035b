#include "exec/dist/link.h"

#include <cstring>

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

namespace trainsim::exec::dist {

namespace {

constexpr std::uint32_t kMagic = 0x31465354;  // "TSF1"
constexpr std::uint64_t kMaxTag = 1 << 16;
constexpr std::uint64_t kMaxData = std::uint64_t{1} << 36;  // 64 GiB: a sanity bound, not a limit in practice

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

}  // namespace

std::vector<unsigned char> encode_frame(const Frame& f) {
  std::vector<unsigned char> out(48 + f.tag.size() + f.data.size());
  unsigned char* p = out.data();
  put<std::uint32_t>(p, kMagic);
  p[4] = f.kind;
  put<std::int32_t>(p + 8, f.src);
  put<std::int32_t>(p + 12, f.dst);
  put<std::int32_t>(p + 16, f.group);
  put<std::uint64_t>(p + 20, f.seq);
  put<std::uint64_t>(p + 28, f.count);
  put<std::uint32_t>(p + 36, static_cast<std::uint32_t>(f.tag.size()));
  put<std::uint64_t>(p + 40, f.data.size());
  std::memcpy(p + 48, f.tag.data(), f.tag.size());
  if (!f.data.empty()) std::memcpy(p + 48 + f.tag.size(), f.data.data(), f.data.size());
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

void Link::read_header() {
  asio::async_read(socket_, asio::buffer(header_), [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
    if (ec) return self->end(ec == asio::error::eof ? "end of file" : ec.message());
    const unsigned char* p = self->header_.data();
    if (get<std::uint32_t>(p) != kMagic) return self->end("not a trainsim peer (bad frame header)");
    Frame& f = self->incoming_;
    f = Frame{};
    f.kind = p[4];
    f.src = get<std::int32_t>(p + 8);
    f.dst = get<std::int32_t>(p + 12);
    f.group = get<std::int32_t>(p + 16);
    f.seq = get<std::uint64_t>(p + 20);
    f.count = get<std::uint64_t>(p + 28);
    const std::uint64_t tag = get<std::uint32_t>(p + 36), data = get<std::uint64_t>(p + 40);
    if (tag > kMaxTag || data > kMaxData) return self->end("malformed frame (length out of bounds)");
    self->body_.resize(tag + data);
    asio::async_read(self->socket_, asio::buffer(self->body_), [self, tag](boost::system::error_code ec2, std::size_t) {
      if (ec2) return self->end(ec2 == asio::error::eof ? "end of file" : ec2.message());
      Frame& g = self->incoming_;
      g.tag.assign(self->body_.begin(), self->body_.begin() + static_cast<std::ptrdiff_t>(tag));
      g.data.assign(self->body_.begin() + static_cast<std::ptrdiff_t>(tag), self->body_.end());
      self->last_heard_ = Clock::now();
      if (g.kind == kBye) self->said_bye = true;
      if (self->on_frame_) self->on_frame_(std::move(g));
      if (!self->ended_) self->read_header();
    });
  });
}

void Link::send(Frame f) {
  auto bytes = encode_frame(f);
  asio::post(socket_.get_executor(), [self = shared_from_this(), bytes = std::move(bytes)]() mutable {
    if (self->ended_ || self->finish_) return;
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
