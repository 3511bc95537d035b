// `trainsim puzzles` end to end: table, JSON, SVG files, exit codes, determinism.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "puzzles/catalog.h"

using namespace trainsim::testing;

TEST_CASE("trainsim puzzles --json prints one object per puzzle and writes a timeline each") {
  auto dir = fresh_dir("puzzles-json");
  CommandResult r = run_trainsim("puzzles --json --out " + dir.string());
  CHECK(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.is_array());
  REQUIRE(j.size() == trainsim::puzzles::catalog().size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    const auto& o = j[i];
    const auto& p = trainsim::puzzles::catalog()[i];
    CAPTURE(p.name);
    CHECK(o["name"] == p.name);
    CHECK(o["correct"] == true);
    CHECK(o["error"].is_null());
    for (const char* field : {"timesteps", "makespan", "max_memory", "max_memory_rank", "max_memory_time",
                              "target_time", "target_memory"})
      CHECK(o[field].is_number());
    CHECK(o["target_time"] == p.target_time);
    CHECK(o["target_memory"] == p.target_memory);
    CHECK(o["makespan"].get<double>() >= o["timesteps"].get<double>());
    CHECK(o["max_memory"].get<double>() <= p.target_memory);
    std::string svg = slurp(dir / (p.name + ".svg"));
    CHECK(svg.find("<svg") != std::string::npos);
  }
}

TEST_CASE("two runs give identical JSON and SVG bytes") {
  auto a = fresh_dir("det-a"), b = fresh_dir("det-b");
  CommandResult ra = run_trainsim("puzzles --json --out " + a.string());
  CommandResult rb = run_trainsim("puzzles --json --out " + b.string());
  CHECK(ra.out == rb.out);
  for (const auto& p : trainsim::puzzles::catalog()) {
    CAPTURE(p.name);
    std::string sa = slurp(a / (p.name + ".svg"));
    CHECK(!sa.empty());
    CHECK(sa == slurp(b / (p.name + ".svg")));
  }
}

TEST_CASE("the table names each puzzle and the exit code reflects the result") {
  auto dir = fresh_dir("puzzles-table");
  CommandResult ok = run_trainsim("puzzles --only gpipe --out " + dir.string());
  CHECK(ok.exit_code == 0);
  CHECK(ok.out.find("gpipe") != std::string::npos);
  CHECK(ok.out.find("1 of 1 puzzle correct and within targets") != std::string::npos);

  CommandResult ex = run_trainsim("puzzles --exercises --only ddp --out " + dir.string());
  CHECK(ex.exit_code == 1);
  CHECK(ex.out.find("ddp: not implemented: write your solution between TODO and END TODO in "
                    "puzzles/exercises/ddp.cpp") != std::string::npos);
  CHECK(std::filesystem::exists(dir / "exercises" / "ddp.svg"));  // beside, not over, the reference's
}

TEST_CASE("bad arguments and --help") {
  CommandResult bad = run_trainsim("puzzles --only nope --out /tmp", true);
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.find("no puzzle called 'nope'") != std::string::npos);
  CommandResult help = run_trainsim("--help");
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("puzzles") != std::string::npos);
  CommandResult phelp = run_trainsim("puzzles --help");
  CHECK(phelp.exit_code == 0);
  CHECK(phelp.out.find("--exercises") != std::string::npos);
  CommandResult none = run_trainsim("", true);
  CHECK(none.exit_code != 0);
}

TEST_CASE("the tensor-parallel puzzle's saved schedule is version 2 and validates and simulates as it ran") {
  auto dir = fresh_dir("puzzles-tp");
  CommandResult r = run_trainsim("puzzles --only tensor_parallel --json --out " + dir.string() + " --save-schedules " +
                                 dir.string());
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.size() == 1);
  CHECK(j[0]["correct"] == true);
  const std::string sched = (dir / "tensor_parallel.sched").string();
  const std::string text = slurp(sched);
  CHECK(text.rfind("trainsim-schedule 2\n", 0) == 0);
  CHECK(has(text, "\ngroup 1 tp0 0 1 2 3\n"));
  CHECK(run_trainsim("validate " + sched).exit_code == 0);
  CommandResult sim = run_trainsim("sim " + sched + " --json");
  CHECK(sim.exit_code == 0);
  auto s = nlohmann::json::parse(sim.out);
  CHECK(s["ok"] == true);
  CHECK(s["timesteps"] == j[0]["timesteps"]);
  CHECK(s["makespan"] == j[0]["makespan"]);
  CHECK(s["max_memory"] == j[0]["max_memory"]);
  CHECK(has(slurp(dir / "tensor_parallel.svg"), "Puzzle 8 - Tensor Parallelism"));
  std::filesystem::remove_all(dir);
}
