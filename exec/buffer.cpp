#include "exec/buffer.h"

#include <new>

#include <fmt/format.h>

namespace trainsim::exec {

Buffer::~Buffer() {
  if (owner_) owner_->release(data_, bytes_);
}

namespace {

std::string size_text(std::size_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
}

}  // namespace

BufferPtr Allocator::allocate(std::size_t bytes) {
  void* p = nullptr;
  try {
    p = raw_allocate(bytes);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(fmt::format("cannot allocate {} ({} bytes) of {}; this device holds {} already", size_text(bytes),
                                  bytes, memory_name(), size_text(current_bytes())));
  }
  std::size_t now = current_.fetch_add(bytes) + bytes;
  std::size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  try {
    return std::make_shared<Buffer>(this, p, bytes);
  } catch (...) {  // (the control block could not be allocated: give the memory back)
    release(p, bytes);
    throw;
  }
}

void Allocator::release(void* p, std::size_t bytes) {
  raw_free(p, bytes);
  current_.fetch_sub(bytes);
}

}  // namespace trainsim::exec
