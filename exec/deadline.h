// Durations and deadlines from seconds a user (or a peer) gave, saturating instead of overflowing. A
// steady_clock duration counts nanoseconds in 64 bits (about 292 years): `now + duration_cast<nanoseconds>(1e300
// s)` is undefined and in practice a deadline in the past, so `--timeout 1e300` and `--rendezvous-timeout 1e10`
// timed out at once. Every wait of the executor builds its deadline here: the CPU backend's communicators
// (exec/cpu/), the rendezvous and the process group (exec/dist/).
#pragma once

#include <chrono>
#include <cstdint>

namespace trainsim::exec {

using SteadyClock = std::chrono::steady_clock;

/// `seconds` as a SteadyClock::duration: NaN and values <= 0 give 0; values beyond the type's range (about 292
/// years) give SteadyClock::duration::max().
SteadyClock::duration duration_from_seconds(double seconds);

/// `milliseconds` (as a peer sends them, up to 2^64 - 1) as a SteadyClock::duration, saturating at max().
SteadyClock::duration duration_from_milliseconds(std::uint64_t milliseconds);

/// `now + d`, saturating at SteadyClock::time_point::max() (d <= 0 gives `now`).
SteadyClock::time_point saturating_add(SteadyClock::time_point now, SteadyClock::duration d);

/// `now + seconds`, saturating: the deadline of a wait of `seconds` from `now` (NaN and values <= 0: `now`;
/// beyond the clock's range: SteadyClock::time_point::max(), a wait without end).
inline SteadyClock::time_point deadline_after(double seconds, SteadyClock::time_point now = SteadyClock::now()) {
  return saturating_add(now, duration_from_seconds(seconds));
}

}  // namespace trainsim::exec
