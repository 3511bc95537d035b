// Discrete-event kernel: virtual time, an event heap, and rank coroutines on Boost.Asio (DESIGN §2).
//
// Ranks are C++20 coroutines (boost::asio::awaitable) on one single-threaded io_context. The kernel owns
// virtual time: a coroutine that waits hands its completion handler to the kernel, and the kernel posts it
// back when the event fires. Events are ordered by (time, sequence number), so ties break the same way on
// every run.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "sim/time.h"

namespace trainsim {

namespace asio = boost::asio;

/// A rank program, or any step of one.
using Task = asio::awaitable<void>;

/// Completion handler of a suspended coroutine. Held by pointer: asio 1.81's any_completion_handler
/// move-assignment re-wraps the handler instead of moving it, so it is only ever constructed, never assigned.
using Handler = std::unique_ptr<asio::any_completion_handler<void()>>;

/// A parked coroutine: set by Kernel::wait, resumed by Kernel::wake.
struct Waiter {
  Handler handler;
  bool armed() const { return handler != nullptr; }
};

/// Event heap and coroutine driver.
class Kernel {
 public:
  Kernel() = default;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;
  ~Kernel();

  /// Virtual time of the event being processed.
  Time now() const { return now_; }
  /// Schedules `program` to start at time 0; `on_exit(error)` runs when it returns or throws.
  void spawn(Task program, std::function<void(std::exception_ptr)> on_exit);
  /// Suspends the calling coroutine until virtual time `t` (returns at once if t <= now()).
  asio::awaitable<void> sleep_until(Time t);
  /// Suspends the calling coroutine until wake(w).
  asio::awaitable<void> wait(Waiter& w);
  /// Resumes the coroutine parked in `w` at now() (after the events already due at now()).
  /// Does nothing when nothing is parked there.
  void wake(Waiter& w);
  /// Runs events until none is left or stop() is called.
  void run();
  /// Makes run() return after the current event.
  void stop() { stopped_ = true; }
  /// Events processed so far.
  std::uint64_t events() const { return seq_; }

 private:
  struct Event {
    Time time;
    std::uint64_t seq;
    Handler handler;
  };
  void push(Time t, Handler h);

  asio::io_context io_;  // first member: outlives the handlers below, which post their frames' destruction
  std::vector<Event> heap_;
  Time now_ = 0;
  std::uint64_t seq_ = 0;
  bool stopped_ = false;
};

}  // namespace trainsim
