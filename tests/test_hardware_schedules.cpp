// The hardware cost model on schedules: the `cost_model hardware` header block round-trips, bubble fractions
// at hardware costs where F, B and W are equal follow DESIGN §2, the CLI reports seconds, MFU and memory
// (with out-of-memory details), and calibration runs end to end on a measured replay.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "schedules/generators.h"
#include "schedules/hardware_sim.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// A model and machine on which forward, input-grad and weight-grad passes cost the same: attention, the
// LM head (vocabulary 1), memory traffic and communication are negligible next to the matrix multiplies.
hw::HardwareSetting equal_passes(int blocks) {
  hw::HardwareSetting s;
  s.model = hw::model_preset("custom");
  s.model.blocks = blocks, s.model.hidden = 4096, s.model.heads = 32, s.model.ffn = 16384, s.model.vocab = 1;
  s.model.seq = 8;
  s.device = hw::device_preset("h100-sxm");
  s.device.hbm_bandwidth = 1e30;
  s.network = hw::network_preset("nvlink8-ib400");
  s.network.intra_latency_s = s.network.inter_latency_s = 0;
  s.network.intra_bandwidth = s.network.inter_bandwidth = 1e30;
  s.seq = 8;
  return s;
}

double bubble(const std::string& kind, GenOptions o, int blocks) {
  Schedule s = generate(kind, o);
  s.header.cost_model = "hardware";
  s.header.hardware = equal_passes(blocks);
  HardwareRun run = simulate_hardware(s);
  REQUIRE(run.result.ok);
  return run.report->bubble_fraction;
}

}  // namespace

TEST_CASE("the cost_model hardware block round-trips byte for byte") {
  GenOptions o;
  o.stages = 4, o.microbatches = 8;
  Schedule s = generate("1f1b", o);
  s.header.cost_model = "hardware";
  hw::HardwareSetting hs;
  hs.model = hw::model_preset("llama3-70b");
  hs.model.blocks = 40;
  hs.device = hw::device_preset("h100-sxm");
  hs.device.efficiency.forward = 0.61;
  hs.network = hw::network_preset("nvlink8-ib400");
  hs.microbatch_size = 2, hs.seq = 4096, hs.recompute = hw::Recompute::Selective;
  s.header.hardware = hs;
  std::string text = print_schedule(s);
  CHECK(text.find("cost_model hardware\n  model llama3-70b blocks=40\n  device h100-sxm efficiency.forward=0.61\n"
                  "  network nvlink8-ib400\n  microbatch_size 2\n  seq 4096\n  recompute selective\np2p per-pair\n") !=
        std::string::npos);
  Schedule back = parse_schedule(text, "rt.sched");
  CHECK(back.header == s.header);
  CHECK(print_schedule(back) == text);
}

TEST_CASE("the cost_model hardware block: errors name the line, the word and the field") {
  auto error = [](const std::string& header) {
    try {
      parse_schedule("trainsim-schedule 1\nworld_size 1\nlayers 1\nmicrobatches 1\n" + header + "rank 0\n", "h.sched");
    } catch (const ParseError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error("cost_model hardware\nmodel llama3-8b hidden=x\ndevice h100-sxm\nnetwork nvlink8-ib400\n") ==
        "h.sched:6:7: model: field 'hidden': expected an integer, got 'x'");
  CHECK(error("cost_model hardware\nmodel llama3-8b\ndevice h100-sxm\n").starts_with("h.sched:8:1: cost_model hardware needs a 'network' line"));
  CHECK(error("cost_model unit\nmodel llama3-8b\n") ==
        "h.sched:6:1: 'model' belongs to the 'cost_model hardware' block (after that line)");
  CHECK(error("cost_model hardware\nmodel gpt5\ndevice h100-sxm\nnetwork nvlink8-ib400\n").starts_with("h.sched:6:7: unknown model 'gpt5'"));
  CHECK(error("cost_model hardware\nmodel llama3-8b\ndevice h100-sxm\nnetwork nvlink8-ib400\nrecompute some\n") ==
        "h.sched:9:11: recompute: expected none, selective, full or op, got 'some'");
}

TEST_CASE("bubble fractions at hardware costs with equal F, B and W follow DESIGN §2") {
  GenOptions o;
  o.stages = 4, o.microbatches = 8;
  const double p = 4, m = 8;
  // GPipe and 1F1B: (p-1)/(m+p-1).
  CHECK(bubble("1f1b", o, 4) == doctest::Approx((p - 1) / (m + p - 1)).epsilon(2e-3));
  CHECK(bubble("gpipe", o, 4) == doctest::Approx((p - 1) / (m + p - 1)).epsilon(2e-3));
  // Interleaved 1F1B with v chunks per rank: (p-1)/(v·m+p-1).
  o.chunks = 2;
  CHECK(bubble("interleaved-1f1b", o, 8) == doctest::Approx((p - 1) / (2 * m + p - 1)).epsilon(2e-3));
  o.chunks = 1;
  // ZB-H1: about a third of 1F1B's bubble (Qi et al. 2024): (p-1)·F idle of m·3F + (p-1)·F.
  CHECK(bubble("zb-h1", o, 4) == doctest::Approx((p - 1) / (3 * m + p - 1)).epsilon(0.05));
}

TEST_CASE("trainsim gen --sim --json: seconds, throughput, MFU and memory") {
  CommandResult r = run_trainsim(
      "gen 1f1b --stages 4 --microbatches 8 --model llama3-8b --device h100-sxm --network nvlink8-ib400 "
      "--recompute full --sim --json");
  REQUIRE(r.exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* k : {"step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "bubble_fraction",
                        "exposed_comm_s", "peak_memory_bytes", "oom"})
    CHECK(j.contains(k));
  const double step = j["step_time_s"].get<double>();
  CHECK(step > 0);
  CHECK(j["tokens_per_s"].get<double>() == doctest::Approx(8 * 8192 / step));
  CHECK(j["tokens_per_s_per_gpu"].get<double>() == doctest::Approx(8 * 8192 / step / 4));
  CHECK(j["mfu"].get<double>() > 0);
  CHECK(j["mfu"].get<double>() < 0.52);  // below the GEMM efficiency (0.80): bubbles, the recomputation, attention
  CHECK(j["oom"].is_null());
  CHECK(j["ranks"].size() == 4);
}

TEST_CASE("out of memory fails the step, with rank, time, op and what is resident, and the figures still reported") {
  const std::string gen = "gen ddp --dp 2 --layers 4 --microbatches 1 --model llama3-70b --device h100-sxm "
                          "--network nvlink8-ib400 --sim";
  CommandResult r = run_trainsim(gen + " --json");
  CHECK(r.exit_code == 1);
  nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["ok"] == false);
  const std::string error = j["error"].get<std::string>();
  CHECK(error.starts_with("out of device memory"));
  CHECK(error.find("rank 0") != std::string::npos);
  CHECK(error.find("forward layer 0") != std::string::npos);
  CHECK(error.find("resident: ") != std::string::npos);
  REQUIRE(j["oom"].is_object());
  CHECK(error.ends_with(j["oom"]["message"].get<std::string>()));
  CHECK(j["step_time_s"].get<double>() > 0);  // the figures are still there
  CHECK(j["peak_memory_bytes"].get<double>() > 80e9);
  CHECK(j["headroom_bytes"].get<double>() < 0);
  CHECK(j["oom"]["rank"] == 0);
  CHECK(j["oom"]["op"].get<std::string>().starts_with("forward layer 0"));
  CHECK(j["oom"]["resident"].get<std::string>().find("W0") != std::string::npos);
  CommandResult text = run_trainsim(gen, true);
  CHECK(text.exit_code == 1);
  CHECK(text.out.find("step time") != std::string::npos);
  CHECK(text.out.find("OUT OF MEMORY: rank 0") != std::string::npos);
  CHECK(text.out.find("trainsim gen: out of device memory") != std::string::npos);
  // --allow-oom: a what-if, as before: ok, exit 0, the oom object.
  CommandResult allowed = run_trainsim(gen + " --json --allow-oom");
  CHECK(allowed.exit_code == 0);
  nlohmann::json a = nlohmann::json::parse(allowed.out);
  CHECK(a["ok"] == true);
  CHECK(a["error"].is_null());
  CHECK(a["oom"] == j["oom"]);
  CHECK(a["step_time_s"] == j["step_time_s"]);
  CHECK(run_trainsim(gen + " --allow-oom").exit_code == 0);
  // sim and validate of the same schedule written out: exit 1 and the same error, or exit 0 with --allow-oom.
  auto dir = fresh_dir("hw-oom");
  const std::string file = (dir / "ddp.sched").string();
  REQUIRE(run_trainsim("gen ddp --dp 2 --layers 4 --microbatches 1 --model llama3-70b --device h100-sxm "
                       "--network nvlink8-ib400 -o " + file).exit_code == 0);
  CommandResult sim = run_trainsim("sim " + file + " --json");
  CHECK(sim.exit_code == 1);
  nlohmann::json sj = nlohmann::json::parse(sim.out);
  CHECK(sj["ok"] == false);
  // The same words, the op now with the file and line it came from.
  CHECK(sj["error"].get<std::string>().starts_with(
      "out of device memory (--allow-oom reports the step anyway): rank 0: memory limit exceeded at t=0: forward layer "
      "0 batches {0} (" + file + ":"));
  CHECK(sj["step_time_s"] == j["step_time_s"]);
  CHECK(sj["makespan"].get<double>() > 0);
  CommandResult sim_text = run_trainsim("sim " + file, true);
  CHECK(sim_text.exit_code == 1);
  CHECK(sim_text.out.find(": out of device memory: ") != std::string::npos);  // the heading line
  CHECK(sim_text.out.find("OUT OF MEMORY: rank 0") != std::string::npos);
  CHECK(sim_text.out.find("trainsim sim: " + file + ": out of device memory (") != std::string::npos);
  CHECK(run_trainsim("sim " + file + " --allow-oom").exit_code == 0);
  CommandResult validate = run_trainsim("validate " + file, true);
  CHECK(validate.exit_code == 1);
  CHECK(validate.out.find("trainsim validate: " + file + ": out of device memory (") != std::string::npos);
  CHECK(validate.out.find("valid:") == std::string::npos);
  CommandResult vj = run_trainsim("validate " + file + " --json");
  CHECK(vj.exit_code == 1);
  CHECK(nlohmann::json::parse(vj.out)["ok"] == false);
  CHECK(run_trainsim("validate " + file + " --allow-oom").exit_code == 0);
}

TEST_CASE("trainsim gen and sim: bad hardware options are clear errors") {
  // The device and network every command assumes without them, said once.
  CommandResult r = run_trainsim("gen 1f1b --stages 4 --model llama3-8b -o /dev/null", true);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("note: device h100-sxm (no --device given)") != std::string::npos);
  CHECK(r.out.find("note: network nvlink8-ib400 (no --network given)") != std::string::npos);
  r = run_trainsim("gen 1f1b --device h100-sxm", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("--model is needed") != std::string::npos);
  auto dir = fresh_dir("hw-errors");
  std::ofstream((dir / "m.json").string()) << R"({"preset": "llama3-8b", "hidden": "big"})";
  r = run_trainsim("gen 1f1b --model " + (dir / "m.json").string() + " --device h100-sxm --network nvlink8-ib400", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("m.json: field 'hidden': expected an integer, got \"big\"") != std::string::npos);
  r = run_trainsim("gen 1f1b --stages 8 --model tiny --device cpu --network cpu", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("the schedule has 8 layers but the model 'tiny' has 2 blocks") != std::string::npos);
  r = run_trainsim("gen 1f1b --model llama3-8b --device h100-sxm --network nvlink8-ib400 --set device.peak=1", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("unknown field 'peak'") != std::string::npos);
}

TEST_CASE("trainsim calibrate: a measured replay in, a device description out that sim accepts") {
  auto dir = fresh_dir("calibrate");
  auto at = [&](const char* n) { return (dir / n).string(); };
  const std::string data = std::string(" --data ") + TRAINSIM_SOURCE_DIR + "/tests/data/corpus.txt";
  REQUIRE(run_trainsim("gen 1f1b --stages 2 --microbatches 4 -o " + at("p.sched")).exit_code == 0);
  REQUIRE(run_trainsim("replay " + at("p.sched") + " --model tiny --steps 2 --trace " + at("t.json") + data).exit_code == 0);
  CommandResult r = run_trainsim("calibrate " + at("t.json") + " --model tiny -o " + at("dev.json") +
                                 " --network-output " + at("net.json"), true);
  REQUIRE(r.exit_code == 0);
  nlohmann::json dev = nlohmann::json::parse(slurp(at("dev.json")));
  CHECK(dev["preset"] == "cpu");
  CHECK(dev["calibration"]["compute_ops"].get<int>() > 0);
  for (const char* k : {"forward", "backward_input", "backward_weight", "attention", "memory"}) {
    CAPTURE(k);
    CHECK(dev["efficiency"][k].get<double>() > 0);
    CHECK(dev["efficiency"][k].get<double>() <= 1);
  }
  r = run_trainsim("sim " + at("p.sched") + " --model tiny --microbatch-size 2 --device " + at("dev.json") +
                   " --network " + at("net.json") + " --json");
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["step_time_s"].get<double>() > 0);
  CHECK(run_trainsim("calibrate " + at("p.sched") + " -o " + at("x.json"), true).out.find("not valid JSON") !=
        std::string::npos);
}

TEST_CASE("out of memory counts what an op holds inside itself: the loss's fp32 log-softmax and its grad") {
  // Llama 3 8B, FSDP over 8 ranks, 2 x 8192 tokens: 53.6 GiB resident as the loss starts and 15.7 GiB inside it
  // (8·V bytes per token). A device of 70 GB holds the first, not both.
  const std::string cmd = "gen fsdp --dp 8 --layers 32 --microbatches 1 --model llama3-8b --device h100-gt500 "
                          "--network nvlink8-ib400 --recompute op --microbatch-size 2 --seq 8192 --sim --json";
  CommandResult r = run_trainsim(cmd + " --set device.memory_bytes=70e9", true);
  CHECK(r.exit_code == 1);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["ok"] == false);
  CHECK(j["oom"]["op"].get<std::string>().rfind("loss batches {0}", 0) == 0);
  const double tokens = 2.0 * 8192, vocab = 128256;
  CHECK(j["oom"]["workspace_bytes"].get<double>() == doctest::Approx(8 * tokens * vocab));
  CHECK(j["oom"]["bytes"].get<double>() < 70e9);
  CHECK(j["oom"]["message"].get<std::string>().find("bytes inside it") != std::string::npos);
  // With room for both, the step fits and the peak holds the workspace.
  r = run_trainsim(cmd + " --set device.memory_bytes=80e9", true);
  CHECK(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["peak_memory_bytes"].get<double>() > 70e9);
}
