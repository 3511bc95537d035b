// The README's tour of schedules, command by command: generate, validate, simulate and draw, convert to
// PyTorch CSV and back.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

using namespace trainsim::testing;

TEST_CASE("the README tour runs as written") {
  auto dir = fresh_dir("tour");
  auto at = [&](const char* name) { return (dir / name).string(); };
  CHECK(run_trainsim("gen 1f1b --stages 4 --microbatches 8 -o " + at("1f1b.sched")).exit_code == 0);
  CHECK(run_trainsim("validate " + at("1f1b.sched")).exit_code == 0);
  CommandResult sim = run_trainsim("sim " + at("1f1b.sched") + " --svg " + at("1f1b.svg") + " --trace " +
                                   at("1f1b.json") + " --dot " + at("1f1b-graph.svg"));
  CHECK(sim.exit_code == 0);
  CHECK(sim.out.find("bubble 27.3%") != std::string::npos);  // (p-1)/(m+p-1) = 3/11 with unit costs
  CHECK(slurp(dir / "1f1b.svg").find("<svg") != std::string::npos);
  CHECK(nlohmann::json::parse(slurp(dir / "1f1b.json"))["traceEvents"].size() > 0);
  CHECK(slurp(dir / "1f1b-graph.svg").find("<svg") != std::string::npos);
  CHECK(run_trainsim("convert " + at("1f1b.sched") + " " + at("1f1b.csv")).exit_code == 0);
  std::string csv = slurp(dir / "1f1b.csv");
  CHECK(csv.rfind("0F0,0F1,0F2,0F3,0B0,", 0) == 0);  // rank 0: 3 warm-up forwards past the first, then 1F1B
  CHECK(run_trainsim("convert " + at("1f1b.csv") + " " + at("back.sched") + " --microbatches 8").exit_code == 0);
  CHECK(run_trainsim("validate " + at("back.sched")).exit_code == 0);
  CHECK(run_trainsim("convert " + at("back.sched") + " " + at("again.csv")).exit_code == 0);
  CHECK(slurp(dir / "again.csv") == csv);
}
