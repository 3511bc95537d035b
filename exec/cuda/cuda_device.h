// The CUDA backend's device (issue 8): one GPU's memory, CudaKernels, and one cudaStream per schedule stream.
// As CpuDevice, each stream has a host worker thread that takes its work in submission order once the
// work's `after` events have been recorded; the worker then makes the stream wait on those CUDA events
// (cudaStreamWaitEvent), runs the work (which only enqueues kernels, copies and communication on the stream)
// and records the work's completion event. No device-wide synchronisation happens inside a step.
//
// Memory: cudaMallocAsync from the device's default pool; a buffer released while work that uses it may be
// in flight is freed only once every stream of the device has passed the point where it was released
// (events recorded at release), so freeing never waits on the GPU. Timings: a CUDA event pair per piece of
// work, placed on the host clock through an event recorded when the device was made.
//
// NOT YET RUN ON A GPU: compiled and linked only.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "exec/device.h"

namespace trainsim::exec::cuda {

class CudaKernels;
class CudaDevice;

/// Device memory of one rank, counted by the Allocator base.
class CudaAllocator final : public Allocator {
 public:
  CudaAllocator(int device, CudaDevice* owner);
  ~CudaAllocator() override;
  /// Frees what was released and whose uses have completed. Waits for all of it when `wait`.
  void reclaim(bool wait) noexcept;

 protected:
  void* raw_allocate(std::size_t bytes) override;
  void raw_free(void* p, std::size_t bytes) override;

 private:
  struct Pending {
    void* p;
    std::vector<cudaEvent_t> events;
  };
  void reclaim_locked(bool wait) noexcept;
  int device_;
  CudaDevice* owner_;
  cudaStream_t stream_ = nullptr;  // where allocations and frees are ordered
  std::mutex mu_;
  std::deque<Pending> pending_;
};

class CudaDevice final : public Device {
 public:
  /// A rank on GPU `device`; `epoch` is time zero of the timings. Throws CudaError when the GPU cannot be used.
  CudaDevice(int device, std::chrono::steady_clock::time_point epoch);
  ~CudaDevice() override;

  std::string name() const override { return "cuda"; }
  int device() const { return device_; }
  Allocator& memory() override { return *memory_; }
  EventPtr submit(int stream, const std::vector<EventPtr>& after, std::function<void(StreamContext&)> work,
                  int tag) override;
  void synchronize() override;
  void abort(const std::string& why) override;
  void drain() noexcept override;
  void download(void* dst, const void* src, std::size_t bytes) override;
  std::vector<WorkTiming> take_timings() override;
  void set_error_handler(std::function<void(const std::string&)> on_error) override;

  /// The streams made so far (for the allocator's release events). Thread-safe.
  std::vector<cudaStream_t> streams();

 private:
  struct Done;
  struct Work {
    std::vector<EventPtr> after;
    std::function<void(StreamContext&)> fn;
    int tag = -1;
    std::shared_ptr<Done> done;
  };
  struct Worker;
  struct Timing {
    int tag;
    cudaEvent_t start;
    std::shared_ptr<Done> end;
    std::size_t bytes;
  };
  void run(Worker& w);
  void sync_streams(bool throw_errors);

  int device_;
  std::chrono::steady_clock::time_point epoch_;
  std::int64_t epoch_offset_ns_ = 0;  // host time of epoch_event_ since epoch_
  cudaEvent_t epoch_event_ = nullptr;
  std::unique_ptr<CudaAllocator> memory_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Worker>> workers_;  // by stream index
  std::mutex streams_mu_;
  std::vector<cudaStream_t> streams_;
  std::size_t pending_ = 0;
  bool aborted_ = false, stopping_ = false;
  std::string abort_reason_;
  std::exception_ptr error_;
  std::function<void(const std::string&)> on_error_;
  std::vector<Timing> timings_;
};

/// Number of CUDA devices visible; 0 when there are none or no driver. `why` gets the runtime's reason then.
int visible_devices(std::string* why = nullptr);

}  // namespace trainsim::exec::cuda
