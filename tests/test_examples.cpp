// examples/*.sched (issue 10 §5): each hand-annotated schedule is valid under `trainsim sim`, and its makespan
// and bubble equal those of the generator's schedule for the same kind and sizes.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

using namespace trainsim::testing;

namespace {

struct Example {
  const char* file;       // under examples/
  const char* generator;  // trainsim gen arguments giving the same schedule
};

const Example kExamples[] = {
    {"ddp.sched", "ddp --dp 2 --layers 2 --microbatches 1"},
    {"fsdp-prefetch.sched", "fsdp --dp 2 --layers 2 --microbatches 1 --prefetch 1"},
    {"1f1b.sched", "1f1b --stages 2 --microbatches 3"},
    {"zb-h1.sched", "zb-h1 --stages 2 --microbatches 3"},
    {"pp-fsdp.sched", "pp-fsdp --stages 2 --dp 2 --microbatches 1"},
    {"zero3-owner.sched", "zero3-owner --dp 2 --layers 2 --microbatches 1"},
    {"expert-parallel.sched", "ep --dp 2 --ep 2 --layers 2 --dense-layers 1 --microbatches 1"},
};

}  // namespace

TEST_CASE("every example schedule is valid, with the makespan and bubble of its generator") {
  for (const Example& e : kExamples) {
    CAPTURE(e.file);
    const std::string path = std::string(TRAINSIM_SOURCE_DIR) + "/examples/" + e.file;
    CommandResult sim = run_trainsim("sim " + path + " --json");
    REQUIRE(sim.exit_code == 0);
    CommandResult gen = run_trainsim(std::string("gen ") + e.generator + " --sim --json");
    REQUIRE(gen.exit_code == 0);
    auto s = nlohmann::json::parse(sim.out), g = nlohmann::json::parse(gen.out);
    CHECK(s["ok"] == true);
    CHECK(s["ops"] == g["ops"]);
    CHECK(s["makespan"].get<double>() == g["makespan"].get<double>());
    CHECK(s["bubble_fraction"].get<double>() == g["bubble_fraction"].get<double>());
    CHECK(s["world_size"].get<int>() <= 4);
  }
}

TEST_CASE("1F1B has a bubble that zero bubble (ZB-H1) shrinks, on the same pipeline") {
  const std::string dir = std::string(TRAINSIM_SOURCE_DIR) + "/examples/";
  auto one_f = nlohmann::json::parse(run_trainsim("sim " + dir + "1f1b.sched --json").out);
  auto zb = nlohmann::json::parse(run_trainsim("sim " + dir + "zb-h1.sched --json").out);
  CHECK(one_f["bubble_fraction"].get<double>() == doctest::Approx(0.25));
  CHECK(zb["bubble_fraction"].get<double>() < one_f["bubble_fraction"].get<double>());
}

TEST_CASE("examples/render.sh writes a timeline SVG for every example") {
  auto out = fresh_dir("examples-render");
  // A copy of examples/ so that the source tree stays as it is.
  const std::string src = std::string(TRAINSIM_SOURCE_DIR) + "/examples";
  REQUIRE(std::system(("cp " + src + "/*.sched " + src + "/render.sh " + out.string()).c_str()) == 0);
  REQUIRE(std::system(("sh " + (out / "render.sh").string() + " " + TRAINSIM_BINARY + " >/dev/null").c_str()) == 0);
  for (const Example& e : kExamples) {
    std::string name = e.file;
    name = name.substr(0, name.size() - 6) + ".svg";
    CAPTURE(name);
    CHECK(slurp(out / "svg" / name).find("<svg") != std::string::npos);
  }
}

TEST_CASE("the C++ example (1F1B as coroutines) records a valid schedule with the generator's makespan and bubble") {
  auto dir = fresh_dir("examples-cpp");
  const std::string recorded = (dir / "1f1b-coroutines.sched").string();
  REQUIRE(std::system((std::string(TRAINSIM_EXAMPLE_1F1B) + " " + recorded).c_str()) == 0);
  CommandResult puzzle_costs = run_trainsim("sim " + recorded + " --json");
  REQUIRE(puzzle_costs.exit_code == 0);
  CHECK(nlohmann::json::parse(puzzle_costs.out)["ok"] == true);
  // The same ops under the generator's cost model and channels: the same timeline as `gen 1f1b`.
  std::string text = slurp(recorded);
  text.replace(text.find("cost_model puzzle"), 17, "cost_model unit");
  text.replace(text.find("p2p one-slot"), 12, "p2p per-pair");
  std::ofstream(dir / "unit.sched", std::ios::binary) << text;
  auto s = nlohmann::json::parse(run_trainsim("sim " + (dir / "unit.sched").string() + " --json").out);
  auto g = nlohmann::json::parse(run_trainsim("gen 1f1b --stages 2 --microbatches 3 --sim --json").out);
  CHECK(s["ok"] == true);
  CHECK(s["makespan"].get<double>() == g["makespan"].get<double>());
  CHECK(s["bubble_fraction"].get<double>() == g["bubble_fraction"].get<double>());
}
