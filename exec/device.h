// One rank's backend: its memory, its kernels and its streams (DESIGN §2, §5). The replay loop
// (exec/rank_executor.h) submits each op's work to the stream the schedule names, after the events of the
// ops that wrote what it reads: the CUDA model of streams and events, which the CPU backend follows with a
// worker thread per stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/buffer.h"
#include "exec/kernels.h"

namespace trainsim::exec {

/// Completion of submitted work (a CUDA event; a flag on the CPU). Opaque to the replay loop.
class Event {
 public:
  virtual ~Event() = default;
};
using EventPtr = std::shared_ptr<Event>;

/// What an op's work runs with: the stream's kernels and stream-ordered copies.
class StreamContext {
 public:
  virtual ~StreamContext() = default;
  virtual Kernels<float>& kernels() = 0;
  /// Index of the stream (0 = compute).
  virtual int stream() const = 0;
  /// Copies `bytes` from host memory into backend memory, in order with the stream's work. The host memory
  /// may be reused as soon as this returns.
  virtual void upload(void* dst, const void* src, std::size_t bytes) = 0;
  /// Copies backend memory into backend memory, in order with the stream's work.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  /// Zeroes backend memory, in order with the stream's work.
  virtual void zero(void* dst, std::size_t bytes) = 0;
  /// The backend's native stream handle (cudaStream_t on CUDA), nullptr on the CPU.
  virtual void* native() = 0;
};

/// Host-clock timing of one submitted piece of work: the op it belongs to and when it ran, in nanoseconds
/// since the device's epoch, with the rank's allocated bytes when it started.
struct WorkTiming {
  int tag = -1;  ///< the op index given to submit()
  std::int64_t start_ns = 0, end_ns = 0;
  std::size_t bytes_at_start = 0;
};

/// One rank's backend.
class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  /// The rank's memory: every tensor, saved activation and temporary comes from here.
  virtual Allocator& memory() = 0;
  /// Runs `work` on stream `stream` after every event in `after` has completed, in submission order with the
  /// stream's other work; returns the event of its completion. `tag` labels its timing. Never blocks on the
  /// work itself. Throws when the device has been aborted.
  virtual EventPtr submit(int stream, const std::vector<EventPtr>& after, std::function<void(StreamContext&)> work,
                          int tag) = 0;
  /// Waits for everything submitted. Rethrows the first exception a piece of work raised (and the device
  /// is aborted then).
  virtual void synchronize() = 0;
  /// Stops the device: work not yet started is skipped, waits end; synchronize() then throws. Thread-safe;
  /// idempotent.
  virtual void abort(const std::string& why) = 0;
  /// Waits until no submitted work is running or queued (work of an aborted device is skipped), without
  /// throwing: after it, nothing the work captured is touched any more.
  virtual void drain() noexcept = 0;
  /// Copies backend memory to the host (after synchronize()).
  virtual void download(void* dst, const void* src, std::size_t bytes) = 0;
  /// The timings of the work run since the last call, in completion order per stream.
  virtual std::vector<WorkTiming> take_timings() = 0;
  /// Calls `on_error` (once, from the thread that saw it) when a piece of work throws: the job aborts the
  /// other ranks through it.
  virtual void set_error_handler(std::function<void(const std::string&)> on_error) = 0;
};

}  // namespace trainsim::exec
