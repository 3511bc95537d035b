// Host memory for the CPU backend (and the reference trainer). A replay allocates and frees the same large
// buffers every microbatch (activations, their gradients, the weights and their gradients): from glibc's heap
// they sit on 4 KiB pages, often freshly faulted in, and the GEMMs that stream through them miss the TLB. Buffers
// of 2 MiB and more are therefore mapped here, 2 MiB-aligned, with madvise(MADV_HUGEPAGE) (the kernel's
// transparent huge pages on request, Linux's default "madvise" mode), and kept for reuse once freed, so that a
// replay's steady state maps and zeroes no new memory. Measured: bench/README.md, "Issue 23, fifth round".
#include "exec/buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <new>

namespace trainsim::exec {

namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;  // x86-64's PMD huge page; elsewhere only a hint

bool is_large(std::size_t bytes) { return HostAllocator::maps_large_buffers && bytes >= kHugePage; }

std::size_t mapped_size(std::size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

// `bytes` (a multiple of kHugePage) of fresh zero pages at a kHugePage-aligned address, or nullptr.
void* map_aligned(std::size_t bytes) {
  const std::size_t span = bytes + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = start + span, used_end = aligned + bytes;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, bytes, MADV_HUGEPAGE);  // (EINVAL where the kernel has no transparent huge pages: 4 KiB pages then)
  return p;
}

}  // namespace

HostAllocator::~HostAllocator() {
  std::lock_guard lock(mu_);
  unmap_locked(0);
}

std::size_t HostAllocator::cached_bytes() const {
  std::lock_guard lock(mu_);
  return kept_bytes_;
}

void HostAllocator::unmap_locked(std::size_t keep) {
  std::size_t drop = 0;
  while (kept_bytes_ > keep && drop < kept_.size()) {
    munmap(kept_[drop].p, kept_[drop].bytes);
    kept_bytes_ -= kept_[drop].bytes;
    ++drop;
  }
  kept_.erase(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(drop));
}

void* HostAllocator::raw_allocate(std::size_t bytes) {
  if (!is_large(bytes)) return ::operator new(bytes == 0 ? 64 : bytes, std::align_val_t{64});
  if (bytes > std::numeric_limits<std::size_t>::max() - 2 * kHugePage) throw std::bad_alloc();  // (no size wraps)
  const std::size_t size = mapped_size(bytes);
  std::lock_guard lock(mu_);
  // The most recently freed block of this size: a replay frees and asks for the same sizes in turn.
  void* p = nullptr;
  for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
    if (it->bytes != size) continue;
    p = it->p;
    kept_bytes_ -= size;
    kept_.erase(std::next(it).base());
    break;
  }
  if (!p) p = map_aligned(size);
  if (!p && !kept_.empty()) {  // out of address space or memory: give back what is kept, then try once more
    unmap_locked(0);
    p = map_aligned(size);
  }
  if (!p) throw std::bad_alloc();
  large_in_use_ += size;
  large_high_ = std::max(large_high_, large_in_use_);
  return p;
}

void HostAllocator::raw_free(void* p, std::size_t bytes) {
  if (!is_large(bytes)) {
    ::operator delete(p, std::align_val_t{64});
    return;
  }
  const std::size_t size = mapped_size(bytes);
  std::lock_guard lock(mu_);
  kept_.push_back({p, size});
  kept_bytes_ += size;
  large_in_use_ -= size;
  // Keep at most as much as was ever in use at once (a step's large buffers, whatever their order), the oldest
  // freed going first: the memory mapped stays within twice the high-water mark.
  unmap_locked(large_high_);
}

}  // namespace trainsim::exec
