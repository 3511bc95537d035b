// Hardened input end to end (issue 7 §3): the trainsim binary on inputs that used to abort, hang, eat memory
// or exit 0. Each must end with a clear message and a non-zero exit (or 0 for the valid ones), never a signal.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <sys/wait.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_helpers.h"

using namespace trainsim::testing;

namespace {


// Zero-bubble V on two ranks (docs/pytorch-csv.md).
const char* kZeroBubbleV =
    "0F0,0F1,,3F0,3I0,3W0,0F2,3F1,3I1,3W1,0F3,3F2,3I2,0I0,3W2,3F3,3I3,0I1,3W3,0W0,0I2,0W1,0I3,0W2,0W3\n"
    ",1F0,2F0,1F1,2F1,2I0,1I0,1F2,2F2,2I1,1I1,2W0,1W0,1F3,2F3,2I2,1I2,2W1,1W1,2I3,1I3,2W2,1W2,2W3,1W3\n";

// Quoted for the shell (the test directories hold no single quotes).
std::string q(const std::string& s) { return "'" + s + "'"; }

// `trainsim ARGS` under `timeout SECONDS` (exit code 124 when it ran past it), standard error included.
CommandResult run_bounded(const std::string& args, int seconds) {
  return run_shell(fmt::format("timeout {} {} {} 2>&1", seconds, TRAINSIM_BINARY, args));
}

}  // namespace

TEST_CASE("trainsim validate: out-of-range numbers and sizes exit 1 with file:line, never abort") {
  auto dir = fresh_dir("hardened-numbers");
  std::string big = kDdp;
  big.replace(big.find("forward L0 {0}"), 14, "forward L99999999999 {0}");
  CommandResult r = run_trainsim("validate " + write(dir / "big.sched", big), true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("big.sched:9:11: 99999999999 is too large for a layer (at most 1048576)") != std::string::npos);

  std::string world = kDdp;
  world.replace(world.find("world_size 2"), 12, "world_size 999999999");
  r = run_trainsim("validate " + write(dir / "world.sched", world), true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("world.sched:2:12: 999999999 is too large for world_size (at most 131072)") != std::string::npos);
}

TEST_CASE("trainsim sim --svg on a million declared layers finishes: invalid, with its timeline") {
  auto dir = fresh_dir("hardened-layers");
  std::string f = write(dir / "layers.sched", "trainsim-schedule 1\nworld_size 1\nlayers 1048576\nmicrobatches 1\n\nrank 0\n"
                                              "  load -> W0 O0 A0{0}\n  forward L0 {0}\n");
  CommandResult r = run_trainsim("sim " + f + " --svg " + (dir / "t.svg").string(), true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("layer 0 is never updated") != std::string::npos);
  CHECK(slurp(dir / "t.svg").find("<svg") != std::string::npos);
}

TEST_CASE("trainsim validate --json: a file name and an error with bytes that are not UTF-8 still give JSON") {
  auto dir = fresh_dir("hardened-json");
  CommandResult r = run_trainsim("validate --json " + q(write(dir / "bad\xff.sched", kDdp)));
  CHECK(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["ok"] == true);
  CHECK(j["file"].get<std::string>().find("bad\xef\xbf\xbd.sched") != std::string::npos);  // U+FFFD

  std::string bad = kDdp;
  bad.replace(bad.find("forward L0 {0}"), 14, "forward L0 {0} \xfe");
  r = run_trainsim("validate --json " + write(dir / "byte.sched", bad));
  CHECK(r.exit_code == 1);
  j = nlohmann::json::parse(r.out);
  CHECK(j["ok"] == false);
  CHECK(j["error"].get<std::string>().find("byte.sched:9:18: unexpected '\xef\xbf\xbd'") != std::string::npos);

  r = run_trainsim("sim " + q((dir / "bad\xff.sched").string()) + " --trace " + (dir / "t.json").string());
  CHECK(r.exit_code == 0);
  CHECK(nlohmann::json::parse(slurp(dir / "t.json")).contains("traceEvents"));
}

TEST_CASE("trainsim sim --memory-limit refuses nan, inf and negative limits with a usage error") {
  auto dir = fresh_dir("hardened-limit");
  std::string f = write(dir / "ddp.sched", kDdp);
  for (const char* bad : {"nan", "inf", "-1", "-inf", "1e999", "12abc"}) {
    CAPTURE(bad);
    CommandResult r = run_trainsim(fmt::format("sim {} --memory-limit={}", f, bad), true);
    CHECK(r.exit_code == 2);
    CHECK(r.out.find("--memory-limit: expected a finite number of at least 0") != std::string::npos);
  }
  CHECK(run_trainsim("validate " + f + " --memory-limit 1e9").exit_code == 0);
  CHECK(run_trainsim("validate " + f + " --memory-limit 0").exit_code == 1);
}

TEST_CASE("trainsim validate reads at most the size limit, from regular files and devices alike") {
  CommandResult r = run_bounded("validate /dev/zero", 300);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("/dev/zero: the input is larger than the limit of 1 GiB") != std::string::npos);
  // A named pipe is read like a file.
  auto dir = fresh_dir("hardened-pipe");
  std::string f = write(dir / "ddp.sched", kDdp);
  std::string fifo = (dir / "pipe.sched").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  r = run_trainsim(fmt::format("validate {} & cat {} > {}; wait $!", fifo, f, fifo));
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("pipe.sched: valid: 12 ops on 2 ranks") != std::string::npos);
}

TEST_CASE("trainsim validate: 500,000 batch ids on one line are parsed in about linear time") {
  // Quadratic parsing took 19 s for 125,000 ids, so about 5 minutes for these; the bound of 120 s only catches
  // that (this takes well under a second), it times nothing.
  auto dir = fresh_dir("hardened-batches");
  std::string ids;
  for (int i = 0; i < 500000; ++i) ids += fmt::format("{}{}", i ? "," : "", 2 * i);
  std::string f = write(dir / "ids.sched", "trainsim-schedule 1\nworld_size 1\nlayers 1\nmicrobatches 1000000\n\nrank 0\n"
                                           "  load -> W0 O0 A0{" + ids + "}\n");
  CommandResult r = run_bounded("validate " + f, 120);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("layer 0 is never updated") != std::string::npos);
}

TEST_CASE("trainsim convert: blank lines after a CSV are no ranks, rows beyond the world-size limit are refused") {
  // A CSV that was read and does not import exits 1 (README, "Exit status").
  auto dir = fresh_dir("hardened-csv");
  std::string trailing = write(dir / "trailing.csv", kZeroBubbleV + std::string(1'000'000, '\n'));
  CommandResult r = run_trainsim("convert " + trailing + " " + (dir / "t.sched").string(), true);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("2 ranks, 4 stages, 4 microbatches") != std::string::npos);

  std::string rows;
  for (int i = 0; i < 131073; ++i) rows += i == 0 ? "0F0,0B0\n" : ",\n";
  r = run_trainsim("convert " + write(dir / "rows.csv", rows) + " " + (dir / "r.sched").string(), true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("rows.csv: the CSV has more than 131072 rows (ranks), the limit") != std::string::npos);

  r = run_trainsim("convert " + write(dir / "stage.csv", "1048576F0\n") + " " + (dir / "s.sched").string(), true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("cell '1048576F0': the stage number is too large (stages are 0 to 1048575)") != std::string::npos);

  r = run_trainsim("convert " + write(dir / "esc.csv", "0F0,\x1b[2J\n") + " " + (dir / "e.sched").string(), true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("cell '\\x1b[2J'") != std::string::npos);
  CHECK(r.out.find('\x1b') == std::string::npos);
}

TEST_CASE("trainsim gen refuses options beyond the limits at once (they aborted with bad_alloc or ran on)") {
  CommandResult r = run_bounded("gen gpipe --stages 1000000000 -o /dev/null", 120);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("gpipe: the options ask for 1000000000 ranks, above the limit of 131072") != std::string::npos);
  r = run_bounded("gen interleaved-1f1b --stages 4 --chunks 1000000000 -o /dev/null", 120);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("the options ask for 4000000000 layers, above the limit of 1048576") != std::string::npos);
  r = run_bounded("gen gpipe --stages 2048 --microbatches 16384 -o /dev/null", 120);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("33554432 layer-microbatch pairs (the work of one step), above the limit of 16777216") !=
        std::string::npos);
}

TEST_CASE("a device, model or network JSON nested 200,000 deep, or with 1e400, is a clear error naming the file (issue 38)") {
  const std::string deep = "hardened_deep_device.json", huge = "hardened_huge_device.json";
  {
    std::ofstream f(deep);
    f << "{\"preset\":\"h100-sxm\",";
    for (int i = 0; i < 200000; ++i) f << "\"a\":{";
    f << "\"b\":1";
    for (int i = 0; i < 200000; ++i) f << "}";
    f << "}";
    std::ofstream g(huge);
    g << "{\"preset\":\"h100-sxm\",\"peak_flops\":1e400}";
  }
  CommandResult r = run_trainsim("gen 1f1b --stages 2 --model llama3-8b --device " + deep + " --sim", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find(deep + ": objects or arrays nested deeper than 16 levels") != std::string::npos);
  r = run_trainsim("gen 1f1b --stages 2 --model llama3-8b --device " + huge + " --sim", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find(huge + ": not valid JSON") != std::string::npos);
  CHECK(r.out.find("internal error") == std::string::npos);
  std::remove(deep.c_str());
  std::remove(huge.c_str());
}
