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
/// Most ops `trainsim gen` makes for one rank, estimated from the options before any is made (4,194,304, about
/// 1.5 GB of ops: Llama 3 70B's 126 blocks over 8 stages with 1,024 microbatches is about 200,000). The pipeline
/// kinds make a rank's ops when they are asked for, so this bounds what a simulation holds of one rank.
inline constexpr long long kMaxRankOps = 1LL << 22;
/// Most ops `trainsim gen` makes for the kinds that hold the whole schedule (ddp, zero1, zero2, fsdp,
/// zero3-owner), estimated the same way: 8,388,608, about 3.4 GB (fsdp over 2,000 ranks of 32 layers and 8
/// microbatches is 5.1 million).
inline constexpr long long kMaxHeldOps = 1LL << 23;
/// Largest other integer in a .sched file (format version, step, stream, group id): nine digits.
inline constexpr int kMaxNumber = 999'999'999;
/// Longest piece of input quoted in an error message before it is cut (see shown()).
inline constexpr std::size_t kMaxShownBytes = 80;

}  // namespace trainsim
