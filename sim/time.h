// Virtual time of the simulator.
//
// Time is an integer count of nanoseconds (DESIGN §2 lets us pick seconds-as-double or ticks; ticks make
// every sum exact, so the puzzle model's 0.2 + 0.3 + 0.5 never rounds and runs are bit-for-bit repeatable).
// The puzzle cost model measures in the puzzles' "steps": one step is one simulated second.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace trainsim {

/// Virtual time or duration in nanoseconds.
using Time = std::int64_t;

/// The latest virtual time (2^63 - 1 ns, about 292 years); the simulator stops with an error rather than pass it.
inline constexpr Time kMaxTime = std::numeric_limits<Time>::max();

/// Nanoseconds in one simulated second (one puzzle step).
inline constexpr Time kTicksPerSecond = 1'000'000'000;

/// Converts seconds to Time, rounding to the nearest nanosecond. Saturates: beyond kMaxTime (and +inf, NaN) gives
/// kMaxTime, below -kMaxTime gives -kMaxTime, so a huge duration is reported as passing the limit rather than
/// wrapping to a negative one (std::llround is undefined out of range).
inline Time seconds(double s) {
  const double ticks = s * static_cast<double>(kTicksPerSecond);
  constexpr double kLimit = 9223372036854775808.0;  // 2^63
  if (!(ticks < kLimit)) return kMaxTime;            // (NaN compares false)
  if (ticks <= -kLimit) return -kMaxTime;
  return static_cast<Time>(std::llround(ticks));
}

/// Converts Time to seconds.
inline double to_seconds(Time t) { return static_cast<double>(t) / static_cast<double>(kTicksPerSecond); }

}  // namespace trainsim
