// libFuzzer target: parse a .sched file, then simulate it. Parsing may throw ParseError; simulate() must not
// throw at all (a bad schedule is a result, not an exception), and must finish in bounded time and memory.
#include "fuzz/common.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  trainsim::Schedule s;
  try {
    s = trainsim::parse_schedule(trainsim::fuzz::text_of(data, size), "fuzz.sched");
  } catch (const trainsim::ParseError&) {
    return 0;
  }
  trainsim::SimResult r = trainsim::simulate(s);
  (void)r;
  return 0;
}
