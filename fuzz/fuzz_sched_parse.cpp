// libFuzzer target: the .sched parser. Any input must either parse or throw ParseError (anything else escaping
// is a finding), and a parsed schedule must print canonically and round-trip byte for byte.
#include <cstdlib>

#include "fuzz/common.h"
#include "schedules/text_format.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  trainsim::Schedule s;
  try {
    s = trainsim::parse_schedule(trainsim::fuzz::text_of(data, size), "fuzz.sched");
  } catch (const trainsim::ParseError&) {
    return 0;
  }
  // A schedule that parsed prints to text that parses back to the same text.
  std::string once = trainsim::print_schedule(s);
  std::string twice = trainsim::print_schedule(trainsim::parse_schedule(once, "printed.sched"));
  if (once != twice) std::abort();
  return 0;
}
