#include "exec/cpu/cpu_device.h"

#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "exec/comm.h"

namespace trainsim::exec {

struct CpuDevice::Done : Event {
  bool done = false;  // guarded by the device's mutex
};

struct CpuDevice::Worker final : StreamContext {
  CpuDevice* dev = nullptr;
  int index = 0;
  std::deque<Work> queue;
  std::thread thread;

  Kernels<float>& kernels() override { return dev->kernels_; }
  int stream() const override { return index; }
  void upload(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) override { std::memmove(dst, src, bytes); }
  void zero(void* dst, std::size_t bytes) override { std::memset(dst, 0, bytes); }
  void* native() override { return nullptr; }
};

CpuDevice::CpuDevice(std::chrono::steady_clock::time_point epoch) : epoch_(epoch) {}

CpuDevice::~CpuDevice() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (!aborted_) aborted_ = true, abort_reason_ = "the device was destroyed";
  }
  work_cv_.notify_all();
  idle_cv_.notify_all();
  for (auto& w : workers_)
    if (w && w->thread.joinable()) w->thread.join();
}

EventPtr CpuDevice::submit(int stream, const std::vector<EventPtr>& after, std::function<void(StreamContext&)> work,
                           int tag) {
  if (stream < 0 || stream > 64) throw std::invalid_argument("stream index out of range (0..64)");
  auto done = std::make_shared<Done>();
  {
    std::lock_guard lock(mu_);
    if (aborted_) throw CommError(abort_reason_);
    if (workers_.size() <= static_cast<std::size_t>(stream)) workers_.resize(stream + 1);
    auto& w = workers_[stream];
    if (!w) {
      auto fresh = std::make_unique<Worker>();
      fresh->dev = this, fresh->index = stream;
      try {
        fresh->thread = std::thread([this, wp = fresh.get()] { run(*wp); });
      } catch (const std::system_error& e) {  // out of threads or memory: no worker without its thread
        throw std::runtime_error(fmt::format("cannot start the worker thread of stream {}: {}", stream, e.what()));
      }
      w = std::move(fresh);
    }
    w->queue.push_back(Work{after, std::move(work), tag, done});
    ++pending_;
  }
  work_cv_.notify_all();
  return done;
}

void CpuDevice::run(Worker& w) {
  std::unique_lock lock(mu_);
  for (;;) {
    auto ready = [&] {
      if (stopping_) return true;
      if (w.queue.empty()) return false;
      if (aborted_) return true;
      for (const EventPtr& e : w.queue.front().after)
        if (e && !static_cast<Done&>(*e).done) return false;
      return true;
    };
    work_cv_.wait(lock, ready);
    if (w.queue.empty()) return;  // stopping
    Work work = std::move(w.queue.front());
    w.queue.pop_front();
    if (!aborted_) {
      const std::size_t bytes = memory_.current_bytes();
      const auto start = std::chrono::steady_clock::now();
      lock.unlock();
      std::exception_ptr thrown;
      try {
        work.fn(w);
      } catch (...) {
        thrown = std::current_exception();
      }
      const auto end = std::chrono::steady_clock::now();
      if (thrown) fail(thrown);
      lock.lock();
      auto ns = [&](auto t) { return std::chrono::duration_cast<std::chrono::nanoseconds>(t - epoch_).count(); };
      try {
        timings_.push_back(WorkTiming{work.tag, ns(start), ns(end), bytes});
      } catch (const std::bad_alloc&) {  // out of memory for the record: fail the job, never the thread
        lock.unlock();
        fail(std::current_exception(), "cannot allocate host memory to record the timing of an op");
        lock.lock();
      }
    }
    work.done->done = true;
    --pending_;
    work.fn = nullptr;  // release what the work held (buffers of freed tensors) before waking waiters
    work.after.clear();
    if (workers_.size() > 1) work_cv_.notify_all();  // another stream may wait for this event
    if (pending_ == 0 || aborted_) idle_cv_.notify_all();
    if (stopping_ && w.queue.empty()) return;
  }
}

void CpuDevice::synchronize() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return pending_ == 0 || aborted_; });
  if (error_) std::rethrow_exception(error_);
  if (aborted_) throw CommError(abort_reason_.empty() ? "the device was stopped (no host memory left for the reason)" : abort_reason_);
}

void CpuDevice::drain() noexcept {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return pending_ == 0; });
}

void CpuDevice::fail(std::exception_ptr thrown, const char* what) noexcept {
  // Under memory pressure (a rank near its address-space limit) building the message may itself throw
  // std::bad_alloc: the device fails all the same, with the exception it caught and the message it could build.
  std::string why;
  try {
    if (what) {
      why = what;
      thrown = std::make_exception_ptr(std::runtime_error(why));
    } else {
      try {
        std::rethrow_exception(thrown);
      } catch (const std::exception& e) {
        why = e.what();
      } catch (...) {
        why = "the work of an op threw an unknown exception";
        thrown = std::make_exception_ptr(std::runtime_error(why));
      }
    }
  } catch (...) {
  }
  std::function<void(const std::string&)> handler;
  {
    std::lock_guard g(mu_);
    if (!error_) error_ = thrown;
    try {
      handler = on_error_;
    } catch (...) {  // (no memory to copy it: the job's other ranks learn of it from their own waits)
    }
  }
  abort(why);
  try {
    if (handler) handler(why);
  } catch (...) {
  }
}

void CpuDevice::abort(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    try {
      abort_reason_ = why;
    } catch (const std::bad_alloc&) {  // (synchronize() says why it has no reason)
      abort_reason_.clear();
    }
  }
  work_cv_.notify_all();
  idle_cv_.notify_all();
}

void CpuDevice::download(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

std::vector<WorkTiming> CpuDevice::take_timings() {
  std::lock_guard lock(mu_);
  return std::exchange(timings_, {});
}

void CpuDevice::set_error_handler(std::function<void(const std::string&)> on_error) {
  std::lock_guard lock(mu_);
  on_error_ = std::move(on_error);
}

}  // namespace trainsim::exec
