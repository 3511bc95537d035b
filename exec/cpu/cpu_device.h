// The CPU backend's device: host memory, CpuKernels<float>, and one worker thread per stream, each running
// its stream's work in submission order after that work's events (the CUDA stream model on threads).
// Two condition variables: the workers wait on one (new work, a finished event), synchronize() and drain()
// on the other, woken only when nothing is left (or on an abort): a finished op wakes no thread that cannot
// go on, so the rank's issuing thread, asleep in synchronize() for the whole step, does not take a core
// from the ranks' workers after every op.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "exec/cpu/cpu_kernels.h"
#include "exec/device.h"

namespace trainsim::exec {

class CpuDevice final : public Device {
 public:
  /// `epoch` is time zero of the timings (shared by the job's ranks so their timelines line up).
  explicit CpuDevice(std::chrono::steady_clock::time_point epoch);
  /// Aborts what is left and joins the workers.
  ~CpuDevice() override;

  std::string name() const override { return "cpu"; }
  Allocator& memory() override { return memory_; }
  EventPtr submit(int stream, const std::vector<EventPtr>& after, std::function<void(StreamContext&)> work,
                  int tag) override;
  void synchronize() override;
  void abort(const std::string& why) override;
  void drain() noexcept override;
  void download(void* dst, const void* src, std::size_t bytes) override;
  std::vector<WorkTiming> take_timings() override;
  void set_error_handler(std::function<void(const std::string&)> on_error) override;

 private:
  struct Done;
  struct Work {
    std::vector<EventPtr> after;
    std::function<void(StreamContext&)> fn;
    int tag = -1;
    std::shared_ptr<Done> done;
  };
  struct Worker;
  void run(Worker& w);
  /// Fails the device from a worker: records `thrown` (or, with `what`, a runtime_error saying it) as the error
  /// synchronize() rethrows, aborts, and calls the job's error handler. Never throws: nothing may escape a worker
  /// thread (std::terminate), not even the std::bad_alloc of building the message near a memory limit.
  void fail(std::exception_ptr thrown, const char* what = nullptr) noexcept;

  std::chrono::steady_clock::time_point epoch_;
  HostAllocator memory_;
  CpuKernels<float> kernels_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // workers: new work, or an event completed
  std::condition_variable idle_cv_;  // synchronize(), drain(): nothing pending, or aborted
  std::vector<std::unique_ptr<Worker>> workers_;  // by stream index
  std::size_t pending_ = 0;
  bool aborted_ = false, stopping_ = false;
  std::string abort_reason_;
  std::exception_ptr error_;
  std::function<void(const std::string&)> on_error_;
  std::vector<WorkTiming> timings_;
};

}  // namespace trainsim::exec
