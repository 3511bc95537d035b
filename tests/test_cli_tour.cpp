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
  // `gen -o NAME.csv` writes the CSV at once: the same bytes as the conversion.
  CHECK(run_trainsim("gen 1f1b --stages 4 --microbatches 8 -o " + at("gen.csv")).exit_code == 0);
  CHECK(slurp(dir / "gen.csv") == csv);
  CHECK(run_trainsim("gen zbv --stages 4 --microbatches 8 -o " + at("zbv.csv")).exit_code == 0);
  CHECK(run_trainsim("validate " + at("zbv.csv")).exit_code == 0);
}

TEST_CASE("the zbv.csv of the CSV and executor docs is made by gen, converts and replays as written") {
  auto dir = fresh_dir("tour-zbv");
  auto at = [&](const char* name) { return (dir / name).string(); };
  // docs/executor.md's block (with --steps 1: the doc's run trains 20 steps).
  REQUIRE(run_trainsim("gen zbv --stages 2 --microbatches 8 -o " + at("zbv.csv")).exit_code == 0);
  CommandResult r = run_trainsim("replay " + at("zbv.csv") + " --microbatches 8 --stage-map v --steps 1", true);
  INFO(r.out);
  CHECK(r.exit_code == 0);
  // docs/pytorch-csv.md's import of it.
  CHECK(run_trainsim("convert " + at("zbv.csv") + " " + at("zbv.sched") + " --stage-map v --microbatches 8").exit_code == 0);
}

TEST_CASE("the README's replay section runs as written, and the default model learns") {
  auto dir = fresh_dir("tour-replay");
  auto at = [&](const char* name) { return (dir / name).string(); };
  CHECK(run_trainsim("gen 1f1b --stages 4 --microbatches 8 -o " + at("1f1b.sched")).exit_code == 0);
  // The default model and corpus (the fortunes package), 20 steps, checked against one device.
  CommandResult r = run_trainsim("replay " + at("1f1b.sched") + " --check --svg " + at("1f1b-measured.svg") +
                                 " --trace " + at("1f1b-measured.json"), true);
  INFO(r.out);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("check against single-device training") != std::string::npos);
  auto loss_of = [&](const std::string& step) {
    std::size_t at_step = r.out.find("step " + step + "  loss ");
    REQUIRE(at_step != std::string::npos);
    return std::stod(r.out.substr(at_step + step.size() + 12));
  };
  double first = loss_of("    1/20"), last = loss_of("   20/20");
  CHECK(first > 5.0);          // about ln(256) = 5.55 at initialisation
  CHECK(last < first - 1.0);   // it learns: about 3.1 after 20 steps
  CHECK(slurp(dir / "1f1b-measured.svg").find("<svg") != std::string::npos);
  CHECK(nlohmann::json::parse(slurp(dir / "1f1b-measured.json"))["traceEvents"].size() > 0);
  CHECK(run_trainsim("sim " + at("1f1b.sched") + " --svg " + at("1f1b-simulated.svg")).exit_code == 0);
}
