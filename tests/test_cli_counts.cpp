// Counts given on the command line of gen, sim, validate and convert (issue 18): 0 where 0 means "not given",
// negative values an option the kind ignores, and text that is no whole number are refused with the option
// and the range (exit 2), instead of silently taking the default or being ignored.
#include <doctest/doctest.h>

#include <string>

#include "cli_helpers.h"

using namespace trainsim::testing;

namespace {

void refused(const std::string& args, const std::string& command, const std::string& expect) {
  CAPTURE(args);
  CommandResult r = run_trainsim(args, true);
  INFO(r.out);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find(command + ": ") == 0);
  CHECK(r.out.find(expect) != std::string::npos);
}

}  // namespace

TEST_CASE("trainsim gen: counts below their range are refused, also for options the kind ignores") {
  // 1f1b ignores --chunks, --dp and --prefetch: `--chunks -3` was accepted without a word.
  refused("gen 1f1b --chunks -3 -o -", "trainsim gen", "--chunks: expected a whole number from 1 to 2147483647, got '-3'");
  refused("gen 1f1b --chunks 0 -o -", "trainsim gen", "--chunks: expected a whole number from 1 to 2147483647, got '0'");
  refused("gen 1f1b --dp=0 -o -", "trainsim gen", "--dp: expected a whole number from 1 to 2147483647, got '0'");
  refused("gen 1f1b --prefetch=-1 -o -", "trainsim gen", "--prefetch: expected a whole number from 0 to 2147483647");
  refused("gen 1f1b --layers=-1 -o -", "trainsim gen", "--layers: expected a whole number from 0 to 2147483647");
  refused("gen 1f1b --stages 1e3 -o -", "trainsim gen", "--stages: expected a whole number from 1 to 2147483647, got '1e3'");
  refused("gen 1f1b --microbatches 99999999999 -o -", "trainsim gen",
          "--microbatches: expected a whole number from 1 to 2147483647, got '99999999999'");
  // 0 layers is documented as the default (4); 0 prefetch is a real setting.
  CHECK(run_trainsim("gen fsdp --dp 2 --layers 0 --prefetch 0 -o -").exit_code == 0);
}

TEST_CASE("trainsim sim, validate and convert: --microbatches 0 is refused, not read as 'infer from the CSV'") {
  auto dir = fresh_dir("cli-counts");
  const std::string sched = (dir / "z.sched").string(), csv = (dir / "z.csv").string();
  REQUIRE(run_trainsim("gen zbv --stages 2 --microbatches 4 -o " + sched).exit_code == 0);
  REQUIRE(run_trainsim("convert " + sched + " " + csv).exit_code == 0);
  for (const char* command : {"sim", "validate"}) {
    refused(std::string(command) + " " + csv + " --stage-map v --microbatches 0", std::string("trainsim ") + command,
            "--microbatches: expected a whole number from 1 to 1048576, got '0'");
    refused(std::string(command) + " " + csv + " --stage-map v --microbatches 2000000", std::string("trainsim ") + command,
            "--microbatches: expected a whole number from 1 to 1048576, got '2000000'");
  }
  refused("convert " + csv + " " + (dir / "back.sched").string() + " --stage-map v --microbatches 0", "trainsim convert",
          "--microbatches: expected a whole number from 1 to 1048576, got '0'");
  CHECK(run_trainsim("validate " + csv + " --stage-map v --microbatches 4").exit_code == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("trainsim sim: the hardware model's --microbatch-size and --seq out of range (0, absurdly large) are refused") {
  const std::string hw = " --model llama3-8b --device h100-sxm --network nvlink8-ib400";
  refused("sim gpipe" + hw + " --microbatch-size 0", "trainsim sim",
          "--microbatch-size: expected a whole number from 1 to 65536, got '0'");
  refused("gen 1f1b --sim" + hw + " --microbatch-size 2000000000", "trainsim gen",
          "--microbatch-size: expected a whole number from 1 to 65536, got '2000000000'");
  refused("sim gpipe" + hw + " --seq 0", "trainsim sim", "--seq: expected a whole number from 1 to 16777216, got '0'");
  refused("gen 1f1b -o -" + hw + " --seq=-5", "trainsim gen", "--seq: expected a whole number from 1 to 16777216");
  CHECK(run_trainsim("gen 1f1b --sim" + hw + " --microbatch-size 65536 --seq 16777216").exit_code <= 1);  // the edges run
}
