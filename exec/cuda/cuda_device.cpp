#include "exec/cuda/cuda_device.h"

#include <limits>
#include <new>
#include <stdexcept>
#include <utility>

#include "exec/comm.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_kernels.h"

namespace trainsim::exec::cuda {

int visible_devices(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    cudaGetLastError();  // clear it
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount found no device";
  return n;
}

// ---- memory ----

CudaAllocator::CudaAllocator(int device, CudaDevice* owner) : device_(device), owner_(owner) {
  TS_CUDA(cudaSetDevice(device_));
  TS_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // Keep freed memory in the pool rather than giving it back to the driver at every synchronisation.
  cudaMemPool_t pool;
  TS_CUDA(cudaDeviceGetDefaultMemPool(&pool, device_));
  std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
  TS_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
}

CudaAllocator::~CudaAllocator() {
  reclaim(true);
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

void* CudaAllocator::raw_allocate(std::size_t bytes) {
  std::lock_guard lock(mu_);
  TS_CUDA(cudaSetDevice(device_));
  reclaim_locked(false);
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, bytes == 0 ? 256 : bytes, stream_);
  if (e == cudaErrorMemoryAllocation) {  // wait for what is pending to be freeable, then try once more
    cudaGetLastError();
    reclaim_locked(true);
    e = cudaMallocAsync(&p, bytes == 0 ? 256 : bytes, stream_);
  }
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw std::bad_alloc();
  }
  TS_CUDA(e);
  // The memory may be reused from frees ordered on stream_: once stream_ has caught up, any stream may use it.
  // (Frees are enqueued only after their uses completed, so this does not wait on other work.)
  TS_CUDA(cudaStreamSynchronize(stream_));
  return p;
}

void CudaAllocator::raw_free(void* p, std::size_t) {
  // Runs in ~Buffer, possibly while the device's streams still run work that uses p: record an event on each
  // stream now and free p once all have passed it.
  Pending pending{p, {}};
  bool ok = cudaSetDevice(device_) == cudaSuccess;
  if (ok) {
    for (cudaStream_t s : owner_->streams()) {
      cudaEvent_t ev;
      if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
        ok = false;
        break;
      }
      pending.events.push_back(ev);
      if (cudaEventRecord(ev, s) != cudaSuccess) {
        ok = false;
        break;
      }
    }
  }
  std::lock_guard lock(mu_);
  if (!ok) {  // the context is failing: wait for the device, then free
    cudaGetLastError();
    cudaDeviceSynchronize();
    for (cudaEvent_t ev : pending.events) cudaEventDestroy(ev);
    cudaFreeAsync(p, stream_);
    return;
  }
  pending_.push_back(std::move(pending));
  reclaim_locked(false);
}

void CudaAllocator::reclaim(bool wait) noexcept {
  std::lock_guard lock(mu_);
  reclaim_locked(wait);
}

void CudaAllocator::reclaim_locked(bool wait) noexcept {
  for (auto it = pending_.begin(); it != pending_.end();) {
    bool done = true;
    for (cudaEvent_t ev : it->events) {
      cudaError_t e = wait ? cudaEventSynchronize(ev) : cudaEventQuery(ev);
      if (e == cudaErrorNotReady) {
        done = false;
        break;
      }
    }
    if (!done) {
      ++it;
      continue;
    }
    for (cudaEvent_t ev : it->events) cudaEventDestroy(ev);
    cudaFreeAsync(it->p, stream_);
    it = pending_.erase(it);
  }
  cudaGetLastError();
}

// ---- streams and work ----

struct CudaDevice::Done : Event {
  cudaEvent_t ev = nullptr;  // recorded after the work; null when the work was skipped or failed early
  bool recorded = false;     // guarded by the device's mutex
  ~Done() override {
    if (ev) cudaEventDestroy(ev);
  }
};

struct CudaDevice::Worker final : StreamContext {
  CudaDevice* dev = nullptr;
  int index = 0;
  cudaStream_t cs = nullptr;  // the CUDA stream
  std::unique_ptr<CudaKernels> kern;
  std::deque<Work> queue;
  std::thread thread;

  Kernels<float>& kernels() override { return *kern; }
  int stream() const override { return index; }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    // From pageable memory the runtime stages the bytes before returning: `src` may be reused at once.
    if (bytes) TS_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cs));
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes && dst != src) TS_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cs));
  }
  void zero(void* dst, std::size_t bytes) override {
    if (bytes) TS_CUDA(cudaMemsetAsync(dst, 0, bytes, cs));
  }
  void* native() override { return cs; }
};

CudaDevice::CudaDevice(int device, std::chrono::steady_clock::time_point epoch) : device_(device), epoch_(epoch) {
  TS_CUDA(cudaSetDevice(device_));
  memory_ = std::make_unique<CudaAllocator>(device_, this);
  // Time zero of the CUDA events: an event recorded now, placed on the host clock.
  TS_CUDA(cudaEventCreate(&epoch_event_));
  TS_CUDA(cudaEventRecord(epoch_event_, nullptr));
  TS_CUDA(cudaEventSynchronize(epoch_event_));
  epoch_offset_ns_ =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch_).count();
}

CudaDevice::~CudaDevice() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (!aborted_) aborted_ = true, abort_reason_ = "the device was destroyed";
  }
  cv_.notify_all();
  for (auto& w : workers_)
    if (w && w->thread.joinable()) w->thread.join();
  cudaSetDevice(device_);
  sync_streams(false);
  for (auto& t : timings_) cudaEventDestroy(t.start);
  timings_.clear();
  memory_->reclaim(true);
  for (auto& w : workers_)
    if (w) {
      w->kern.reset();
      if (w->cs) cudaStreamDestroy(w->cs);
    }
  if (epoch_event_) cudaEventDestroy(epoch_event_);
  memory_.reset();
}

std::vector<cudaStream_t> CudaDevice::streams() {
  std::lock_guard lock(streams_mu_);
  return streams_;
}

EventPtr CudaDevice::submit(int stream, const std::vector<EventPtr>& after, std::function<void(StreamContext&)> work,
                            int tag) {
  if (stream < 0 || stream > 64) throw std::invalid_argument("stream index out of range (0..64)");
  auto done = std::make_shared<Done>();
  {
    std::lock_guard lock(mu_);
    if (aborted_) throw CommError(abort_reason_);
    if (workers_.size() <= static_cast<std::size_t>(stream)) workers_.resize(stream + 1);
    auto& w = workers_[stream];
    if (!w) {
      auto nw = std::make_unique<Worker>();
      nw->dev = this, nw->index = stream;
      TS_CUDA(cudaSetDevice(device_));
      TS_CUDA(cudaStreamCreateWithFlags(&nw->cs, cudaStreamNonBlocking));
      try {
        nw->kern = std::make_unique<CudaKernels>(nw->cs);
      } catch (...) {
        cudaStreamDestroy(nw->cs);
        throw;
      }
      {
        std::lock_guard sl(streams_mu_);
        streams_.push_back(nw->cs);
      }
      w = std::move(nw);
      w->thread = std::thread([this, wp = w.get()] { run(*wp); });
    }
    w->queue.push_back(Work{after, std::move(work), tag, done});
    ++pending_;
  }
  cv_.notify_all();
  return done;
}

void CudaDevice::run(Worker& w) {
  cudaSetDevice(device_);
  std::unique_lock lock(mu_);
  for (;;) {
    auto ready = [&] {
      if (stopping_) return true;
      if (w.queue.empty()) return false;
      if (aborted_) return true;
      for (const EventPtr& e : w.queue.front().after)
        if (e && !static_cast<Done&>(*e).recorded) return false;
      return true;
    };
    cv_.wait(lock, ready);
    if (w.queue.empty()) return;  // stopping
    Work work = std::move(w.queue.front());
    w.queue.pop_front();
    cudaEvent_t start = nullptr;
    if (!aborted_) {
      const std::size_t bytes = memory_->current_bytes();
      std::vector<cudaEvent_t> waits;
      for (const EventPtr& e : work.after)
        if (e && static_cast<Done&>(*e).ev) waits.push_back(static_cast<Done&>(*e).ev);
      lock.unlock();
      std::string failure;
      try {
        for (cudaEvent_t ev : waits) TS_CUDA(cudaStreamWaitEvent(w.cs, ev, 0));
        TS_CUDA(cudaEventCreate(&start));
        TS_CUDA(cudaEventRecord(start, w.cs));
        work.fn(w);
        cudaEvent_t end;
        TS_CUDA(cudaEventCreate(&end));
        work.done->ev = end;  // read by others only once `recorded` is set, under the mutex
        TS_CUDA(cudaEventRecord(end, w.cs));
      } catch (...) {  // (nothing may escape a worker thread: std::terminate; CpuDevice::fail does the same)
        try {
          std::rethrow_exception(std::current_exception());
        } catch (const std::exception& e) {
          try {
            failure = e.what();
          } catch (...) {
            failure = "out of memory";  // (short enough to need no allocation)
          }
        } catch (...) {
          failure = "unknown error";
        }
        lock.lock();
        if (!error_) error_ = std::current_exception();
        lock.unlock();
      }
      if (!failure.empty()) {
        std::function<void(const std::string&)> handler;
        {
          std::lock_guard g(mu_);
          try {
            handler = on_error_;
          } catch (...) {
          }
        }
        abort(failure);
        try {
          if (handler) handler(failure);
        } catch (...) {
        }
      }
      lock.lock();
      if (failure.empty())
        timings_.push_back(Timing{work.tag, start, work.done, bytes});
      else if (start)
        cudaEventDestroy(start);
    }
    work.done->recorded = true;
    --pending_;
    // Release what the work held (buffers of freed tensors: their frees are deferred, see CudaAllocator).
    auto fn = std::move(work.fn);
    auto after = std::move(work.after);
    lock.unlock();
    fn = nullptr;
    after.clear();
    lock.lock();
    cv_.notify_all();
    if (stopping_ && w.queue.empty()) return;
  }
}

void CudaDevice::sync_streams(bool throw_errors) {
  std::vector<cudaStream_t> ss = streams();
  for (cudaStream_t s : ss) {
    cudaError_t e = cudaStreamSynchronize(s);
    if (e != cudaSuccess && throw_errors) throw_cuda(e, "cudaStreamSynchronize", __FILE__, __LINE__);
  }
}

void CudaDevice::synchronize() {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return pending_ == 0 || aborted_; });
    if (error_) std::rethrow_exception(error_);
    if (aborted_) throw CommError(abort_reason_);
  }
  TS_CUDA(cudaSetDevice(device_));
  try {
    sync_streams(true);  // a kernel's own error (an illegal address, ...) surfaces here
  } catch (const std::exception& e) {
    abort(e.what());
    throw;
  }
  memory_->reclaim(false);
}

void CudaDevice::drain() noexcept {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return pending_ == 0; });
  }
  cudaSetDevice(device_);
  sync_streams(false);
}

void CudaDevice::abort(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    try {
      abort_reason_ = why;
    } catch (...) {  // (out of host memory: the reason stays empty, never the thread killed)
    }
  }
  cv_.notify_all();
}

void CudaDevice::download(void* dst, const void* src, std::size_t bytes) {
  if (!bytes) return;
  TS_CUDA(cudaSetDevice(device_));
  TS_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

std::vector<WorkTiming> CudaDevice::take_timings() {
  std::vector<Timing> ts;
  {
    std::lock_guard lock(mu_);
    ts = std::exchange(timings_, {});
  }
  TS_CUDA(cudaSetDevice(device_));
  std::vector<WorkTiming> out;
  out.reserve(ts.size());
  std::exception_ptr err;
  for (Timing& t : ts) {
    try {
      TS_CUDA(cudaEventSynchronize(t.end->ev));
      float a = 0, b = 0;
      TS_CUDA(cudaEventElapsedTime(&a, epoch_event_, t.start));
      TS_CUDA(cudaEventElapsedTime(&b, epoch_event_, t.end->ev));
      out.push_back(WorkTiming{t.tag, epoch_offset_ns_ + static_cast<std::int64_t>(a * 1e6),
                               epoch_offset_ns_ + static_cast<std::int64_t>(b * 1e6), t.bytes});
    } catch (...) {
      if (!err) err = std::current_exception();
    }
    cudaEventDestroy(t.start);
  }
  if (err) std::rethrow_exception(err);
  return out;
}

void CudaDevice::set_error_handler(std::function<void(const std::string&)> on_error) {
  std::lock_guard lock(mu_);
  on_error_ = std::move(on_error);
}

}  // namespace trainsim::exec::cuda
