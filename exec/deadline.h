// Deadlines from seconds a user gave, saturating instead of overflowing. A steady_clock duration counts
// nanoseconds in 64 bits (about 292 years): `now + duration_cast<nanoseconds>(1e300 s)` is undefined and in
// practice a deadline in the past, so `--timeout 1e300` timed out at once. Every wait of the CPU backend's
// communicators builds its deadline here (exec/dist/ waits have their own, exec/dist/deadline.h).
#pragma once

#include <chrono>

namespace trainsim::exec {

/// Waits longer than this (about 31.7 years) are taken as this long: beyond any run, far inside the clock's range.
inline constexpr double kMaxWaitSeconds = 1e9;

/// The steady-clock deadline `seconds` after `now`: NaN and values <= 0 give `now`, values above
/// kMaxWaitSeconds give `now + kMaxWaitSeconds`. Never overflows.
inline std::chrono::steady_clock::time_point deadline_after(
    double seconds, std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
  if (!(seconds > 0)) return now;
  if (seconds > kMaxWaitSeconds) seconds = kMaxWaitSeconds;
  return now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace trainsim::exec
