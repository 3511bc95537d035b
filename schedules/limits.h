// Limits on what trainsim reads (docs/schedule-format.md, "Limits"). They keep every input's cost in time
// and memory proportional to its size and bounded: a 100-byte file cannot ask for a billion ranks.
#pragma once

#include <cstddef>

namespace trainsim {

/// Largest schedule or CSV file read, in bytes (1 GiB; the 16,384-rank pp-fsdp schedule is about 409 MB).
inline constexpr std::size_t kMaxInputBytes = std::size_t{1} << 30;
/// Largest world size: ranks in a .sched header, rows of a CSV (131,072).
inline constexpr int kMaxWorldSize = 1 << 17;
/// Largest number of layers (stages), microbatches and shards of one tensor (1,048,576); the ids in batch
/// and shard sets are below it.
inline constexpr int kMaxCount = 1 << 20;
/// Largest step `trainsim gen` makes, in layers x microbatches (each pair one or more ops; x TP ranks for tp and
/// 3d): 16,777,216, twice Llama 3 405B on 16,384 GPUs with one schedule layer per block (128 layers x 8,192
/// microbatches x TP 8), which a symmetric simulation makes 16 ranks of (schedules/symmetry.h); simulated in full
/// or written, that is about 50 million ops.
inline constexpr long long kMaxGeneratedWork = 1LL << 24;
/// Largest other integer in a .sched file (format version, step, stream, group id): nine digits.
inline constexpr int kMaxNumber = 999'999'999;
/// Longest piece of input quoted in an error message before it is cut (see shown()).
inline constexpr std::size_t kMaxShownBytes = 80;

}  // namespace trainsim
