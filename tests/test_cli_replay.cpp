// `trainsim replay` end to end: the loss per step, JSON fields, the check against one device, measured
// traces, checkpoints, and clear errors for bad options and inputs.
#include <doctest/doctest.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "exec/checkpoint.h"

using namespace trainsim::testing;

namespace {
std::string data() { return std::string(" --data ") + TRAINSIM_SOURCE_DIR + "/tests/data/corpus.txt"; }
}  // namespace

TEST_CASE("trainsim replay: a puzzle by name, with --check and --json") {
  CommandResult r = run_trainsim("replay ddp --model tiny --steps 3 --check --json" + data());
  CHECK(r.exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["ok"] == true);
  CHECK(j["error"].is_null());
  CHECK(j["losses"].size() == 3);
  CHECK(j["reference_losses"].size() == 3);
  CHECK(j["max_rel_diff_loss"].get<double>() <= 1e-5);
  CHECK(j["max_rel_diff_weights"].get<double>() <= 1e-5);
  CHECK(j["peak_bytes"].size() == 4);
  CHECK(j["predicted_peak_bytes"].size() == 4);
  CHECK(j["tokens_per_s"].get<double>() > 0);
  CHECK(j["tokens_per_step"] == 4 * 2 * 16);
}

TEST_CASE("trainsim replay: prints the loss of each step and writes the measured timeline") {
  auto dir = fresh_dir("replay-cli");
  auto at = [&](const char* n) { return (dir / n).string(); };
  CHECK(run_trainsim("gen 1f1b --stages 2 --microbatches 4 -o " + at("p.sched")).exit_code == 0);
  CommandResult r = run_trainsim("replay " + at("p.sched") + " --model tiny --steps 2 --svg " + at("m.svg") +
                                 " --trace " + at("m.json") + data());
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("step     1/2  loss ") != std::string::npos);
  CHECK(r.out.find("step     2/2  loss ") != std::string::npos);
  CHECK(r.out.find("memory per rank") != std::string::npos);
  CHECK(slurp(dir / "m.svg").find("<svg") != std::string::npos);
  nlohmann::json trace = nlohmann::json::parse(slurp(dir / "m.json"));
  int forwards = 0;
  for (const auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "X" && e.value("name", "").rfind("forward", 0) == 0) ++forwards;
  CHECK(forwards == 2 * 4);  // 2 stages x 4 microbatches in the last step
}

TEST_CASE("trainsim replay: a prediction far from the measured step says so, and how to predict for this machine") {
  auto dir = fresh_dir("replay-miss");
  const std::string dev = (dir / "slow.json").string();
  // A device a million times slower than any CPU: the prediction is far above any measured step, on any machine.
  write(dev, R"({"preset": "cpu", "peak_flops": 2e5, "hbm_bandwidth": 1e4})");
  CommandResult r = run_trainsim("replay ddp --model tiny --steps 2 --predict-device " + dev + data());
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("note: the measured step is ") != std::string::npos);
  CHECK(r.out.find("x the predicted one. Device " + dev + " describes another machine") != std::string::npos);
  CHECK(r.out.find("trainsim calibrate; docs/calibration.md") != std::string::npos);
  CHECK(r.out.find("--predict-device FILE.json") != std::string::npos);
  // --json carries the two times, not the note
  CommandResult j = run_trainsim("replay ddp --model tiny --steps 2 --json --predict-device " + dev + data());
  REQUIRE(j.exit_code == 0);
  CHECK(j.out.find("note: the measured step") == std::string::npos);
  const nlohmann::json parsed = nlohmann::json::parse(j.out);
  CHECK(parsed["predicted_step_seconds"].get<double>() > 1e3 * parsed["measured_step_seconds"].get<double>());
}

TEST_CASE("trainsim replay: save half-way, resume, and the losses continue") {
  auto dir = fresh_dir("replay-ckpt");
  const std::string ck = (dir / "ck").string();
  nlohmann::json all = nlohmann::json::parse(run_trainsim("replay gpipe --model tiny --blocks 8 --steps 4 --json" + data()).out);
  REQUIRE(all["ok"] == true);
  CommandResult first = run_trainsim("replay gpipe --model tiny --blocks 8 --steps 4 --stop-after 2 --save " + ck + data());
  CHECK(first.exit_code == 0);
  CHECK(first.out.find("saved a checkpoint in") != std::string::npos);
  nlohmann::json rest =
      nlohmann::json::parse(run_trainsim("replay gpipe --model tiny --blocks 8 --steps 4 --json --resume " + ck + data()).out);
  CHECK(rest["ok"] == true);
  CHECK(rest["first_step"] == 2);
  REQUIRE(rest["losses"].size() == 2);
  CHECK(rest["losses"][0] == all["losses"][2]);
  CHECK(rest["losses"][1] == all["losses"][3]);
  CommandResult wrong = run_trainsim("replay gpipe --model tiny --blocks 8 --seed 5 --steps 4 --resume " + ck + data(), true);
  CHECK(wrong.exit_code == 1);
  CHECK(wrong.out.find("cannot resume") != std::string::npos);
}

TEST_CASE("trainsim replay: bad options and inputs are clear errors") {
  CommandResult r = run_trainsim("replay ddp --model huge", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("unknown model preset 'huge' (presets: tiny, small, tiny-moe, small-moe)") != std::string::npos);
  r = run_trainsim("replay ddp --backend tpu", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("unknown backend 'tpu'") != std::string::npos);
  r = run_trainsim("replay ddp --grad-clip lots", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("--grad-clip") != std::string::npos);
  r = run_trainsim("replay nosuchthing --model tiny", true);  // no input: the replay cannot start
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("neither a schedule file (.sched, .csv) nor a puzzle (basic, grad_accum") != std::string::npos);
  r = run_trainsim("replay fsdp --model tiny --steps 1" + data(), true);  // 6 layers, 2 blocks
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("try --blocks 6") != std::string::npos);
  r = run_trainsim("replay ddp --model tiny --steps 2 --grad-clip 1" + data(), true);  // ddp updates layer 0 early
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("clipping by the global norm needs every gradient before the first update") != std::string::npos);
  r = run_trainsim("replay ddp --model tiny --steps 0", true);
  CHECK(r.exit_code == 2);
  // Numbers that would train garbage or never time out are refused before any work, naming the option.
  for (const char* bad : {"--lr nan", "--lr 0", "--lr -1e-3", "--min-lr inf", "--weight-decay -0.1", "--tolerance nan",
                          "--timeout inf", "--rendezvous-timeout 0"}) {
    CAPTURE(bad);
    r = run_trainsim(std::string("replay ddp --model tiny ") + bad, true);
    CHECK(r.exit_code == 2);
    CHECK(r.out.find("a finite number") != std::string::npos);  // ("expected [0 or ]a finite number ...")
    CHECK(r.out.find(std::string(bad).substr(0, std::string(bad).find(' '))) != std::string::npos);
  }
  CHECK(run_trainsim("replay --help").out.find("--check") != std::string::npos);
}

TEST_CASE("trainsim replay: a diverged run stops with exit 1 naming the step, and saves nothing (issue 38)") {
  // A learning rate of 1e37 without clipping drives the weights to NaN in two steps: step 2's gradient norm is
  // not finite. Before, --check passed (NaN > tolerance is false) and --save wrote the NaN weights.
  const auto dir = fresh_dir("replay-diverged");
  const std::string sched = (dir / "tp2.sched").string(), ckpt = (dir / "ckpt").string();
  REQUIRE(run_trainsim("gen tp --tp 2 -o " + sched).exit_code == 0);
  // A good checkpoint first: the diverged run must leave it the latest.
  REQUIRE(run_trainsim("replay " + sched + " --model tiny --blocks 4 --steps 1 --save " + ckpt + data()).exit_code == 0);
  for (const char* extra : {" --check", " --save "}) {
    CAPTURE(extra);
    const std::string args = std::string(extra) == " --save " ? std::string(extra) + ckpt : std::string(extra);
    CommandResult r = run_trainsim("replay " + sched + " --model tiny --blocks 4 --steps 2 --lr 1e37 --grad-clip 0" + args +
                                   data(), true);
    CHECK(r.exit_code == 1);
    CHECK(r.out.find("is not finite (NaN) in step 2 of 2: the training diverged") != std::string::npos);
    CHECK(r.out.find("saved a checkpoint") == std::string::npos);
  }
  CHECK(trainsim::exec::read_checkpoint_info(ckpt).step == 1);
}

TEST_CASE("trainsim replay --data '' is refused, not read as the default corpus (issue 38)") {
  CommandResult r = run_trainsim("replay ddp --model tiny --steps 1 --data ''", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("an empty path names no file") != std::string::npos);
}
