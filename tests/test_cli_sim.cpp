// `trainsim validate` and `trainsim sim` end to end.
#include <doctest/doctest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

using namespace trainsim::testing;

namespace {

std::filesystem::path write(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
  auto p = dir / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}
}  // namespace

TEST_CASE("trainsim validate: 0 for a valid schedule, 1 with the problem for a broken one") {
  auto dir = fresh_dir("validate");
  CommandResult ok = run_trainsim("validate " + write(dir, "ddp.sched", kDdp).string());
  CHECK(ok.exit_code == 0);
  CHECK(ok.out.find("ddp.sched: valid: 12 ops on 2 ranks") != std::string::npos);

  std::string broken = kDdp;
  broken.replace(broken.rfind("  update L0\n"), 12, "");  // rank 1 never updates: still valid (rank 0 covers layer 0)
  broken.replace(broken.find("all-reduce L0 : dW0{0} -> dW0{0-1}"), 34, "all-gather L0 : W0 -> W0");
  CommandResult bad = run_trainsim("validate " + write(dir, "bad.sched", broken).string(), true);
  CHECK(bad.exit_code == 1);
  CHECK(bad.out.find("collective mismatch in group 0 at call #0") != std::string::npos);
  CHECK(bad.out.find("bad.sched:12") != std::string::npos);

  CommandResult syntax = run_trainsim("validate " + write(dir, "syntax.sched", "trainsim-schedule 1\nworld_size x\n").string(), true);
  CHECK(syntax.exit_code == 1);
  CHECK(syntax.out.find("syntax.sched:2:12: expected world_size (a non-negative integer), got 'x'") != std::string::npos);

  CommandResult missing = run_trainsim("validate /nonexistent.sched", true);
  CHECK(missing.exit_code != 0);
}

TEST_CASE("trainsim sim writes the timeline, the trace and the graph, and prints JSON") {
  auto dir = fresh_dir("sim");
  auto f = write(dir, "ddp.sched", kDdp);
  CommandResult r = run_trainsim("sim " + f.string() + " --json --svg " + (dir / "t.svg").string() + " --trace " +
                                 (dir / "t.json").string() + " --dot " + (dir / "g.dot").string());
  CHECK(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["ok"] == true);
  CHECK(j["world_size"] == 2);
  CHECK(j["ops"] == 12);
  CHECK(j["timesteps"].get<double>() == doctest::Approx(2.3));  // forward 1, loss 0, backward 1, all-reduce 0.3
  CHECK(j["makespan"].get<double>() == doctest::Approx(2.8));
  CHECK(slurp(dir / "t.svg").find("<svg") != std::string::npos);
  CHECK(nlohmann::json::parse(slurp(dir / "t.json")).contains("traceEvents"));
  CHECK(slurp(dir / "g.dot").find("digraph") != std::string::npos);

  CommandResult limited = run_trainsim("sim " + f.string() + " --memory-limit 100", true);
  CHECK(limited.exit_code == 1);
  CHECK(limited.out.find("memory limit exceeded") != std::string::npos);
}

TEST_CASE("trainsim sim --dot F.svg refuses a graph too large to lay out in seconds, and says what to do") {
  auto dir = fresh_dir("sim-dot");
  const std::string f = (dir / "big.sched").string();
  REQUIRE(run_trainsim("gen 1f1b --stages 8 --microbatches 16 -o " + f).exit_code == 0);  // 1,256 ops
  CommandResult r = run_trainsim("sim " + f + " --dot " + (dir / "g.svg").string(), true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("the schedule has 1256 ops and Graphviz lays out at most 600") != std::string::npos);
  CHECK(r.out.find("--dot " + (dir / "g.dot").string()) != std::string::npos);
  CHECK(!std::filesystem::exists(dir / "g.svg"));
  // The DOT text is written at any size.
  CHECK(run_trainsim("sim " + f + " --dot " + (dir / "g.dot").string()).exit_code == 0);
  CHECK(slurp(dir / "g.dot").find("digraph") != std::string::npos);
}

TEST_CASE("trainsim gen --sim --json reports what trainsim sim reports for the same schedule, and its timings") {
  auto dir = fresh_dir("gen-sim");
  const std::string args = "gen pp-fsdp --stages 3 --dp 2 --microbatches 4";
  CommandResult gen = run_trainsim(args + " --sim --json");
  REQUIRE(gen.exit_code == 0);
  auto g = nlohmann::json::parse(gen.out);
  REQUIRE(run_trainsim(args + " -o " + (dir / "p.sched").string()).exit_code == 0);
  CommandResult sim = run_trainsim("sim " + (dir / "p.sched").string() + " --json");
  REQUIRE(sim.exit_code == 0);
  auto s = nlohmann::json::parse(sim.out);
  CHECK(g["ok"] == true);
  CHECK(g["ops"] == s["ops"]);
  for (const char* key : {"timesteps", "makespan", "bubble_fraction", "max_memory", "max_memory_time"})
    CHECK(g[key].get<double>() == doctest::Approx(s[key].get<double>()));
  CHECK(g["max_memory_rank"] == s["max_memory_rank"]);
  CHECK(g["sim_seconds"].get<double>() >= 0);
  CHECK(g["generate_seconds"].get<double>() >= 0);
  CHECK(g["memory_unit"] == "units");
  CommandResult text = run_trainsim(args + " --sim");
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("peak memory") != std::string::npos);
}

TEST_CASE("on a terminal, gen and sim show each stage on one status line and erase it before the result") {
  // `script` (util-linux, Debian's essential bsdutils) runs the command under a pseudo-terminal, so that
  // its standard error is a terminal; both streams come back through it.
  auto dir = fresh_dir("stage-line");
  const std::string sched = write(dir, "ddp.sched", kDdp).string();
  auto on_terminal = [&](const std::string& args) {
    return run_shell("script -qec \"" + std::string(TRAINSIM_BINARY) + " " + args + "\" /dev/null");
  };
  const std::string erase = "\r\033[K";
  CommandResult gen = on_terminal("gen 1f1b --stages 2 --microbatches 2 --sim");
  CHECK(gen.exit_code == 0);
  CHECK(gen.out.find(erase + "trainsim gen: generating 1f1b...") != std::string::npos);
  // A pipeline is generated rank by rank as it is simulated: the line counts the ranks.
  CHECK(gen.out.find(erase + "trainsim gen: generating and simulating 2 ranks...") != std::string::npos);
  CHECK(gen.out.find(erase + "trainsim gen: generating and simulating rank 1 of 2...") != std::string::npos);
  // Erased before the result, which starts its own line.
  CHECK(gen.out.find("rank 2 of 2..." + erase + "1f1b: 38 ops on 2 ranks: makespan") != std::string::npos);
  CommandResult held = on_terminal("gen ddp --dp 2 --sim");  // (a data-parallel kind is generated whole)
  CHECK(held.out.find(erase + "trainsim gen: simulating ") != std::string::npos);
  CommandResult sim = on_terminal("sim " + sched + " --svg " + (dir / "t.svg").string());
  CHECK(sim.exit_code == 0);
  CHECK(sim.out.find(erase + "trainsim sim: reading " + sched + "...") != std::string::npos);
  CHECK(sim.out.find(erase + "trainsim sim: simulating 12 ops on 2 ranks...") != std::string::npos);
  CHECK(sim.out.find(erase + "trainsim sim: drawing the timeline..." + erase) != std::string::npos);
  CHECK(sim.out.find("ranks..." + erase + sched + ": valid: 12 ops on 2 ranks") != std::string::npos);
  // Not on a terminal (a pipe, a file): no status line at all.
  CommandResult piped = run_trainsim("gen 1f1b --stages 2 --microbatches 2 --sim", true);
  CHECK(piped.exit_code == 0);
  CHECK(piped.out.find("\033[K") == std::string::npos);
  CHECK(piped.out.find("generating") == std::string::npos);
}
