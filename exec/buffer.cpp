#include "exec/buffer.h"

#include <new>

namespace trainsim::exec {

Buffer::~Buffer() {
  if (owner_) owner_->release(data_, bytes_);
}

BufferPtr Allocator::allocate(std::size_t bytes) {
  void* p = raw_allocate(bytes);
  std::size_t now = current_.fetch_add(bytes) + bytes;
  std::size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return std::make_shared<Buffer>(this, p, bytes);
}

void Allocator::release(void* p, std::size_t bytes) {
  raw_free(p, bytes);
  current_.fetch_sub(bytes);
}

void* HostAllocator::raw_allocate(std::size_t bytes) {
  return ::operator new(bytes == 0 ? 64 : bytes, std::align_val_t{64});
}

void HostAllocator::raw_free(void* p, std::size_t) { ::operator delete(p, std::align_val_t{64}); }

}  // namespace trainsim::exec
