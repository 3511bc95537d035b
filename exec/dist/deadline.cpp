#include "exec/dist/deadline.h"

namespace trainsim::exec::dist {

Clock::duration duration_from_seconds(double seconds) {
  if (!(seconds > 0)) return Clock::duration::zero();  // NaN, zero, negative
  using Period = Clock::duration::period;
  const double ticks = seconds * Period::den / Period::num;
  // 2^63 ticks overflow the 64-bit count: saturate a little below, where the conversion is still defined
  if (ticks >= 0x1p62 * 1.99) return Clock::duration::max();
  return Clock::duration(static_cast<Clock::duration::rep>(ticks));
}

Clock::duration duration_from_milliseconds(std::uint64_t milliseconds) {
  using ms = std::chrono::milliseconds;
  const auto max_ms = std::chrono::duration_cast<ms>(Clock::duration::max()).count();
  if (milliseconds >= static_cast<std::uint64_t>(max_ms)) return Clock::duration::max();
  return std::chrono::duration_cast<Clock::duration>(ms(static_cast<ms::rep>(milliseconds)));
}

Clock::time_point saturating_add(Clock::time_point now, Clock::duration d) {
  if (d <= Clock::duration::zero()) return now;
  // (a negative `now` cannot overflow upwards; a positive one overflows when d exceeds the room left)
  if (now.time_since_epoch() >= Clock::duration::zero() && d > Clock::time_point::max() - now)
    return Clock::time_point::max();
  return now + d;
}

}  // namespace trainsim::exec::dist
