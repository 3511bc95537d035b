// The command line's messages for a learner (issue 10 §1, §2): a mistyped flag gets the closest option, a
// missing input names the command and the path, an unwritable output says why, `gen` refuses sizes it
// cannot hold, `sim` and `validate` read a PyTorch CSV, and `--dot` writes the format its extension names.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

using namespace trainsim::testing;

namespace {

// 1F1B on two stages, four microbatches, as PyTorch pipelining writes it (compute only).
const char* k1f1bCsv = "0F0,0F1,,0B0,0F2,0B1,0F3,0B2,,0B3\n,1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n";

}  // namespace

TEST_CASE("a mistyped flag names the closest option of the sub-command it was given to") {
  CommandResult r = run_trainsim("gen 1f1b --stage 4", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim gen: unknown option '--stage': did you mean --stages?"));

  r = run_trainsim("sim x.sched --svgg out.svg", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim sim: unknown option '--svgg': did you mean --svg?"));

  r = run_trainsim("replay 1f1b.sched --stpes 3", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim replay: unknown option '--stpes': did you mean --steps?"));

  r = run_trainsim("puzzles --exercise", true);  // --exercises
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim puzzles: unknown option '--exercise': did you mean --exercises?"));

  r = run_trainsim("convert a.sched b.csv --form=comms --stage-mapp loop", true);  // "--opt=value" too
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "did you mean --stage-map?"));
  CHECK(!has(r.out, "'--form'"));  // a known option is not reported

  // Nothing close: where to look instead of a wild guess.
  r = run_trainsim("gen 1f1b --zzzzzzzz 1", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out == "trainsim gen: unknown option '--zzzzzzzz'\nRun `trainsim gen --help` for the options.\n");
}

TEST_CASE("a missing input names the command and the path, an unwritable output says why") {
  auto dir = fresh_dir("cli-messages-io");
  CommandResult r = run_trainsim("sim /nonexistent/x.sched", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim sim: cannot read '/nonexistent/x.sched': No such file or directory"));
  r = run_trainsim("validate missing.sched", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim validate: cannot read 'missing.sched': No such file or directory"));
  r = run_trainsim("convert /nonexistent/x.sched out.csv", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim convert: cannot read '/nonexistent/x.sched': No such file or directory"));
  r = run_trainsim("calibrate /nonexistent/t.json -o d.json", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim calibrate: "));
  CHECK(has(r.out, "/nonexistent/t.json"));

  r = run_trainsim("gen 1f1b -o /nonexistent/dir/x.sched", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim gen: cannot write '/nonexistent/dir/x.sched': No such file or directory"));
  const std::string f = write(dir / "ddp.sched", kDdp);
  r = run_trainsim("sim " + f + " --svg " + dir.string(), true);  // a directory
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim sim: cannot write '" + dir.string() + "': Is a directory"));
  r = run_trainsim("sim " + f + " --trace /dev/full", true);  // the disk is full
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim sim: cannot write '/dev/full': No space left on device"));
}

TEST_CASE("standard output that cannot be written is a failure, exit 2, for every command") {
  // Issue 38: `sim --json`, `validate` and others exited 0 with their output lost. Standard output goes to a full
  // device; standard error (the message) is what the test reads.
  const auto dir = fresh_dir("cli-lost-stdout");
  const std::string f = write(dir / "ddp.sched", kDdp);
  for (const std::string& args : {"sim " + f + " --json", "sim " + f, "validate " + f, std::string("gen 1f1b -o -"),
                                  "puzzles --only basic --json --out " + (dir / "svg").string()}) {
    INFO(args);
    const CommandResult r = run_shell(std::string(TRAINSIM_BINARY) + " " + args + " 2>&1 >/dev/full");
    CHECK(r.exit_code == 2);
    CHECK(has(r.out, "standard output could not be written"));  // (with the reason where errno still holds it)
    CHECK(has(r.out, "what it printed is lost"));
  }
  // The same commands with somewhere to write succeed (the check above is about the output, not the commands).
  CHECK(run_trainsim("validate " + f, true).exit_code == 0);
}

TEST_CASE("trainsim gen refuses sizes it cannot hold, with the limit, for every family of kinds") {
  CommandResult r = run_trainsim("gen pp-fsdp --stages 100000 --dp 100000 -o /dev/null", true);  // 10^10 ranks
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "pp-fsdp: the options ask for 10000000000 ranks, above the limit of 131072"));
  r = run_trainsim("gen fsdp --dp 4096 --layers 128 --microbatches 64 -o /dev/null", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "layer-microbatch pairs (the work of one step), above the limit of 16777216"));
  r = run_trainsim("gen zb-h1 --stages 4 --microbatches 3000000 -o /dev/null", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "zb-h1: the options ask for 3000000 microbatches, above the limit of 1048576"));
  // Issue 38: within the rank, layer and microbatch limits, the ops still grew past the machine's memory.
  r = run_trainsim("gen 3d --tp 2 --pp 2 --microbatches 1000000 -o /dev/null", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "3d: the options ask for about 12000000 ops on one rank (1 layers x 1000000 microbatches of a rank), "
                   "above the limit of 4194304"));
  r = run_trainsim("gen fsdp --dp 100000 --layers 32 --microbatches 1 -o /dev/null", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "fsdp: the options ask for about 32000000 ops over 100000 ranks, held at once, above the limit of 8388608"));
  r = run_trainsim("gen 1f1b --stages 99999999999 -o /dev/null", true);  // past int: CLI11 refuses it
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim gen: "));
  CHECK(has(r.out, "--stages"));
}

TEST_CASE("trainsim sim and validate read a PyTorch CSV directly, as the converted .sched") {
  auto dir = fresh_dir("cli-messages-csv");
  const std::string csv = write(dir / "1f1b.csv", k1f1bCsv);
  CommandResult v = run_trainsim("validate " + csv, true);
  CHECK(v.exit_code == 0);
  CHECK(has(v.out, "1f1b.csv: valid: "));
  CommandResult s = run_trainsim("sim " + csv + " --json");
  REQUIRE(s.exit_code == 0);
  REQUIRE(run_trainsim("convert " + csv + " " + (dir / "1f1b.sched").string()).exit_code == 0);
  CommandResult t = run_trainsim("sim " + (dir / "1f1b.sched").string() + " --json");
  REQUIRE(t.exit_code == 0);
  auto js = nlohmann::json::parse(s.out), jt = nlohmann::json::parse(t.out);
  CHECK(js["ops"] == jt["ops"]);
  CHECK(js["makespan"] == jt["makespan"]);
  CHECK(js["microbatches"] == 4);
  // --microbatches says how many when the CSV uses fewer indices than the step has.
  CommandResult m = run_trainsim("validate " + csv + " --microbatches 3", true);
  CHECK(m.exit_code != 0);
  // A CSV that does not import was read and is wrong: exit 1, naming the command.
  CommandResult bad = run_trainsim("sim " + write(dir / "bad.csv", "0F0,zz\n"), true);
  CHECK(bad.exit_code == 1);
  CHECK(has(bad.out, "trainsim sim: "));
  CHECK(has(bad.out, "'zz'"));
}

TEST_CASE("trainsim sim --dot writes the format its extension names, and refuses others") {
  auto dir = fresh_dir("cli-messages-dot");
  const std::string f = write(dir / "ddp.sched", kDdp);
  REQUIRE(run_trainsim("sim " + f + " --dot " + (dir / "g.gv").string()).exit_code == 0);
  CHECK(has(slurp(dir / "g.gv"), "digraph trainsim {"));  // DOT text (after its comment line)
  REQUIRE(run_trainsim("sim " + f + " --dot " + (dir / "g.svg").string()).exit_code == 0);
  CHECK(has(slurp(dir / "g.svg"), "<svg"));
  REQUIRE(run_trainsim("sim " + f + " --dot " + (dir / "g.png").string()).exit_code == 0);
  CHECK(slurp(dir / "g.png").rfind("\x89PNG\r\n\x1a\n", 0) == 0);  // the PNG signature, not DOT text
  REQUIRE(run_trainsim("sim " + f + " --dot " + (dir / "G.PDF").string()).exit_code == 0);
  CHECK(slurp(dir / "G.PDF").rfind("%PDF-", 0) == 0);

  CommandResult r = run_trainsim("sim " + f + " --dot " + (dir / "g.jpeg").string(), true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "ends in '.jpeg': name it .dot or .gv (DOT text), or .svg, .png or .pdf"));
  CHECK(!std::filesystem::exists(dir / "g.jpeg"));
  r = run_trainsim("sim " + f + " --dot " + (dir / "graph").string(), true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "has no extension"));

  // Laid-out formats keep the size limit; DOT text has none.
  const std::string big = (dir / "big.sched").string();
  REQUIRE(run_trainsim("gen 1f1b --stages 8 --microbatches 16 -o " + big).exit_code == 0);  // 1,256 ops
  r = run_trainsim("sim " + big + " --dot " + (dir / "big.png").string(), true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "the schedule has 1256 ops and Graphviz lays out at most 600"));
  CHECK(!std::filesystem::exists(dir / "big.png"));
}
