// Backend memory: a Buffer is one allocation of an Allocator (host memory on the CPU backend, device memory
// on CUDA), freed when the last shared_ptr to it goes. Every Allocator counts the bytes it has out and their
// peak: the executor's measured memory per rank.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

namespace trainsim::exec {

class Allocator;

/// One allocation. Not copyable; shared through std::shared_ptr.
class Buffer {
 public:
  Buffer(Allocator* owner, void* data, std::size_t bytes) : owner_(owner), data_(data), bytes_(bytes) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  /// The memory as an array of U (backend memory: dereference only on the backend that owns it).
  template <typename U>
  U* as() const {
    return static_cast<U*>(data_);
  }

 private:
  Allocator* owner_;
  void* data_;
  std::size_t bytes_;
};

using BufferPtr = std::shared_ptr<Buffer>;

/// Hands out Buffers and counts their bytes. Thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// A buffer of `bytes` bytes (contents undefined; 64-byte aligned). Throws std::bad_alloc.
  BufferPtr allocate(std::size_t bytes);
  /// Bytes allocated and not yet freed.
  std::size_t current_bytes() const { return current_.load(); }
  /// Highest current_bytes() since construction or the last reset_peak().
  std::size_t peak_bytes() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

 protected:
  virtual void* raw_allocate(std::size_t bytes) = 0;
  virtual void raw_free(void* p, std::size_t bytes) = 0;

 private:
  friend class Buffer;
  void release(void* p, std::size_t bytes);
  std::atomic<std::size_t> current_{0};
  std::atomic<std::size_t> peak_{0};
};

/// Host memory (aligned operator new).
class HostAllocator final : public Allocator {
 protected:
  void* raw_allocate(std::size_t bytes) override;
  void raw_free(void* p, std::size_t bytes) override;
};

}  // namespace trainsim::exec
