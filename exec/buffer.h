// Backend memory: a Buffer is one allocation of an Allocator (host memory on the CPU backend, device memory
// on CUDA), freed when the last shared_ptr to it goes. Every Allocator counts the bytes it has out and their
// peak: the executor's measured memory per rank.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

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

/// Host memory (exec/host_allocator.cpp). Buffers under 2 MiB come from aligned operator new. Larger ones are
/// mapped on their own, 2 MiB-aligned and rounded up to 2 MiB, and advised to transparent huge pages: the GEMMs
/// over them miss the TLB less (bench/README.md, "Issue 23, fifth round"). A freed large block is kept for reuse
/// by a later buffer of the same rounded size; the oldest kept go back to the system once the kept bytes pass
/// the most ever in use at once, so a replay's steady state maps no new memory, and the memory held stays within
/// twice its high-water mark. current_bytes() and peak_bytes() count what the buffers asked, never what is kept.
/// (A build with AddressSanitizer keeps every buffer on operator new.) Thread-safe.
class HostAllocator final : public Allocator {
 public:
  HostAllocator() = default;
  HostAllocator(const HostAllocator&) = delete;
  HostAllocator& operator=(const HostAllocator&) = delete;
  /// Unmaps the kept blocks. Every Buffer from this allocator must be gone.
  ~HostAllocator() override;
  std::string memory_name() const override { return "host memory"; }
  /// Bytes of freed large blocks kept for reuse (not in current_bytes()).
  std::size_t cached_bytes() const;
  /// Whether buffers of 2 MiB and more are mapped and kept as above: false in a build with AddressSanitizer, which
  /// checks operator new's memory, not ours.
  static constexpr bool maps_large_buffers =
#if defined(__SANITIZE_ADDRESS__)
      false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
      false;
#else
      true;
#endif
#else
      true;
#endif

 protected:
  void* raw_allocate(std::size_t bytes) override;
  void raw_free(void* p, std::size_t bytes) override;

 private:
  struct Block {
    void* p;
    std::size_t bytes;  // mapped: a multiple of 2 MiB
  };
  void unmap_locked(std::size_t keep);  // unmaps the oldest kept blocks until at most `keep` bytes are kept
  mutable std::mutex mu_;
  std::vector<Block> kept_;  // freed large blocks, oldest first
  std::size_t kept_bytes_ = 0;
  std::size_t large_in_use_ = 0;  // mapped bytes of the large buffers out now
  std::size_t large_high_ = 0;    // the most large_in_use_ has been
};

}  // namespace trainsim::exec
