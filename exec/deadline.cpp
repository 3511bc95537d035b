#include "exec/deadline.h"

namespace trainsim::exec {

SteadyClock::duration duration_from_seconds(double seconds) {
  if (!(seconds > 0)) return SteadyClock::duration::zero();  // NaN, zero, negative
  using Period = SteadyClock::duration::period;
  const double ticks = seconds * Period::den / Period::num;
  // 2^63 ticks overflow the 64-bit count: saturate a little below, where the conversion is still defined
  if (ticks >= 0x1p62 * 1.99) return SteadyClock::duration::max();
  return SteadyClock::duration(static_cast<SteadyClock::duration::rep>(ticks));
}

SteadyClock::duration duration_from_milliseconds(std::uint64_t milliseconds) {
  using ms = std::chrono::milliseconds;
  const auto max_ms = std::chrono::duration_cast<ms>(SteadyClock::duration::max()).count();
  if (milliseconds >= static_cast<std::uint64_t>(max_ms)) return SteadyClock::duration::max();
  return std::chrono::duration_cast<SteadyClock::duration>(ms(static_cast<ms::rep>(milliseconds)));
}

SteadyClock::time_point saturating_add(SteadyClock::time_point now, SteadyClock::duration d) {
  if (d <= SteadyClock::duration::zero()) return now;
  // (a negative `now` cannot overflow upwards; a positive one overflows when d exceeds the room left)
  if (now.time_since_epoch() >= SteadyClock::duration::zero() && d > SteadyClock::time_point::max() - now)
    return SteadyClock::time_point::max();
  return now + d;
}

}  // namespace trainsim::exec
