// Durations and deadlines from user-given seconds, saturating instead of overflowing: every wait in exec/dist
// builds its deadline here. A steady_clock duration counts nanoseconds in 64 bits (about 292 years), so
// `--rendezvous-timeout 1e10` converted naively wraps to a deadline in the past and times out at once.
#pragma once

#include <chrono>
#include <cstdint>

namespace trainsim::exec::dist {

using Clock = std::chrono::steady_clock;

/// `seconds` as a Clock::duration: NaN and values <= 0 give 0; values beyond the type's range (about 292
/// years) give Clock::duration::max().
Clock::duration duration_from_seconds(double seconds);

/// `milliseconds` (as a peer sends them, up to 2^64 - 1) as a Clock::duration, saturating at max().
Clock::duration duration_from_milliseconds(std::uint64_t milliseconds);

/// `now + d`, saturating at Clock::time_point::max() (d <= 0 gives `now`).
Clock::time_point saturating_add(Clock::time_point now, Clock::duration d);

/// `now + seconds`, saturating: the deadline of a wait of `seconds` from `now`.
inline Clock::time_point deadline_after(double seconds, Clock::time_point now = Clock::now()) {
  return saturating_add(now, duration_from_seconds(seconds));
}

}  // namespace trainsim::exec::dist
