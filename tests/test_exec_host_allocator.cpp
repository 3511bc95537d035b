// The CPU backend's host memory (exec/buffer.h, HostAllocator): buffers of every size are 64-byte aligned and
// hold what is written to them; the bytes counted are the bytes asked, whatever is kept; a freed large buffer
// is reused by the next of its size instead of new memory; what is kept stays within the most ever in use at
// once, however many sizes come and go.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "exec/buffer.h"

using namespace trainsim::exec;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

}  // namespace

TEST_CASE("exec host allocator: aligned buffers that keep their contents, counted as asked") {
  HostAllocator alloc;
  std::vector<BufferPtr> held;
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, kMiB - 8, 2 * kMiB, 3 * kMiB + 4,
                            13 * kMiB + 12345}) {
    BufferPtr b = alloc.allocate(bytes);
    CHECK(reinterpret_cast<std::uintptr_t>(b->data()) % 64 == 0);
    CHECK(b->bytes() == bytes);
    std::memset(b->data(), 0x5a, bytes);
    held.push_back(std::move(b));
  }
  std::size_t asked = 0;
  for (const BufferPtr& b : held) {
    asked += b->bytes();
    const auto* bytes = b->as<unsigned char>();
    bool intact = true;
    for (std::size_t i = 0; i < b->bytes(); i += 4093) intact = intact && bytes[i] == 0x5a;
    if (b->bytes() > 0) intact = intact && bytes[b->bytes() - 1] == 0x5a;
    CHECK(intact);
  }
  CHECK(alloc.current_bytes() == asked);
  CHECK(alloc.peak_bytes() == asked);
  held.clear();
  CHECK(alloc.current_bytes() == 0);
  CHECK(alloc.peak_bytes() == asked);
  if (!HostAllocator::maps_large_buffers) return;  // (AddressSanitizer aborts on such sizes instead of throwing)
  // A size no machine has, one whose rounding up would wrap: OutOfMemory (a std::bad_alloc), nothing counted.
  CHECK_THROWS_AS(alloc.allocate(std::numeric_limits<std::size_t>::max() - 100), OutOfMemory);
  CHECK_THROWS_AS(alloc.allocate(std::size_t{1} << 62), OutOfMemory);
  CHECK(alloc.current_bytes() == 0);
}

TEST_CASE("exec host allocator: a freed large buffer is reused by the next of its rounded size") {
  if (!HostAllocator::maps_large_buffers) return;  // (a sanitized build keeps every buffer on operator new)
  HostAllocator alloc;
  void* first = nullptr;
  {
    BufferPtr a = alloc.allocate(3 * kMiB);
    first = a->data();
    CHECK(reinterpret_cast<std::uintptr_t>(first) % (2 * kMiB) == 0);
    CHECK(alloc.cached_bytes() == 0);
  }
  CHECK(alloc.cached_bytes() == 4 * kMiB);  // 3 MiB rounded up to whole 2 MiB pages
  CHECK(alloc.current_bytes() == 0);
  {
    BufferPtr b = alloc.allocate(4 * kMiB - 64);  // the same rounded size: the same block
    CHECK(b->data() == first);
    CHECK(alloc.cached_bytes() == 0);
    CHECK(alloc.current_bytes() == 4 * kMiB - 64);
  }
  {
    BufferPtr small = alloc.allocate(kMiB);  // under 2 MiB: operator new, the kept block stays kept
    CHECK(small->data() != first);
    CHECK(alloc.cached_bytes() == 4 * kMiB);
  }
}

TEST_CASE("exec host allocator: what is kept stays within the most ever in use at once") {
  if (!HostAllocator::maps_large_buffers) return;
  HostAllocator alloc;
  {
    BufferPtr a = alloc.allocate(6 * kMiB);
    BufferPtr b = alloc.allocate(2 * kMiB);
  }  // 8 MiB was in use at once
  CHECK(alloc.cached_bytes() == 8 * kMiB);
  // Sizes never asked before, one at a time: each maps anew, and the oldest kept go back to the system.
  for (std::size_t mib = 10; mib <= 30; mib += 2) {
    BufferPtr c = alloc.allocate(mib * kMiB);
    CHECK(alloc.cached_bytes() <= 30 * kMiB);
  }
  CHECK(alloc.cached_bytes() <= 30 * kMiB);  // (the high-water mark: the 30 MiB buffer)
  CHECK(alloc.cached_bytes() >= 28 * kMiB);  // the last freed, 30 MiB, is kept
  // One buffer in use at a time never has more than its own size kept beside it.
  HostAllocator one;
  for (int round = 0; round < 3; ++round)
    for (std::size_t mib = 2; mib <= 12; mib += 2) {
      BufferPtr c = one.allocate(mib * kMiB);
      CHECK(one.cached_bytes() <= 12 * kMiB);
    }
  CHECK(one.cached_bytes() <= 12 * kMiB);
}
