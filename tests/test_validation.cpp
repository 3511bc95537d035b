// The hardware model against published training runs (issue 20, "Checked against published runs"): each row is
// a run whose configuration is published in full, the trainsim command that describes it, the published
// throughput (and memory where published) and the prediction. Predictions are deterministic: the test checks
// each row's prediction against the one docs/hardware-model.md §5 records (within 0.5 %), and the table's error
// bounds. TRAINSIM_VALIDATION_TABLE=FILE writes the Markdown table of §5 to FILE.
//
// No row informed any preset number: the presets come from datasheets, kernel benchmarks and NCCL's model
// (docs/hardware-model.md §1-2); the runs' own pages gave only hardware descriptions (Selene's network in
// Narayanan et al. §5; the Grand Teton H100's memory, power and "between SXM and NVL" peak in torchtitan's
// benchmark page), never their throughput. Every row is held out.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_helpers.h"

using trainsim::testing::CommandResult;
using trainsim::testing::run_trainsim;

namespace {

struct Run {
  const char* id;
  const char* source;         // where the figure and the configuration are published
  const char* configuration;  // in the source's words
  std::string command;        // trainsim gen ... --sim --json
  // Narayanan et al. report TFLOP/s per GPU counted with their equation 3 (recomputation included); the others
  // tokens/s per GPU. For the former, the model's l, h, s, V.
  bool tflops = false;
  double l = 0, h = 0, s = 0, V = 0;
  double published = 0;         // TFLOP/s or tokens/s per GPU
  double published_gib = 0;     // torchtitan's memory (GiB), 0: not published
  double recorded = 0;          // the prediction docs/hardware-model.md §5 records
  double recorded_gib = 0;
};

std::string gpt(int l, int h, int a) {
  return fmt::format("--model gpt2-1.5b --set model.blocks={} --set model.hidden={} --set model.heads={} --set "
                     "model.kv_heads={} --set model.ffn={} --set model.vocab=51200 --set model.seq=2048 --seq 2048",
                     l, h, a, a, 4 * h);
}

// Narayanan et al. 2021 (arXiv 2104.04473), Table 1; the configurations of Megatron-LM's
// examples/sc21/run_table_1.sh (TP, PP, micro-batch and global batch, layers per virtual stage, full
// recomputation: --recompute-method uniform); Selene (8 A100 80 GB per node, NVLink, 8 HDR 200 Gb/s HCAs).
Run narayanan(const char* id, const char* conf, int l, int h, int a, const std::string& parallel, double published,
               double recorded) {
  Run r{id, "Narayanan et al. 2021, Table 1; Megatron-LM examples/sc21/run_table_1.sh", conf, "", true, double(l),
        double(h), 2048, 51200, published, 0, recorded, 0};
  r.command = "gen 3d " + parallel + " " + gpt(l, h, a) +
              " --device a100-80g --network nvlink8-ib200 --recompute full --attention eager --sim --json";
  return r;
}

std::vector<Run> runs() {
  const std::string a100 = " --device a100-80g --network nvlink8-ib200 --elementwise eager";
  const std::string h100 = " --device h100-gt500 --network nvlink8-ib400";
  std::vector<Run> r;
  auto add = [&](Run x) { r.push_back(std::move(x)); };
  add(narayanan("GPT 1.7B", "24 layers, h 2304; TP 1, PP 1, 32 GPUs; batch 512, microbatch 16; full recomputation",
                24, 2304, 24, "--tp 1 --pp 1 --dp 32 --microbatches 1 --microbatch-size 16 --layers 24", 137, 152));
  add(narayanan("GPT 3.6B", "30 layers, h 3072; TP 2, PP 1, 64 GPUs; batch 512, microbatch 16",
                30, 3072, 32, "--tp 2 --pp 1 --dp 32 --microbatches 1 --microbatch-size 16 --layers 30", 138, 156));
  add(narayanan("GPT 7.5B", "36 layers, h 4096; TP 4, PP 1, 128 GPUs; batch 512, microbatch 16",
                36, 4096, 32, "--tp 4 --pp 1 --dp 32 --microbatches 1 --microbatch-size 16 --layers 36", 142, 157));
  add(narayanan("GPT 18.4B", "40 layers, h 6144; TP 8, PP 1, 256 GPUs; batch 1024, microbatch 8",
                40, 6144, 48, "--tp 8 --pp 1 --dp 32 --microbatches 4 --microbatch-size 8 --layers 40", 135, 149));
  add(narayanan("GPT 39.1B", "48 layers, h 8192; TP 8, PP 2, 512 GPUs; batch 1536, microbatch 4",
                48, 8192, 64, "--tp 8 --pp 2 --dp 32 --microbatches 12 --microbatch-size 4", 138, 155));
  add(narayanan("GPT 76.1B", "60 layers, h 10240; TP 8, PP 4 (interleaved, 5 layers per virtual stage), 1024 GPUs; batch 1792, microbatch 2",
                60, 10240, 80,
                "--tp 8 --pp 4 --dp 32 --microbatches 28 --microbatch-size 2 --schedule interleaved-1f1b --chunks 3", 140, 167));
  add(narayanan("GPT 145.6B", "80 layers, h 12288; TP 8, PP 8 (interleaved, 5 per virtual stage), 1536 GPUs; batch 2304, microbatch 2",
                80, 12288, 96,
                "--tp 8 --pp 8 --dp 24 --microbatches 48 --microbatch-size 2 --schedule interleaved-1f1b --chunks 2", 148, 170));
  add(narayanan("GPT 310.1B", "96 layers, h 16384; TP 8, PP 16 (interleaved, 3 per virtual stage), 1920 GPUs; batch 2160, microbatch 1",
                96, 16384, 128,
                "--tp 8 --pp 16 --dp 15 --microbatches 144 --microbatch-size 1 --schedule interleaved-1f1b --chunks 2", 155, 176));
  add(narayanan("GPT 529.6B", "105 layers, h 20480; TP 8, PP 35 (interleaved, 1 per virtual stage), 2520 GPUs; batch 2520, microbatch 1",
                105, 20480, 128,
                "--tp 8 --pp 35 --dp 9 --microbatches 280 --microbatch-size 1 --schedule interleaved-1f1b --chunks 3", 163, 174));
  add(narayanan("GPT 1008B", "128 layers, h 25600; TP 8, PP 64, 3072 GPUs; batch 3072, microbatch 1",
                128, 25600, 160, "--tp 8 --pp 64 --dp 6 --microbatches 512 --microbatch-size 1", 163, 182));
  // torchtitan docs/performance.md: FSDP2 on 64 A100 80GB, WPS per GPU (torch.compile not used: the default).
  const char* tt_a100 = "torchtitan docs/performance.md (64 A100 80GB, FSDP2)";
  auto fsdp_a100 = [&](const char* id, const char* conf, const char* model, int blocks, const char* recompute, int b,
                       int seq, double published, double recorded) {
    add(Run{id, tt_a100, conf,
            fmt::format("gen fsdp --dp 64 --layers {} --microbatches 1 --model {}{} --recompute {} --microbatch-size {} "
                        "--seq {} --sim --json",
                        blocks, model, a100, recompute, b, seq),
            false, 0, 0, 0, 0, published, 0, recorded, 0});
  };
  fsdp_a100("Llama 3 8B, op AC", "batch 1, selective op AC", "llama3-8b", 32, "op", 1, 8192, 2973, 3403);
  fsdp_a100("Llama 3 70B, full AC", "batch 1, full AC", "llama3-70b", 80, "full", 1, 8192, 331, 365);
  fsdp_a100("Llama 2 13B, no AC", "batch 2, no AC", "llama2-13b", 40, "none", 2, 4096, 2162, 2451);
  fsdp_a100("Llama 2 13B, op AC", "batch 2, selective op AC", "llama2-13b", 40, "op", 2, 4096, 1904, 2176);
  fsdp_a100("Llama 2 70B, op AC", "batch 1, selective op AC", "llama2-70b", 80, "op", 1, 4096, 355, 400);
  fsdp_a100("Llama 2 70B, full AC", "batch 2, full AC", "llama2-70b", 80, "full", 2, 4096, 353, 386);
  // torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Grand Teton H100, 500 W, 96 GB HBM2e).
  const char* tt_h100 = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md";
  auto fsdp_h100 = [&](const char* id, const char* conf, int dp, const char* extra, double published, double gib,
                       double recorded, double recorded_gib) {
    add(Run{id, tt_h100, conf,
            fmt::format("gen fsdp --dp {} --layers 32 --microbatches 1 --model llama3-8b{} --recompute op "
                        "--microbatch-size 2 --seq 8192{} --sim --json",
                        dp, h100, extra),
            false, 0, 0, 0, 0, published, gib, recorded, recorded_gib});
  };
  fsdp_h100("Llama 3.1 8B, FSDP 8", "Table 1: 8 GPUs, batch 2, selective (op) AC", 8, " --elementwise eager", 5762, 82.4, 7509, 52.2);
  fsdp_h100("Llama 3.1 8B, FSDP 8, compile", "Table 1, + torch.compile", 8, "", 6667, 77.0, 8739, 52.2);
  fsdp_h100("Llama 3.1 8B, FSDP 8, compile, FP8", "Table 1, + torch.compile + Float8", 8, " --fp8", 8532, 76.8, 9962, 52.2);
  fsdp_h100("Llama 3.1 8B, FSDP 128", "Table 3: 128 GPUs, batch 2, selective (op) AC", 128, " --elementwise eager", 5605, 67.0, 7313, 40.0);
  fsdp_h100("Llama 3.1 8B, FSDP 128, compile", "Table 3, + torch.compile", 128, "", 6514, 62.0, 8474, 40.0);
  fsdp_h100("Llama 3.1 8B, FSDP 128, compile, FP8", "Table 3, + torch.compile + Float8", 128, " --fp8", 8380, 61.8, 9618, 40.0);
  auto cp = [&](const char* id, const char* conf, int dp, int c, int seq, double published, double gib, double recorded,
                double recorded_gib) {
    const std::string parallel = c == 1 ? fmt::format("gen fsdp --dp {}", dp)
                                        : fmt::format("gen 3d --cp {} --dp {} --zero 3", c, dp);
    add(Run{id, tt_h100, conf,
            fmt::format("{} --layers 32 --microbatches 1 --model llama3-8b{} --recompute full --microbatch-size 1 --seq "
                        "{} --fp8 --sim --json",
                        parallel, h100, seq),
            false, 0, 0, 0, 0, published, gib, recorded, recorded_gib});
  };
  cp("Llama 3.1 8B, FSDP 8, 32k", "Table 2: compile + Float8, batch 1, full AC, FSDP 8 CP 1", 8, 1, 32768, 3890, 83.9, 4707, 37.2);
  cp("Llama 3.1 8B, FSDP 4 CP 2, 64k", "Table 2, FSDP 4 CP 2", 4, 2, 65536, 2540, 84.2, 2893, 52.2);
  cp("Llama 3.1 8B, FSDP 2 CP 4, 128k", "Table 2, FSDP 2 CP 4", 2, 4, 131072, 1071, 84.0, 1622, 52.2);
  cp("Llama 3.1 8B, CP 8, 256k", "Table 2, FSDP 1 CP 8", 1, 8, 262144, 548, 84.5, 863, 52.2);
  add(Run{"Llama 3.1 70B, FSDP 32 TP 8", tt_h100, "Table 4: 256 GPUs, compile + Float8, batch 16, full AC, 2D",
          "gen 3d --tp 8 --dp 32 --zero 3 --sp --layers 80 --microbatches 1 --model llama3-70b" + h100 +
              " --recompute full --microbatch-size 16 --seq 8192 --fp8 --sim --json",
          false, 0, 0, 0, 0, 829, 71.9, 797, 52.1});
  return r;
}

double error_of(double predicted, double published) { return predicted / published - 1; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

TEST_CASE("validation: published training runs against trainsim's predictions") {
  std::vector<Run> table = runs();
  std::vector<double> errors, memory_errors;
  std::string md =
      "| run | source | configuration | trainsim command | published | predicted | error | memory published | "
      "memory predicted | error |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (Run& run : table) {
    CAPTURE(run.id);
    CommandResult r = run_trainsim(run.command);
    REQUIRE(r.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const double per_gpu = j["tokens_per_s_per_gpu"].get<double>();
    // Equation 3 of Narayanan et al.: 96·l·h²·(1 + s/(6h) + V/(16·l·h)) FLOPs per token, recomputation included.
    const double predicted =
        run.tflops ? per_gpu * 96 * run.l * run.h * run.h * (1 + run.s / (6 * run.h) + run.V / (16 * run.l * run.h)) / 1e12
                   : per_gpu;
    const double gib = j["peak_memory_bytes"].get<double>() / (1ull << 30);
    const double err = error_of(predicted, run.published);
    errors.push_back(std::fabs(err));
    std::string mem = "| | | ";
    if (run.published_gib > 0) {
      const double merr = error_of(gib, run.published_gib);
      memory_errors.push_back(std::fabs(merr));
      mem = fmt::format("| {:.1f} GiB | {:.1f} GiB | {:+.1f} % ", run.published_gib, gib, 100 * merr);
    }
    const std::string unit = run.tflops ? " TFLOP/s" : " tok/s";
    md += fmt::format("| {} | {} | {} | `trainsim {}` | {:.0f}{} | {:.0f}{} | {:+.1f} % {}|\n", run.id, run.source,
                      run.configuration, run.command, run.published, unit, predicted, unit, 100 * err, mem);
    if (run.recorded > 0) CHECK(predicted == doctest::Approx(run.recorded).epsilon(0.005));
    if (run.recorded_gib > 0) CHECK(gib == doctest::Approx(run.recorded_gib).epsilon(0.005));
  }
  const double med = median(errors), worst = *std::max_element(errors.begin(), errors.end());
  md += fmt::format("\nThroughput: median |error| {:.1f} %, worst {:.1f} % over {} runs.", 100 * med, 100 * worst,
                    errors.size());
  if (!memory_errors.empty())
    md += fmt::format(" Memory: median |error| {:.1f} %, worst {:.1f} % over {} runs.\n", 100 * median(memory_errors),
                      100 * *std::max_element(memory_errors.begin(), memory_errors.end()), memory_errors.size());
  if (const char* out = std::getenv("TRAINSIM_VALIDATION_TABLE")) std::ofstream(out) << md;
  // The bounds docs/hardware-model.md §5 states: issue 20's goal (median 10 %, worst 25 %) is not met; these keep the
  // table from getting worse unnoticed.
  CHECK(med < 0.14);
  CHECK(worst < 0.58);
  CHECK(median(memory_errors) < 0.37);
}
