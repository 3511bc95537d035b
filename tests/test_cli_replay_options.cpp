// `trainsim replay`'s options (issue 18): every numeric option is range-checked before any work, naming the
// command and the option (exit 2); a diverging run stops with the step whose loss or gradient norm is not finite (exit 1); the
// clipping note is a sentence; the tests' fault injection is not in the user's binary.
#include <doctest/doctest.h>

#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

using namespace trainsim::testing;

namespace {

std::string data() { return std::string(" --data ") + TRAINSIM_SOURCE_DIR + "/tests/data/corpus.txt"; }

// `trainsim replay ddp --model tiny ARGS`, refused as a bad option: exit 2, the command and the option named,
// and `expect` in the message.
void refused(const std::string& args, const std::string& option, const std::string& expect) {
  CAPTURE(args);
  const std::string steps = args.find("--steps ") == std::string::npos ? " --steps 1 " : " ";
  CommandResult r = run_trainsim("replay ddp --model tiny" + steps + args + data(), true);
  INFO(r.out);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("trainsim replay: " + option) != std::string::npos);
  CHECK(r.out.find(expect) != std::string::npos);
  CHECK(r.out.find("step ") == std::string::npos);  // refused before any work
}

}  // namespace

TEST_CASE("trainsim replay: model sizes of 0 or less are refused, not replaced by the preset's") {
  for (const char* option : {"--blocks", "--dim", "--heads", "--ffn", "--seq", "--microbatch-size"})
    for (const char* value : {"0", "-1", "2147483648", "1e3", "four"})
      refused(std::string(option) + " " + value, option,
              std::string("expected a whole number from 1 to 2147483647, got '") + value + "'");
  // Given and valid: used (the description says so); not given: the preset's.
  CommandResult r = run_trainsim("replay ddp --model tiny --blocks 4 --steps 1 --json" + data());
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["model"].get<std::string>().find("tiny (modified): 4 blocks") == 0);
  r = run_trainsim("replay ddp --model tiny --steps 1 --json" + data());
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["model"].get<std::string>().find("tiny: 2 blocks") == 0);
}

TEST_CASE("trainsim replay: a model whose sizes overflow int or long, or fill no machine, is a clear error") {
  // Every product in double: dim x ffn = 4e12 overflows int; parameters() would overflow nothing, but the
  // matrix is beyond what one buffer may hold.
  CommandResult r = run_trainsim("replay ddp --model tiny --dim 2000000 --ffn 2000000 --steps 1" + data(), true);
  INFO(r.out);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("trainsim replay: the model is too large for the executor: a block's wqkv matrix (3·dim × dim) "
                   "would hold 1.2e+13 elements, more than the 1e+09 one tensor may hold") != std::string::npos);
  r = run_trainsim("replay ddp --model tiny --blocks 2000000000 --dim 10000 --heads 2 --ffn 8 --steps 1" + data(), true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("the model is too large for the executor: 8.01e+17 parameters, more than 1e+12") != std::string::npos);
  r = run_trainsim("replay ddp --model tiny --seq 40000 --steps 1" + data(), true);  // attention scores 2·2·40000²
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("attention scores") != std::string::npos);
}

TEST_CASE("trainsim replay: rates a float cannot hold, and out-of-range optimizer settings, are refused") {
  // 1e-50 rounds to 0 in a float: it silently became the default learning rate.
  refused("--lr 1e-50", "--lr", "expected a finite number from 1e-37 to 1e+37, got '1e-50'");
  refused("--lr 1e38", "--lr", "expected a finite number from 1e-37 to 1e+37, got '1e38'");
  refused("--lr 0", "--lr", "from 1e-37 to 1e+37");
  refused("--min-lr 1e-40", "--min-lr", "expected 0 or a finite number from 1e-37 to 1e+37, got '1e-40'");
  refused("--min-lr 0.1", "--min-lr", "--min-lr (0.1) must be at most the peak learning rate --lr (0.001, the default)");
  refused("--lr 0.01 --min-lr 0.02", "--min-lr", "--min-lr (0.02) must be at most the peak learning rate --lr (0.01)");
  refused("--weight-decay -0.1", "--weight-decay", "expected 0 or a finite number");
  refused("--weight-decay 1e-50", "--weight-decay", "expected 0 or a finite number from 1e-37 to 1e+37");
  refused("--weight-decay nan", "--weight-decay", "got 'nan'");
  refused("--grad-clip -1", "--grad-clip", "expected 0 or a finite number from 1e-37 to 1e+37 (0 turns clipping off)");
  refused("--grad-clip inf", "--grad-clip", "got 'inf'");
  refused("--grad-clip 1e-50", "--grad-clip", "got '1e-50'");
  refused("--tolerance 0", "--tolerance", "expected a finite number above 0");
  refused("--tolerance nan", "--tolerance", "got 'nan'");
  refused("--warmup -1", "--warmup", "expected a whole number from 0 to 10000000, got '-1'");
  refused("--steps 20 --warmup 21", "--warmup", "--warmup (21) must be at most --steps (20)");
  // The bounds themselves are accepted.
  CHECK(run_trainsim("replay ddp --model tiny --steps 1 --lr 1e-37 --min-lr 0 --weight-decay 0 --grad-clip 0" + data())
            .exit_code == 0);
}

TEST_CASE("trainsim replay: step counts are checked against each other") {
  for (const char* value : {"0", "-1", "10000001", "2.5"})
    refused(std::string("--steps ") + value, "--steps", std::string("expected a whole number from 1 to 10000000, got '") +
                                                            value + "'");
  refused("--stop-after 0", "--stop-after", "expected a whole number from 1 to 10000000, got '0'");
  refused("--steps 2 --stop-after 3", "--stop-after", "--stop-after (3) must be at most --steps (2)");
  refused("--trace-steps 0", "--trace-steps", "expected a whole number from 1 to 10000000, got '0'");
  refused("--trace-steps 10000001", "--trace-steps", "expected a whole number from 1 to 10000000, got '10000001'");
  refused("--microbatches 0", "--microbatches", "expected a whole number from 1 to 1048576, got '0'");
}

TEST_CASE("trainsim replay: timeouts beyond a week and out-of-range ports are refused") {
  // 1e300 s and 1e10 s overflowed the clock and timed out at once.
  for (const char* option : {"--timeout", "--rendezvous-timeout"})
    for (const char* value : {"1e300", "1e10", "604801", "0", "-1", "nan", "inf"})
      refused(std::string(option) + " " + value, option,
              std::string("expected a finite number from 0.001 to 604800 (seconds: at most a week), got '") + value + "'");
  CHECK(run_trainsim("replay ddp --model tiny --steps 1 --timeout 604800 --rendezvous-timeout 604800" + data()).exit_code == 0);
  for (const char* value : {"0", "-1", "65536", "70000"})
    refused(std::string("--master-port ") + value, "--master-port",
            std::string("expected a whole number from 1 to 65535, got '") + value + "'");
}

TEST_CASE("trainsim replay: a seed out of range is refused, not wrapped") {
  for (const char* value : {"-1", "1e30", "99999999999999999999", "18446744073709551616", "0x10", "+5"})
    refused(std::string("--seed '") + value + "'", "--seed",
            std::string("expected a whole number from 0 to 18446744073709551615, got '") + value + "'");
  // The whole range is usable: the largest seed is not 2^64 - 1 wrapped from -1 (the two runs agree).
  CommandResult top = run_trainsim("replay ddp --model tiny --steps 1 --json --seed 18446744073709551615" + data());
  REQUIRE(top.exit_code == 0);
  CommandResult one = run_trainsim("replay ddp --model tiny --steps 1 --json --seed 1" + data());
  REQUIRE(one.exit_code == 0);
  CHECK(nlohmann::json::parse(top.out)["losses"] != nlohmann::json::parse(one.out)["losses"]);
}

TEST_CASE("trainsim replay: a diverging run stops at the first step whose loss or gradient norm is not finite") {
  // With a learning rate of 1e30 step 2's loss is still finite but its gradients are not: the run stops there,
  // before the step is printed or its update saved (PyTorch's clip_grad_norm_(error_if_nonfinite=True)).
  CommandResult r = run_trainsim("replay ddp --model tiny --steps 4 --lr 1e30" + data(), true);
  INFO(r.out);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("trainsim replay: the gradient norm is not finite (NaN) in step 2 of 4: the training diverged (a "
                   "smaller --lr or --grad-clip may help)") != std::string::npos);
  CHECK(r.out.find("step     2/4") == std::string::npos);  // no loss printed for it, and no step after it
  CHECK(r.out.find("step     3/4") == std::string::npos);
  CHECK(r.out.find("nan") == std::string::npos);
  r = run_trainsim("replay ddp --model tiny --steps 4 --lr 1e30 --json" + data());
  CHECK(r.exit_code == 1);
  nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["ok"] == false);
  CHECK(j["error"].get<std::string>().find("the gradient norm is not finite (NaN) in step 2 of 4") == 0);
  CHECK(j["losses"].size() == 1);  // the steps before, all finite
  for (const auto& l : j["losses"]) CHECK(l.is_number());
}

TEST_CASE("trainsim replay: the clipping note is a sentence") {
  CommandResult r = run_trainsim("replay ddp --model tiny --blocks 2 --steps 1 --check" + data());
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("\ngradient clipping off: rank 0 runs update layer 0 before it has dW1{0-3}, which update layer 1 "
                   "reads, and clipping by the global norm needs every gradient before the first update\n") !=
        std::string::npos);
  r = run_trainsim("replay ddp --model tiny --blocks 2 --steps 1 --grad-clip 1" + data(), true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("trainsim replay: gradient clipping cannot run: rank 0 runs update layer 0 before it has dW1{0-3}, "
                   "which update layer 1 reads, and clipping by the global norm needs every gradient before the first "
                   "update (--grad-clip 0 turns clipping off)\n") != std::string::npos);
  r = run_trainsim("replay ddp --model tiny --blocks 2 --steps 1 --grad-clip 0" + data());
  CHECK(r.out.find("\ngradient clipping off (--grad-clip 0)\n") != std::string::npos);
  r = run_trainsim("replay gpipe --model tiny --blocks 8 --steps 1" + data());
  CHECK(r.out.find("\ngradient clipping at norm 1\n") != std::string::npos);
}

TEST_CASE("trainsim replay: the tests' fault injection is not in the user's binary") {
  CommandResult r = run_trainsim("replay ddp --model tiny --steps 1 --test-kill-at 1:1" + data(), true);
  INFO(r.out);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("--test-kill-at") != std::string::npos);
  CHECK(r.out.find("step ") == std::string::npos);
  CHECK(run_trainsim("replay --help").out.find("test-kill") == std::string::npos);
  // The tests' copy of trainsim has it (tests/test_dist.cpp kills a rank with it), and checks its value.
  CommandResult t = run_shell(std::string(TRAINSIM_FAULT_TEST_BINARY) + " replay ddp --model tiny --steps 1 --test-kill-at x" +
                              data() + " 2>&1");
  CHECK(t.exit_code == 2);
  CHECK(t.out.find("trainsim replay: --test-kill-at takes RANK:OP") != std::string::npos);
}
