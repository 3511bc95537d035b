// glibc's allocator, tuned for a process that builds one large in-memory schedule and keeps it (the trainsim
// command and the benchmarks that measure it): freed memory stays in the heap for the next allocation instead
// of going back to the kernel, the heap grows in 256 MiB steps, and only blocks of 32 MiB and more are mapped
// on their own. Without it, `gen pp-fsdp --stages 16 --dp 1024 --microbatches 64 --sim` spent two thirds of
// its time in the kernel faulting pages it had freed and asked for again (bench/README.md). Untouched pages
// of the heap cost no resident memory.
#pragma once

#include <climits>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace trainsim::apps {

/// Sets glibc's trim threshold (off), top pad (256 MiB) and mmap threshold (32 MiB); nothing elsewhere.
/// Call once at the start of main, before the first large allocation.
inline void tune_allocator() {
#ifdef __GLIBC__
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_TOP_PAD, 256 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
}

}  // namespace trainsim::apps
