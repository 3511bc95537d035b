// Backend memory: a Buffer is one allocation of an Allocator (host memory on the CPU backend, device memory
// on CUDA), freed when the last shared_ptr to it goes. Every Allocator counts the bytes it has out and their
// peak: the executor's measured memory per rank.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <new>
#include <string>

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

/// An allocation that failed, with what was asked: a std::bad_alloc whose what() reads "cannot allocate 4.00 GiB
/// (4294967296 bytes) of host memory; this device holds 1.50 GiB already".
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

/// Hands out Buffers and counts their bytes. Thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// What the allocator's memory is, for messages: "device memory" unless a backend says more.
  virtual std::string memory_name() const { return "device memory"; }
  /// A buffer of `bytes` bytes (contents undefined; 64-byte aligned). Throws OutOfMemory (a std::bad_alloc)
  /// naming the size and what the allocator holds already.
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
 public:
  std::string memory_name() const override { return "host memory"; }

 protected:
  void* raw_allocate(std::size_t bytes) override;
  void raw_free(void* p, std::size_t bytes) override;
};

}  // namespace trainsim::exec
