#include "hardware/comm.h"

namespace trainsim::hw {

double p2p_seconds(double bytes, const Link& link) { return link.latency_s + bytes / link.bandwidth; }

double collective_seconds(Collective c, int n, double bytes, const Link& link) {
  if (n <= 1) return 0;
  if (c == Collective::Broadcast || c == Collective::Reduce) return (n - 1) * link.latency_s + bytes / link.bandwidth;
  const double steps = n - 1, share = (n - 1.0) / n;
  const double one = steps * link.latency_s + share * bytes / link.bandwidth;
  return c == Collective::AllReduce ? 2 * one : one;
}

double bus_bandwidth(Collective c, int n, double bytes, double seconds) {
  const double algbw = bytes / seconds;
  if (c == Collective::Broadcast || c == Collective::Reduce) return algbw;
  const double factor = (n - 1.0) / n;
  return c == Collective::AllReduce ? algbw * 2 * factor : algbw * factor;
}

}  // namespace trainsim::hw
