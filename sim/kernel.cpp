#include "sim/kernel.h"

#include <algorithm>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace trainsim {

namespace {
// Min-heap order on (time, seq).
bool later(const auto& a, const auto& b) { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }
}  // namespace

Kernel::~Kernel() {
  // Drop parked coroutines; asio posts the destruction of their frames to io_, so let it run them.
  heap_.clear();
  io_.restart();
  io_.poll();
}

void Kernel::spawn(Task program, std::function<void(std::exception_ptr)> on_exit) {
  asio::co_spawn(io_, std::move(program), [cb = std::move(on_exit)](std::exception_ptr e) { cb(e); });
}

void Kernel::push(Time t, Handler h) {
  heap_.push_back(Event{t, seq_++, std::move(h)});
  std::push_heap(heap_.begin(), heap_.end(), [](const Event& a, const Event& b) { return later(a, b); });
}

asio::awaitable<void> Kernel::sleep_until(Time t) {
  if (t <= now_) co_return;
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
      [this, t](auto handler) { push(t, std::make_unique<asio::any_completion_handler<void()>>(std::move(handler))); }, asio::use_awaitable);
}

asio::awaitable<void> Kernel::wait(Waiter& w) {
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
      [&w](auto handler) { w.handler = std::make_unique<asio::any_completion_handler<void()>>(std::move(handler)); }, asio::use_awaitable);
}

void Kernel::wake(Waiter& w) {
  if (!w.armed()) return;
  push(now_, std::move(w.handler));
}

void Kernel::run() {
  io_.restart();
  io_.poll();  // start every program and run each to its first wait
  while (!stopped_ && !heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), [](const Event& a, const Event& b) { return later(a, b); });
    Event e = std::move(heap_.back());
    heap_.pop_back();
    now_ = e.time;
    asio::post(io_, [h = std::move(e.handler)]() mutable { std::move(*h)(); });
    io_.restart();
    io_.poll();
  }
}

}  // namespace trainsim
