// The worked examples in docs/schedule-format.md parse, print back identically and validate.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;

TEST_CASE("the schedule-format document's examples are canonical and valid") {
  std::ifstream f(std::string(TRAINSIM_SOURCE_DIR) + "/docs/schedule-format.md");
  REQUIRE(f);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string doc = ss.str();
  int examples = 0;
  for (std::size_t at = doc.find("```sched\n"); at != std::string::npos; at = doc.find("```sched\n", at)) {
    at += 9;
    std::size_t end = doc.find("```", at);
    REQUIRE(end != std::string::npos);
    std::string text = doc.substr(at, end - at);
    ++examples;
    CAPTURE(examples);
    Schedule s = parse_schedule(text, "example.sched");
    CHECK(print_schedule(s) == text);
    SimResult r = simulate(s);
    CHECK(r.error == "");
    CHECK(r.ok);
  }
  CHECK(examples == 3);
}
