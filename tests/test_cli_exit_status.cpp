// The command line's rules for every sub-command (issue 18, "What a new user ran into"): one exit status rule
// (0 success; 1 it ran and what it checks failed; 2 it could not start or finish), errors that name the
// sub-command, a mistyped flag or sub-command answered with our line only, and output files written in the
// format their extension names (or refused before any work).
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli_helpers.h"

using namespace trainsim::testing;

namespace {

// The lines of `text`, without their newlines.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return lines;
}

const std::vector<std::string> kCommands = {"puzzles", "validate", "sim", "gen", "convert", "replay", "launch", "calibrate"};

}  // namespace

TEST_CASE("a mistyped flag prints only our lines: the closest option and where the options are") {
  CommandResult r = run_trainsim("gen 1f1b --stage 4", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out ==
        "trainsim gen: unknown option '--stage': did you mean --stages?\n"
        "Run `trainsim gen --help` for the options.\n");
  CHECK(!has(r.out, "were not expected"));  // CLI11's own words, which named the value 4 too
  r = run_trainsim("sim x.sched --svgg out.svg --jsn", true);  // two at once: a line each
  CHECK(r.exit_code == 2);
  CHECK(r.out ==
        "trainsim sim: unknown option '--svgg': did you mean --svg?\n"
        "trainsim sim: unknown option '--jsn': did you mean --json?\n"
        "Run `trainsim sim --help` for the options.\n");
  // launch: the command to run starts at the first word launch does not know; a near miss of --nproc is named.
  r = run_trainsim("launch --nprc 2 -- trainsim replay ddp", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim launch: unknown option '--nprc': did you mean --nproc?"));
  CHECK(!has(r.out, "'--model'"));
}

TEST_CASE("a mistyped sub-command gets the closest one and the list, none at all gets the list") {
  const std::string list =
      "trainsim: the commands are puzzles, validate, sim, gen, plan, convert, replay, launch, calibrate, sample, score, "
      "export\n";
  CommandResult r = run_trainsim("simm x.sched", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out == "trainsim: unknown command 'simm': did you mean sim?\n" + list +
                     "Run `trainsim --help` for what each does, `trainsim COMMAND --help` for its options.\n");
  r = run_trainsim("valdate x.sched", true);
  CHECK(has(r.out, "trainsim: unknown command 'valdate': did you mean validate?"));
  r = run_trainsim("frobnicate", true);  // nothing close: no guess
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim: unknown command 'frobnicate'\n"));
  CHECK(has(r.out, list));
  r = run_trainsim("", true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim: no command given\n" + list));
}

TEST_CASE("CLI11's own errors name the sub-command and exit 2: missing, wrong type, missing value, extra") {
  struct Case {
    std::string args, says;
  };
  for (const Case& c : {Case{"gen", "trainsim gen: KIND is required"},
                        Case{"gen 1f1b --stages x", "trainsim gen: --stages: expected a whole number from 1 to 2147483647, got 'x'"},
                        Case{"gen 1f1b --stages 1.5", "trainsim gen: --stages: expected a whole number from 1 to 2147483647, got '1.5'"},
                        Case{"sim", "trainsim sim: FILE is required"},
                        Case{"sim x.sched --svg", "trainsim sim: --svg"},
                        Case{"validate ddp --memory-limit lots", "trainsim validate: --memory-limit: expected a finite number"},
                        Case{"replay ddp --lr x", "trainsim replay: --lr: expected a finite number"},
                        Case{"convert a.sched", "trainsim convert: OUT is required"},
                        Case{"calibrate t.json", "trainsim calibrate: --output is required"},
                        Case{"launch -- true", "trainsim launch: --nproc is required"},
                        Case{"puzzles --only", "trainsim puzzles: --only"},
                        Case{"gen 1f1b extra", "trainsim gen: The following argument was not expected: extra"}}) {
    CAPTURE(c.args);
    CommandResult r = run_trainsim(c.args, true);
    CHECK(r.exit_code == 2);
    CHECK(has(r.out, c.says));
    const std::string sub = c.args.substr(0, c.args.find(' '));
    CHECK(has(r.out, "Run `trainsim " + sub + " --help` for the options."));
  }
}

TEST_CASE("exit status: 2 when the input cannot be read, for every command that reads one") {
  auto dir = fresh_dir("exit-unreadable");
  const std::string missing = (dir / "missing.sched").string();
  for (const std::string& args : std::vector<std::string>{"validate " + missing, "sim " + missing, "replay " + missing + " --model tiny", "convert " + missing + " x.csv",
        "calibrate " + (dir / "t.json").string() + " -o " + (dir / "d.json").string(), "validate nosuchpuzzle",
        "replay nosuchpuzzle", "sim " + dir.string() + "/"}) {
    CAPTURE(args);
    CommandResult r = run_trainsim(args, true);
    CHECK(r.exit_code == 2);
    const std::string sub = args.substr(0, args.find(' '));
    CHECK(r.out.rfind("trainsim " + sub + ": ", 0) == 0);  // the first line names the command
  }
  CHECK(has(run_trainsim("sim " + dir.string() + "/", true).out, "it is a directory"));
  CHECK(!std::filesystem::exists(dir / "d.json"));
}

TEST_CASE("exit status: 1 when the input was read and is wrong, and every line of the error names the command") {
  auto dir = fresh_dir("exit-wrong");
  const std::string syntax = write(dir / "syntax.sched", "trainsim-schedule 1\nworld_size two\n");
  std::string broken = kDdp;
  const std::string reduce1 = "  all-reduce L0 : dW0{1} -> dW0{0-1}\n";
  broken.replace(broken.find(reduce1), reduce1.size(), "");  // rank 0's all-reduce waits for rank 1: a deadlock
  const std::string invalid = write(dir / "invalid.sched", broken);
  const std::string csv = write(dir / "bad.csv", "0F0,0Q0\n");
  for (const std::string& args : std::vector<std::string>{"validate " + syntax, "sim " + syntax, "validate " + invalid, "sim " + invalid, "validate " + csv, "sim " + csv,
        "convert " + syntax + " " + (dir / "o.csv").string(), "convert " + csv + " " + (dir / "o.sched").string(),
        "replay " + syntax + " --model tiny", "replay " + csv + " --model tiny"}) {
    CAPTURE(args);
    CommandResult r = run_trainsim(args, true);
    CHECK(r.exit_code == 1);
    const std::string sub = args.substr(0, args.find(' '));
    for (const std::string& line : lines_of(r.out)) {
      CAPTURE(line);
      if (line.empty() || line[0] == ' ') continue;  // a deadlock's detail lines, indented
      CHECK(line.rfind("trainsim " + sub + ": ", 0) == 0);
    }
  }
  CHECK(has(run_trainsim("validate " + syntax, true).out, "trainsim validate: " + syntax + ":2:"));
  CHECK(has(run_trainsim("validate " + invalid, true).out, "trainsim validate: " + invalid + ": invalid: "));
}

TEST_CASE("every sub-command's --help states the exit status, as the README does") {
  for (const std::string& sub : kCommands) {
    CAPTURE(sub);
    CommandResult r = run_trainsim(sub + " --help");
    CHECK(r.exit_code == 0);
    if (sub != "launch") CHECK(has(r.out, "Exit status: 0 "));  // launch passes its ranks' codes on
  }
  CHECK(has(run_trainsim("--help").out, "Exit status (every command): 0 success; 1 "));
}

TEST_CASE("trainsim gen -o writes the format its extension names: PyTorch CSV for .csv, .sched text otherwise") {
  auto dir = fresh_dir("gen-formats");
  auto at = [&](const char* name) { return (dir / name).string(); };
  REQUIRE(run_trainsim("gen 1f1b --stages 4 --microbatches 8 -o " + at("1f1b.sched")).exit_code == 0);
  CHECK(slurp(dir / "1f1b.sched").rfind("trainsim-schedule 1\n", 0) == 0);
  REQUIRE(run_trainsim("convert " + at("1f1b.sched") + " " + at("converted.csv")).exit_code == 0);
  REQUIRE(run_trainsim("gen 1f1b --stages 4 --microbatches 8 -o " + at("1f1b.csv")).exit_code == 0);
  CHECK(slurp(dir / "1f1b.csv") == slurp(dir / "converted.csv"));  // as convert writes it
  CHECK(slurp(dir / "1f1b.csv").rfind("0F0,0F1,0F2,0F3,0B0,", 0) == 0);
  REQUIRE(run_trainsim("gen 1f1b --stages 4 --microbatches 8 -o " + at("UPPER.CSV")).exit_code == 0);
  CHECK(slurp(dir / "UPPER.CSV") == slurp(dir / "1f1b.csv"));
  // A name without an extension, and standard output, get .sched text.
  REQUIRE(run_trainsim("gen 1f1b --stages 4 --microbatches 8 -o " + at("noext")).exit_code == 0);
  CHECK(slurp(dir / "noext") == slurp(dir / "1f1b.sched"));
  CHECK(run_trainsim("gen 1f1b --stages 4 --microbatches 8").out == slurp(dir / "1f1b.sched"));
  // --sim with -o x.csv simulates and writes the CSV.
  CommandResult sim = run_trainsim("gen 1f1b --stages 4 --microbatches 8 --sim -o " + at("sim.csv"));
  CHECK(sim.exit_code == 0);
  CHECK(has(sim.out, "bubble 27.3%"));
  CHECK(slurp(dir / "sim.csv") == slurp(dir / "1f1b.csv"));

  // The V-shaped and split-backward kinds come back through the importer as the same schedule's timing.
  for (const char* kind : {"zbv", "dualpipev", "interleaved-zb", "zb-h1", "interleaved-1f1b"}) {
    CAPTURE(kind);
    const std::string f = at("k.csv");
    REQUIRE(run_trainsim(fmt::format("gen {} --stages 2 --microbatches 4 --chunks 2 -o {}", kind, f)).exit_code == 0);
    CommandResult back = run_trainsim("validate " + f, true);
    CHECK(back.exit_code == 0);
  }
}

TEST_CASE("trainsim gen refuses an output its format cannot hold, and any other extension, writing nothing") {
  auto dir = fresh_dir("gen-refused");
  CommandResult r = run_trainsim("gen ddp --dp 2 -o " + (dir / "ddp.csv").string(), true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim gen: cannot write " + (dir / "ddp.csv").string() +
                       ": a PyTorch pipelining CSV cannot hold this ddp schedule: "));
  CHECK(!std::filesystem::exists(dir / "ddp.csv"));
  r = run_trainsim("gen ddp --dp 2 --sim -o " + (dir / "ddp.csv").string(), true);  // refused before simulating
  CHECK(r.exit_code == 2);
  CHECK(!has(r.out, "ops on 2 ranks"));
  r = run_trainsim("gen 1f1b -o " + (dir / "x.json").string(), true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "trainsim gen: --output: '" + (dir / "x.json").string() +
                       "' ends in '.json', but this option writes .sched text or PyTorch pipelining CSV: name it "
                       ".sched or .csv"));
  CHECK(!std::filesystem::exists(dir / "x.json"));
}

TEST_CASE("--svg, --trace and calibrate's outputs refuse a name whose extension says another format") {
  auto dir = fresh_dir("output-names");
  const std::string f = write(dir / "ddp.sched", kDdp);
  struct Case {
    std::string args, says;
  };
  for (const Case& c :
       {Case{"sim " + f + " --svg " + (dir / "t.png").string(),
             "trainsim sim: --svg: '" + (dir / "t.png").string() + "' ends in '.png', but this option writes SVG: name it .svg"},
        Case{"sim " + f + " --trace " + (dir / "t.svg").string(), "trainsim sim: --trace: "},
        Case{"replay ddp --model tiny --svg " + (dir / "t.html").string(), "trainsim replay: --svg: "},
        Case{"replay ddp --model tiny --trace " + (dir / "t.pftrace").string(), "ends in '.pftrace', but this option writes JSON"},
        Case{"calibrate " + f + " -o " + (dir / "d.yaml").string(), "trainsim calibrate: --output: "},
        Case{"calibrate " + f + " -o " + (dir / "d.json").string() + " --network-output " + (dir / "n.txt").string(),
             "trainsim calibrate: --network-output: "}}) {
    CAPTURE(c.args);
    CommandResult r = run_trainsim(c.args, true);
    CHECK(r.exit_code == 2);
    CHECK(has(r.out, c.says));
  }
  for (const char* name : {"t.png", "t.svg", "t.html", "t.pftrace", "d.yaml", "d.json", "n.txt"})
    CHECK(!std::filesystem::exists(dir / name));
  // A name without an extension (a device, a pipe) is taken as it is.
  CHECK(run_trainsim("sim " + f + " --svg /dev/null --trace /dev/null").exit_code == 0);
}

TEST_CASE("a stage on several ranks (pp-fsdp with --dp 2) is refused by the CSV export, not written for the import to refuse") {
  auto dir = fresh_dir("csv-replicated");
  CommandResult r = run_trainsim("gen pp-fsdp --stages 2 --dp 2 --microbatches 2 -o " + (dir / "p.csv").string(), true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "rank 2: forward layer 0 batches {2}"));
  CHECK(has(r.out, "the stage map puts stage 0 on rank 0; a PyTorch CSV holds each stage on one rank"));
  CHECK(!std::filesystem::exists(dir / "p.csv"));
  // convert says the same of the .sched.
  REQUIRE(run_trainsim("gen pp-fsdp --stages 2 --dp 2 --microbatches 2 -o " + (dir / "p.sched").string()).exit_code == 0);
  r = run_trainsim("convert " + (dir / "p.sched").string() + " " + (dir / "p.csv").string(), true);
  CHECK(r.exit_code == 2);
  CHECK(has(r.out, "a PyTorch pipelining CSV cannot hold this schedule: rank 2: forward layer 0 batches {2}"));
  // One replica (--dp 1) is a plain pipeline and is written.
  CHECK(run_trainsim("gen pp-fsdp --stages 2 --dp 1 --microbatches 2 -o " + (dir / "p.csv").string()).exit_code == 0);
}
