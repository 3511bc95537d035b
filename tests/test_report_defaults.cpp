// One set of defaults, printed in the report (issue 33): the device's capacity as nvidia-smi shows it and the
// stated reserve, each stage's peak split by kind, what the device was fitted to (or that it was fitted to
// nothing), and the global batch as users give it.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

using namespace trainsim::testing;

namespace {

const double kGiB = 1024.0 * 1024 * 1024;

nlohmann::json run_json(const std::string& args, int want = 0) {
  CommandResult r = run_trainsim(args);
  INFO(r.out);
  REQUIRE(r.exit_code == want);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("report: capacity as the tools show it, a stated reserve, the headroom below what is usable") {
  const auto j = run_json("gen 3d --tp 2 --pp 2 --dp 2 --microbatches 4 --model llama3-8b --seq 4096 --sim --json");
  // An H100 80GB as nvidia-smi shows it: 81,559 MiB; the reserve 1 GiB + 3 % of it (docs/hardware-model.md §3).
  const double capacity = 81559.0 * 1024 * 1024;
  CHECK(j["memory_capacity_bytes"].get<double>() == doctest::Approx(capacity));
  CHECK(j["memory_reserve_bytes"].get<double>() == doctest::Approx(kGiB + 0.03 * capacity));
  CHECK(j["headroom_bytes"].get<double>() ==
        doctest::Approx(capacity - j["memory_reserve_bytes"].get<double>() - j["peak_memory_bytes"].get<double>()));
  CHECK(j["device_fitted_to"] == "dgxc-nemo2409-bf16-8b-175b");
  // A peak between the usable memory and the capacity is out of memory: the reserve counts.
  const double peak = j["peak_memory_bytes"].get<double>();
  const std::string at = std::to_string(static_cast<long long>(peak + kGiB));
  const auto over = run_json("gen 3d --tp 2 --pp 2 --dp 2 --microbatches 4 --model llama3-8b --seq 4096 --sim --json "
                             "--set device.memory_bytes=" + at + " --set device.memory_reserve_bytes=" +
                                 std::to_string(static_cast<long long>(2 * kGiB)),
                             1);
  CHECK_FALSE(over["oom"].is_null());
  CHECK(over["headroom_bytes"].get<double>() < 0);
}

TEST_CASE("report: each stage's heaviest rank, its peak split into weights, grads, optimizer, activations, workspace") {
  const auto j = run_json("gen 3d --tp 2 --pp 4 --dp 2 --microbatches 8 --model llama3-8b --seq 4096 --sim --json");
  const auto& stages = j["stages"];
  REQUIRE(stages.size() == 4);
  double highest = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    CAPTURE(s);
    const auto& st = stages[s];
    CHECK(st["stage"] == s);
    CHECK(st["first_rank"] == 4 * s);  // TP 2 x DP 2 ranks a stage
    CHECK(st["last_rank"] == 4 * s + 3);
    const double sum = st["weights_bytes"].get<double>() + st["grads_bytes"].get<double>() +
                       st["optimizer_bytes"].get<double>() + st["activations_bytes"].get<double>() +
                       st["workspace_bytes"].get<double>();
    CHECK(sum == doctest::Approx(st["peak_memory_bytes"].get<double>()));
    const int peak_rank = st["peak_rank"];
    CHECK(st["peak_memory_bytes"].get<double>() == doctest::Approx(j["ranks"][peak_rank]["peak_memory_bytes"].get<double>()));
    highest = std::max(highest, st["peak_memory_bytes"].get<double>());
    // 2 bytes of weight and 12 of optimizer state per parameter (grads, 4 bytes, exist only once a backward ran).
    CHECK(st["optimizer_bytes"].get<double>() == doctest::Approx(6 * st["weights_bytes"].get<double>()));
    CHECK(st["grads_bytes"].get<double>() <= 2 * st["weights_bytes"].get<double>() * 1.0001);
  }
  CHECK(highest == doctest::Approx(j["peak_memory_bytes"].get<double>()));
  // The first stage holds the most microbatches' activations under 1F1B.
  CHECK(stages[0]["activations_bytes"].get<double>() > stages[2]["activations_bytes"].get<double>());
  // The text report says the same, a line a stage.
  CommandResult text = run_trainsim("gen 3d --tp 2 --pp 4 --dp 2 --microbatches 8 --model llama3-8b --seq 4096 --sim", false);
  CHECK(text.out.find("  stage   3 (ranks 12-15): peak ") != std::string::npos);
  CHECK(text.out.find("weights 2 B, grads 4 B, optimizer 12 B per parameter") != std::string::npos);
}

TEST_CASE("report: a device fitted to no published run says so") {
  auto dir = fresh_dir("report-fitted");
  const std::string file = (dir / "gpu.json").string();
  std::ofstream(file) << R"({"preset": "custom", "peak_flops": 1e15, "hbm_bandwidth": 3e12, "memory_bytes": 8e10})";
  const std::string cmd = "gen 1f1b --stages 2 --microbatches 2 --model llama3-8b --seq 2048 --recompute full --device " +
                          file + " --set device.memory_bytes=1e12 --sim";
  const auto j = run_json(cmd + " --json");
  CHECK(j["device_fitted_to"].is_null());
  CHECK(j["memory_reserve_bytes"] == 0);  // a custom device states its own reserve
  CommandResult text = run_trainsim(cmd, false);
  CHECK(text.out.find("note: device custom is fitted to no published run: its times are the kernel tables' and likely "
                      "too short") != std::string::npos);
}

TEST_CASE("gen --global-batch: sequences over every replica, as users count them") {
  // 3D: the microbatches per replica are the global batch / (DP x microbatch size); CP ranks share sequences.
  auto j = run_json("gen 3d --tp 2 --pp 2 --dp 4 --global-batch 64 --microbatch-size 2 --model llama3-8b --seq 2048 "
                    "--sim --json");
  CHECK(j["tokens_per_step"].get<double>() == doctest::Approx(64.0 * 2048));
  j = run_json("gen 3d --cp 2 --dp 2 --zero 3 --global-batch 8 --model llama3-8b --seq 4096 --recompute full --sim --json");
  CHECK(j["tokens_per_step"].get<double>() == doctest::Approx(8.0 * 4096));
  j = run_json("gen fsdp --dp 8 --global-batch 32 --model llama3-8b --seq 2048 --recompute full --sim --json");
  CHECK(j["tokens_per_step"].get<double>() == doctest::Approx(32.0 * 2048));
  j = run_json("gen 1f1b --stages 2 --global-batch 6 --model llama3-8b --seq 2048 --recompute full --sim --json");
  CHECK(j["microbatches"] == 6);
  // What does not divide, and both ways at once, are refused.
  CommandResult r = run_trainsim("gen 3d --tp 2 --pp 2 --dp 4 --global-batch 60 --microbatch-size 2 -o /dev/null", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("3d: --global-batch 60 does not split into whole microbatches: it must be a multiple of 8 (4 "
                   "data-parallel replicas x microbatch size 2 sequences)") != std::string::npos);
  r = run_trainsim("gen 3d --dp 2 --global-batch 8 --microbatches 4 -o /dev/null", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("give --global-batch or --microbatches, not both") != std::string::npos);
}
