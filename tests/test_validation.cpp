// The hardware model against published training runs (issue 20, "Checked against published runs"): each row is
// a run whose configuration is published in full, the trainsim command that describes it, the published
// throughput (and memory where published) and the prediction. Predictions are deterministic: the test checks
// each row's prediction against the one docs/hardware-model.md §5 records (within 0.5 %), and the table's error
// bounds. TRAINSIM_VALIDATION_TABLE=FILE writes the Markdown table of §5 to FILE.
//
// The presets come from datasheets, kernel benchmarks and NCCL's model (docs/hardware-model.md §1-2); the runs'
// own pages gave hardware descriptions (Selene's network in Narayanan et al. §5; the Grand Teton H100's memory,
// power and "between SXM and NVL" peak in torchtitan's benchmark page). One number per device was fitted to
// rows of this table, the fraction of the kernel tables' FLOP/s a training step sustains
// (efficiency.sustained): a100-80g's to five of Narayanan et al.'s runs, h100-gt500's to torchtitan's Table 1
// BF16 run, h100-sxm's to two of NVIDIA's dgxc BF16 runs, h200's to one torchtitan run, b200's to one NeMo 25.02
// run (fitted()). Every other row is held out, and the error bounds below are the held-out rows'.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
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
  double published_gib = 0;     // the published memory (GiB), 0: not published
  bool moe = false;             // a Mixture of Experts: reported on its own line, outside the dense bounds
};

std::string gpt(int l, int h, int a) {
  return fmt::format("--model gpt2-1.5b --set model.blocks={} --set model.hidden={} --set model.heads={} --set "
                     "model.kv_heads={} --set model.ffn={} --set model.vocab=51200 --set model.seq=2048 --seq 2048",
                     l, h, a, a, 4 * h);
}

// Narayanan et al. 2021 (arXiv 2104.04473), Table 1; the configurations of Megatron-LM's
// examples/sc21/run_table_1.sh (TP, PP, micro-batch and global batch, layers per virtual stage, full
// recomputation: --recompute-method uniform); Selene (8 A100 80 GB per node, NVLink, 8 HDR 200 Gb/s HCAs).
// Megatron-LM of 2021 ran the TP collectives synchronously (--tp-overlap none).
Run narayanan(const char* id, const char* conf, int l, int h, int a, const std::string& parallel, double published) {
  Run r{id, "Narayanan et al. 2021, Table 1; Megatron-LM examples/sc21/run_table_1.sh", conf, "", true, double(l),
        double(h), 2048, 51200, published, 0};
  r.command = "gen 3d " + parallel + " " + gpt(l, h, a) +
              " --device a100-80g --network nvlink8-ib200 --recompute full --attention eager --tp-overlap none --sim --json";
  return r;
}

// A model of the dimensions a source gives, on a preset of its family: layers, hidden, heads, KV heads, FFN,
// vocabulary, sequence length.
std::string shape(const char* base, int l, int h, int a, int kv, int f, int V, int seq) {
  return fmt::format("--model {} --set model.blocks={} --set model.hidden={} --set model.heads={} --set model.kv_heads={} "
                     "--set model.ffn={} --set model.vocab={} --set model.seq={} --seq {}",
                     base, l, h, a, kv, f, V, seq, seq);
}

std::vector<Run> runs() {
  const std::string a100 = " --device a100-80g --network nvlink8-ib200 --elementwise eager";
  const std::string h100 = " --device h100-gt500 --network nvlink8-ib400";
  const std::string sxm = " --device h100-sxm --network nvlink8-ib400";
  std::vector<Run> r;
  auto add = [&](Run x) { r.push_back(std::move(x)); };
  // A row of tokens/s per GPU (and memory in GiB where published).
  auto row = [&](const char* id, const char* source, const char* conf, const std::string& command, double published,
                 double gib) {
    add(Run{id, source, conf, command + " --sim --json", false, 0, 0, 0, 0, published, gib});
  };
  add(narayanan("GPT 1.7B", "24 layers, h 2304; TP 1, PP 1, 32 GPUs; batch 512, microbatch 16; full recomputation",
                24, 2304, 24, "--tp 1 --pp 1 --dp 32 --microbatches 1 --microbatch-size 16", 137));
  add(narayanan("GPT 3.6B", "30 layers, h 3072; TP 2, PP 1, 64 GPUs; batch 512, microbatch 16",
                30, 3072, 32, "--tp 2 --pp 1 --dp 32 --microbatches 1 --microbatch-size 16", 138));
  add(narayanan("GPT 7.5B", "36 layers, h 4096; TP 4, PP 1, 128 GPUs; batch 512, microbatch 16",
                36, 4096, 32, "--tp 4 --pp 1 --dp 32 --microbatches 1 --microbatch-size 16", 142));
  add(narayanan("GPT 18.4B", "40 layers, h 6144; TP 8, PP 1, 256 GPUs; batch 1024, microbatch 8",
                40, 6144, 48, "--tp 8 --pp 1 --dp 32 --microbatches 4 --microbatch-size 8", 135));
  add(narayanan("GPT 39.1B", "48 layers, h 8192; TP 8, PP 2, 512 GPUs; batch 1536, microbatch 4",
                48, 8192, 64, "--tp 8 --pp 2 --dp 32 --microbatches 12 --microbatch-size 4", 138));
  add(narayanan("GPT 76.1B", "60 layers, h 10240; TP 8, PP 4 (interleaved, 5 layers per virtual stage), 1024 GPUs; batch 1792, microbatch 2",
                60, 10240, 80,
                "--tp 8 --pp 4 --dp 32 --microbatches 28 --microbatch-size 2 --schedule interleaved-1f1b --chunks 3", 140));
  add(narayanan("GPT 145.6B", "80 layers, h 12288; TP 8, PP 8 (interleaved, 5 per virtual stage), 1536 GPUs; batch 2304, microbatch 2",
                80, 12288, 96,
                "--tp 8 --pp 8 --dp 24 --microbatches 48 --microbatch-size 2 --schedule interleaved-1f1b --chunks 2", 148));
  add(narayanan("GPT 310.1B", "96 layers, h 16384; TP 8, PP 16 (interleaved, 3 per virtual stage), 1920 GPUs; batch 2160, microbatch 1",
                96, 16384, 128,
                "--tp 8 --pp 16 --dp 15 --microbatches 144 --microbatch-size 1 --schedule interleaved-1f1b --chunks 2", 155));
  add(narayanan("GPT 529.6B", "105 layers, h 20480; TP 8, PP 35 (interleaved, 1 per virtual stage), 2520 GPUs; batch 2520, microbatch 1",
                105, 20480, 128,
                "--tp 8 --pp 35 --dp 9 --microbatches 280 --microbatch-size 1 --schedule interleaved-1f1b --chunks 3", 163));
  add(narayanan("GPT 1008B", "128 layers, h 25600; TP 8, PP 64, 3072 GPUs; batch 3072, microbatch 1",
                128, 25600, 160, "--tp 8 --pp 64 --dp 6 --microbatches 512 --microbatch-size 1", 163));
  // Korthikanti et al. 2022 (arXiv 2205.05198), Table 5: sequence parallelism with selective recomputation on
  // Selene, TP 8, no data parallelism, sequence 2048; three interleaved stages for 175B and 530B (their §6).
  // Tokens/s per GPU: batch x 2048 / (iteration time x GPUs).
  const char* korthikanti = "Korthikanti et al. 2022, Table 5 (Selene, A100 80GB)";
  auto sp_run = [&](const char* id, const char* conf, int l, int h, int a, const std::string& parallel, double batch,
                    double gpus, double seconds) {
    row(id, korthikanti, conf,
        "gen 3d " + parallel + " --sp " + shape("gpt2-1.5b", l, h, a, a, 4 * h, 51200, 2048) +
            " --device a100-80g --network nvlink8-ib200 --recompute selective --attention eager",
        batch * 2048 / (seconds * gpus), 0);
  };
  sp_run("GPT 22B, SP + selective", "48 layers, h 6144; TP 8, 8 GPUs; batch 4, microbatch 4; 1.10 s", 48, 6144, 64,
         "--tp 8 --pp 1 --dp 1 --microbatches 1 --microbatch-size 4", 4, 8, 1.10);
  sp_run("GPT 175B, SP + selective", "96 layers, h 12288; TP 8, PP 8 (3 interleaved stages), 64 GPUs; batch 64; 13.75 s",
         96, 12288, 96, "--tp 8 --pp 8 --dp 1 --microbatches 64 --schedule interleaved-1f1b --chunks 3", 64, 64, 13.75);
  sp_run("GPT 530B, SP + selective", "105 layers, h 20480; TP 8, PP 35 (3 interleaved stages), 280 GPUs; batch 280; 37.83 s",
         105, 20480, 128, "--tp 8 --pp 35 --dp 1 --microbatches 280 --schedule interleaved-1f1b --chunks 3", 280, 280, 37.83);
  sp_run("GPT 1T, SP + selective", "128 layers, h 25600; TP 8, PP 64, 512 GPUs; batch 512; 71.49 s", 128, 25600, 160,
         "--tp 8 --pp 64 --dp 1 --microbatches 512", 512, 512, 71.49);
  // torchtitan docs/performance.md: FSDP2 on 64 A100 80GB, WPS per GPU (torch.compile not used: the default).
  const char* tt_a100 = "torchtitan docs/performance.md (64 A100 80GB, FSDP2)";
  auto fsdp_a100 = [&](const char* id, const char* conf, const char* model, const char* recompute, int b, int seq,
                       double published) {
    row(id, tt_a100, conf,
        fmt::format("gen fsdp --dp 64 --microbatches 1 --model {}{} --recompute {} --microbatch-size {} --seq {}", model,
                    a100, recompute, b, seq),
        published, 0);
  };
  fsdp_a100("Llama 3 8B, op AC", "batch 1, selective op AC", "llama3-8b", "op", 1, 8192, 2973);
  fsdp_a100("Llama 3 70B, full AC", "batch 1, full AC", "llama3-70b", "full", 1, 8192, 331);
  fsdp_a100("Llama 2 13B, no AC", "batch 2, no AC", "llama2-13b", "none", 2, 4096, 2162);
  fsdp_a100("Llama 2 13B, op AC", "batch 2, selective op AC", "llama2-13b", "op", 2, 4096, 1904);
  fsdp_a100("Llama 2 70B, op AC", "batch 1, selective op AC", "llama2-70b", "op", 1, 4096, 355);
  fsdp_a100("Llama 2 70B, full AC", "batch 2, full AC", "llama2-70b", "full", 2, 4096, 353);
  // NVIDIA's DGX Cloud benchmarking recipes (github NVIDIA/dgxc-benchmarking, llama3.1/README_8b.md and
  // README_70b.md, nemotron/README_15b.md and README_340b.md, nemo_megatron/README_175b.md): NeMo 24.09-24.11
  // (Megatron-Core) on DGX H100, BF16 and FP8, the smallest GPU count of each table; tokens/s per GPU = global batch x
  // sequence / (step time x GPUs). NeMo's recipes run the distributed optimizer (--zero 1) with its gradients in
  // bf16 (the recipes' optim.grad_sync_dtype=bf16: --set model.grad_bytes=2), sequence parallelism with TP and
  // TransformerEngine's TP communication overlap (--tp-overlap full) and no recomputation.
  const char* dgxc = "NVIDIA dgxc-benchmarking (NeMo 24.09, DGX H100)";
  auto nemo = [&](const char* id, const char* conf, const std::string& parallel, const std::string& model,
                  double gbs, double seq, double gpus, double seconds, bool fp8) {
    row(id, dgxc, conf,
        "gen 3d " + parallel + " --zero 1 --set model.grad_bytes=2 " + model + sxm + " --recompute none" +
            (parallel.find("--tp 1 ") == std::string::npos ? " --sp --tp-overlap full" : "") +
            (fp8 ? " --fp8" : ""),
        gbs * seq / (seconds * gpus), 0);
  };
  const std::string nemotron15 = shape("llama3-8b", 32, 6144, 48, 8, 24576, 256000, 4096) + " --set model.gated_ffn=false";
  const std::string nemotron340 = shape("llama3-8b", 96, 18432, 96, 8, 73728, 256000, 4096) + " --set model.gated_ffn=false";
  const std::string gpt175 = shape("gpt2-1.5b", 96, 12288, 96, 96, 49152, 51200, 2048);
  for (bool fp8 : {false, true}) {
    nemo(fp8 ? "Llama 3.1 8B, 8 H100, FP8" : "Llama 3.1 8B, 8 H100", "TP 1, CP 2, DP 4; batch 128 x 8192, microbatch 1",
         "--tp 1 --pp 1 --cp 2 --dp 4 --microbatches 32", "--model llama3-8b --seq 8192", 128, 8192, 8,
         fp8 ? 9.67 : 12.91, fp8);
    nemo(fp8 ? "Llama 3.1 70B, 64 H100, FP8" : "Llama 3.1 70B, 64 H100",
         "TP 4, PP 4 (5 virtual stages), CP 2, DP 2; batch 128 x 8192, microbatch 1",
         "--tp 4 --pp 4 --cp 2 --dp 2 --schedule interleaved-1f1b --chunks 5 --microbatches 64",
         "--model llama3-70b --seq 8192", 128, 8192, 64, fp8 ? 11.01 : 14.72, fp8);
    nemo(fp8 ? "GPT-3 175B, 128 H100, FP8" : "GPT-3 175B, 128 H100",
         "TP 4, PP 8 (12 virtual stages), DP 4; batch 256 x 2048, microbatch 1",
         "--tp 4 --pp 8 --dp 4 --schedule interleaved-1f1b --chunks 12 --microbatches 64", gpt175, 256, 2048, 128,
         fp8 ? 5.626 : 8.309, fp8);
    nemo(fp8 ? "Nemotron-4 15B, 16 H100, FP8" : "Nemotron-4 15B, 16 H100", "TP 4, DP 4; batch 64 x 4096, microbatch 4",
         "--tp 4 --pp 1 --dp 4 --microbatches 4 --microbatch-size 4", nemotron15, 64, 4096, 16, fp8 ? 2.039 : 2.812, fp8);
    nemo(fp8 ? "Nemotron-4 340B, 128 H100, FP8" : "Nemotron-4 340B, 128 H100",
         "TP 8, PP 8 (12 virtual stages), DP 2; batch 32 x 4096, microbatch 1",
         "--tp 8 --pp 8 --dp 2 --schedule interleaved-1f1b --chunks 12 --microbatches 16", nemotron340, 32, 4096, 128,
         fp8 ? 3.16 : 4.61, fp8);
  }
  // NVIDIA NeMo 24.07's performance summary (NVIDIA/NeMo docs/source/performance/performance_summary.md), FP8 on
  // DGX H100, tokens/s per GPU as published.
  const char* nemo2407 = "NeMo 24.07 performance summary (DGX H100, FP8)";
  auto nemo_fp8 = [&](const char* id, const char* conf, const std::string& parallel, const std::string& model,
                      double published) {
    row(id, nemo2407, conf,
        "gen 3d " + parallel + " --zero 1 --set model.grad_bytes=2 " + model + sxm + " --recompute none --fp8" +
            (parallel.find("--tp 1 ") == std::string::npos ? " --sp --tp-overlap full" : ""),
        published, 0);
  };
  nemo_fp8("Llama 2 7B, 8 H100, FP8", "TP 1, DP 8; batch 128 x 4096, microbatch 1", "--tp 1 --pp 1 --dp 8 --microbatches 16",
           shape("llama2-13b", 32, 4096, 32, 32, 11008, 32000, 4096), 16847);
  nemo_fp8("Llama 2 70B, 64 H100, FP8", "TP 4, PP 4 (20 virtual stages), DP 4; batch 128 x 4096, microbatch 1",
           "--tp 4 --pp 4 --dp 4 --schedule interleaved-1f1b --chunks 20 --microbatches 32",
           "--model llama2-70b --seq 4096", 1707);
  nemo_fp8("GPT-3 5B, 64 H100, FP8", "TP 1, DP 64; batch 2048 x 2048, microbatch 4",
           "--tp 1 --pp 1 --dp 64 --microbatches 8 --microbatch-size 4",
           shape("gpt2-1.5b", 24, 4096, 32, 32, 16384, 51200, 2048), 22521);
  nemo_fp8("GPT-3 20B, 64 H100, FP8", "TP 2, DP 32; batch 256 x 2048, microbatch 2",
           "--tp 2 --pp 1 --dp 32 --microbatches 4 --microbatch-size 2",
           shape("gpt2-1.5b", 44, 6144, 48, 48, 24576, 51200, 2048), 5851);
  // torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Grand Teton H100, 500 W, 96 GB HBM2e).
  const char* tt_h100 = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md";
  auto fsdp_h100 = [&](const char* id, const char* conf, int dp, const char* extra, double published, double gib) {
    row(id, tt_h100, conf,
        fmt::format("gen fsdp --dp {} --microbatches 1 --model llama3-8b{} --recompute op --microbatch-size 2 --seq 8192{}",
                    dp, h100, extra),
        published, gib);
  };
  fsdp_h100("Llama 3.1 8B, FSDP 8", "Table 1: 8 GPUs, batch 2, selective (op) AC", 8, " --elementwise eager", 5762, 82.4);
  fsdp_h100("Llama 3.1 8B, FSDP 8, compile", "Table 1, + torch.compile", 8, "", 6667, 77.0);
  fsdp_h100("Llama 3.1 8B, FSDP 8, compile, FP8", "Table 1, + torch.compile + Float8", 8, " --fp8", 8532, 76.8);
  fsdp_h100("Llama 3.1 8B, FSDP 128", "Table 3: 128 GPUs, batch 2, selective (op) AC", 128, " --elementwise eager", 5605, 67.0);
  fsdp_h100("Llama 3.1 8B, FSDP 128, compile", "Table 3, + torch.compile", 128, "", 6514, 62.0);
  fsdp_h100("Llama 3.1 8B, FSDP 128, compile, FP8", "Table 3, + torch.compile + Float8", 128, " --fp8", 8380, 61.8);
  auto cp = [&](const char* id, const char* conf, int dp, int c, int seq, double published, double gib) {
    const std::string parallel = c == 1 ? fmt::format("gen fsdp --dp {}", dp)
                                        : fmt::format("gen 3d --cp {} --dp {} --zero 3", c, dp);
    row(id, tt_h100, conf,
        fmt::format("{} --microbatches 1 --model llama3-8b{} --recompute full --microbatch-size 1 --seq {} --fp8",
                    parallel, h100, seq),
        published, gib);
  };
  cp("Llama 3.1 8B, FSDP 8, 32k", "Table 2: compile + Float8, batch 1, full AC, FSDP 8 CP 1", 8, 1, 32768, 3890, 83.9);
  cp("Llama 3.1 8B, FSDP 4 CP 2, 64k", "Table 2, FSDP 4 CP 2", 4, 2, 65536, 2540, 84.2);
  cp("Llama 3.1 8B, FSDP 2 CP 4, 128k", "Table 2, FSDP 2 CP 4", 2, 4, 131072, 1071, 84.0);
  cp("Llama 3.1 8B, CP 8, 256k", "Table 2, FSDP 1 CP 8", 1, 8, 262144, 548, 84.5);
  row("Llama 3.1 70B, FSDP 32 TP 8", tt_h100, "Table 4: 256 GPUs, compile + Float8, batch 16, full AC, 2D",
      "gen 3d --tp 8 --dp 32 --zero 3 --sp --microbatches 1 --model llama3-70b" + h100 +
          " --recompute full --microbatch-size 16 --seq 8192 --fp8 --tp-overlap none",
      829, 71.9);
  // torchtitan benchmarks/llama3_8b_h200_2025-06_torchtitan.md (Trainy and WhiteFiber): 8 H200 per node on NVLink,
  // 400 Gb/s per GPU; llama3_8b.toml (FSDP, sequence 8192, selective op AC) with local batch 2, compile, Float8 with
  // FP8 all-gathers.
  const char* tt_h200 = "torchtitan benchmarks/llama3_8b_h200_2025-06_torchtitan.md";
  for (int gpus : {32, 64})
    row(gpus == 32 ? "Llama 3.1 8B, FSDP 32, H200, FP8" : "Llama 3.1 8B, FSDP 64, H200, FP8", tt_h200,
        gpus == 32 ? "4 nodes, batch 2, compile + Float8 + FP8 all-gather" : "8 nodes, the same",
        fmt::format("gen fsdp --dp {} --microbatches 1 --model llama3-8b --device h200 --network nvlink8-ib400 --recompute "
                    "op --microbatch-size 2 --seq 8192 --fp8-all-gather",
                    gpus),
        gpus == 32 ? 10938 : 10753, gpus == 32 ? 47.96 : 46.97);
  // NVIDIA NeMo 25.02's performance summary (docs.nvidia.com, NeMo Framework user guide, performance summary,
  // "System: DGX-B200"), FP8, tokens/s per GPU as published; the same NeMo recipes' settings as above.
  const char* nemo2502 = "NeMo 25.02 performance summary (DGX B200, FP8)";
  const std::string b200 = " --device b200 --network nvlink5-ib400";
  auto blackwell = [&](const char* id, const char* conf, const std::string& parallel, const std::string& model,
                       double published) {
    row(id, nemo2502, conf,
        "gen 3d " + parallel + " --zero 1 --set model.grad_bytes=2 " + model + b200 + " --recompute none --fp8" +
            (parallel.find("--tp 1 ") == std::string::npos ? " --sp --tp-overlap full" : ""),
        published, 0);
  };
  blackwell("Llama 3 8B, 8 B200, FP8", "TP 1, DP 8; batch 128 x 8192, microbatch 2",
            "--tp 1 --pp 1 --dp 8 --microbatches 8 --microbatch-size 2", "--model llama3-8b --seq 8192", 26006);
  blackwell("Llama 3 70B, 64 B200, FP8", "TP 2, PP 4 (5 virtual stages), CP 2, DP 4; batch 128 x 8192, microbatch 1",
            "--tp 2 --pp 4 --cp 2 --dp 4 --schedule interleaved-1f1b --chunks 5 --microbatches 32",
            "--model llama3-70b --seq 8192", 3062);
  blackwell("Llama 3 405B, 128 B200, FP8", "TP 4, PP 8 (8 virtual stages), CP 2, DP 2; batch 64 x 8192, microbatch 1",
            "--tp 4 --pp 8 --cp 2 --dp 2 --schedule interleaved-1f1b --chunks 8 --microbatches 32",
            "--model llama3-405b --seq 8192", 625);
  // A Mixture of Experts (docs/hardware-model.md §4b), held out like every row but the fitted one above: Mixtral
  // 8x7B in EP groups of 8 over the data-parallel ranks (gen 3d --ep), Megatron-Core's alltoall dispatcher.
  blackwell("Mixtral 8x7B, 64 B200, FP8", "TP 1, PP 1, EP 8, DP 64; batch 256 x 4096, microbatch 2",
            "--tp 1 --pp 1 --dp 64 --ep 8 --microbatches 2 --microbatch-size 2", "--model mixtral-8x7b --seq 4096", 15457);
  r.back().moe = true;
  // NVIDIA Megatron-Bridge's performance summary, 25.11 NeMo container (github.com/NVIDIA-NeMo/Megatron-Bridge,
  // docs/performance-summary.md: "we force-balance the token distribution among experts and all benchmarks are
  // token-dropless"): the MoE rows trainsim's gen 3d --ep expresses (DDP with the distributed optimizer; the
  // GB200/GB300 rows need a 72-GPU NVLink domain, GPT-OSS's attention is not modelled). Taken where the summary
  // is silent: no recomputation, bf16 grads as the NeMo rows above, MXFP8 as trainsim's FP8, and gen 3d's even
  // split of the layers where PP x VP does not divide them (the recipes' own layouts, and DeepSeek-V3's
  // multi-token-prediction layer, are not in the summary).
  const char* bridge = "Megatron-Bridge performance summary, NeMo 25.11";
  auto bridge_row = [&](const char* id, const char* conf, const std::string& command, double published) {
    row(id, bridge, conf, "gen 3d " + command + " --zero 1 --set model.grad_bytes=2 --recompute none --fp8", published, 0);
    r.back().moe = true;
  };
  bridge_row("Qwen3-30B-A3B, 16 H100, FP8", "TP 1, PP 2 (24 virtual stages), EP 8, DP 8; batch 512 x 4096, microbatch 2",
             "--tp 1 --pp 2 --dp 8 --ep 8 --schedule interleaved-1f1b --chunks 24 --microbatches 32 --microbatch-size 2 "
             "--model qwen3-30b-a3b --seq 4096" + sxm,
             5275);
  bridge_row("Qwen3-30B-A3B, 8 B200, FP8", "TP 1, PP 1, EP 8, DP 8; batch 512 x 4096, microbatch 1",
             "--tp 1 --pp 1 --dp 8 --ep 8 --microbatches 64 --microbatch-size 1 --model qwen3-30b-a3b --seq 4096" + b200,
             9299);
  bridge_row("Qwen3-235B-A22B, 64 B200, FP8", "TP 1, PP 8 (2 virtual stages), EP 8, DP 8; batch 1024 x 4096, microbatch 1",
             "--tp 1 --pp 8 --dp 8 --ep 8 --schedule interleaved-1f1b --chunks 2 --microbatches 128 --microbatch-size 1 "
             "--model qwen3-235b-a22b --seq 4096" + b200,
             3269);
  bridge_row("DeepSeek-V3, 256 B200, FP8", "TP 1, PP 16, EP 8, DP 16; batch 2048 x 4096, microbatch 1",
             "--tp 1 --pp 16 --dp 16 --ep 8 --microbatches 128 --microbatch-size 1 --model deepseek-v3 --seq 4096" + b200,
             2139);
  // TP beside EP (the H100 recipe's shape: expert TP 1, EP 32 over 2 TP x 16 DP ranks of a stage, sequence
  // parallelism; the recipe's configs/qwen3 workload_base_configs.py sets expert_tensor_parallel_size=1,
  // tp_comm_overlap off and moe_a2a_overlap on: gen 3d --a2a-overlap).
  bridge_row("Qwen3-235B-A22B, 256 H100, FP8",
             "TP 2, PP 8 (4 virtual stages), EP 32, DP 16, all-to-all overlap; batch 2048 x 4096, microbatch 1",
             "--tp 2 --sp --pp 8 --dp 16 --ep 32 --a2a-overlap --schedule interleaved-1f1b --chunks 4 --microbatches 128 "
             "--microbatch-size 1 --model qwen3-235b-a22b --seq 4096" + sxm,
             1575);
  // The same summary's 25.09 edition (docs/performance-summary-archive.md, DGX-H100, FP8): DeepSeek-V3 dropless on
  // 1,024 H100s, TP 2 beside EP 64 (each EP group spans 8 nodes). Its recipe's dispatcher (configs/deepseek:
  // moe_flex_dispatcher_backend "hybridep", NVIDIA's branch of DeepEP; moe_a2a_overlap off) is timed as DeepEP's
  // hierarchical dispatch (--moe-dispatcher deepep: one network crossing per destination node), with the preset's
  // group-limited routing (4 of 8 groups); its FP8 dispatch not modelled.
  row("DeepSeek-V3, 1024 H100, FP8", "Megatron-Bridge performance summary, NeMo 25.09",
      "TP 2, PP 8 (4 virtual stages), EP 64, DP 64, HybridEP dispatch; batch 8192 x 4096, microbatch 1",
      "gen 3d --tp 2 --sp --pp 8 --dp 64 --ep 64 --schedule interleaved-1f1b --chunks 4 --microbatches 128 "
      "--microbatch-size 1 --model deepseek-v3 --seq 4096" + sxm + " --zero 1 --set model.grad_bytes=2 --recompute none --fp8 "
      "--moe-dispatcher deepep",
      1297, 0);
  r.back().moe = true;
  return r;
}

// The predictions docs/hardware-model.md §5 records (throughput in the row's unit, memory in GiB; 0: not published),
// by run: regenerate both with TRAINSIM_VALIDATION_TABLE when the model changes on purpose.
const std::map<std::string, std::pair<double, double>>& recorded() {
  static const std::map<std::string, std::pair<double, double>> r = {
      {"GPT 1.7B", {137, 0}},
      {"GPT 3.6B", {141, 0}},
      {"GPT 7.5B", {144, 0}},
      {"GPT 18.4B", {140, 0}},
      {"GPT 39.1B", {142, 0}},
      {"GPT 76.1B", {152, 0}},
      {"GPT 145.6B", {152, 0}},
      {"GPT 310.1B", {156, 0}},
      {"GPT 529.6B", {154, 0}},
      {"GPT 1008B", {159, 0}},
      {"GPT 22B, SP + selective", {1004, 0}},
      {"GPT 175B, SP + selective", {152, 0}},
      {"GPT 530B, SP + selective", {53, 0}},
      {"GPT 1T, SP + selective", {27, 0}},
      {"Llama 3 8B, op AC", {3325, 0}},
      {"Llama 3 70B, full AC", {351, 0}},
      {"Llama 2 13B, no AC", {2439, 0}},
      {"Llama 2 13B, op AC", {2140, 0}},
      {"Llama 2 70B, op AC", {437, 0}},
      {"Llama 2 70B, full AC", {372, 0}},
      {"Llama 3.1 8B, 8 H100", {9625, 0}},
      {"Llama 3.1 70B, 64 H100", {1152, 0}},
      {"GPT-3 175B, 128 H100", {522, 0}},
      {"Nemotron-4 15B, 16 H100", {6186, 0}},
      {"Nemotron-4 340B, 128 H100", {251, 0}},
      {"Llama 3.1 8B, 8 H100, FP8", {12974, 0}},
      {"Llama 3.1 70B, 64 H100, FP8", {1661, 0}},
      {"GPT-3 175B, 128 H100, FP8", {827, 0}},
      {"Nemotron-4 15B, 16 H100, FP8", {8254, 0}},
      {"Nemotron-4 340B, 128 H100, FP8", {367, 0}},
      {"Llama 2 7B, 8 H100, FP8", {18174, 0}},
      {"Llama 2 70B, 64 H100, FP8", {1862, 0}},
      {"GPT-3 5B, 64 H100, FP8", {27424, 0}},
      {"GPT-3 20B, 64 H100, FP8", {6781, 0}},
      {"Llama 3.1 8B, FSDP 8", {5754, 69.3}},
      {"Llama 3.1 8B, FSDP 8, compile", {6449, 69.3}},
      {"Llama 3.1 8B, FSDP 8, compile, FP8", {8811, 69.3}},
      {"Llama 3.1 8B, FSDP 128", {5773, 57}},
      {"Llama 3.1 8B, FSDP 128, compile", {6473, 57}},
      {"Llama 3.1 8B, FSDP 128, compile, FP8", {8855, 57}},
      {"Llama 3.1 8B, FSDP 8, 32k", {3519, 69.9}},
      {"Llama 3.1 8B, FSDP 4 CP 2, 64k", {2057, 83.5}},
      {"Llama 3.1 8B, FSDP 2 CP 4, 128k", {1124, 83.5}},
      {"Llama 3.1 8B, CP 8, 256k", {589, 83.5}},
      {"Llama 3.1 70B, FSDP 32 TP 8", {748, 66}},
      {"Llama 3.1 8B, FSDP 32, H200, FP8", {10937, 59.5}},
      {"Llama 3.1 8B, FSDP 64, H200, FP8", {10939, 57.8}},
      {"Llama 3 8B, 8 B200, FP8", {26017, 0}},
      {"Llama 3 70B, 64 B200, FP8", {3182, 0}},
      {"Llama 3 405B, 128 B200, FP8", {620, 0}},
      {"Mixtral 8x7B, 64 B200, FP8", {13741, 0}},
      {"Qwen3-30B-A3B, 16 H100, FP8", {9946, 0}},
      {"Qwen3-30B-A3B, 8 B200, FP8", {9560, 0}},
      {"Qwen3-235B-A22B, 64 B200, FP8", {3379, 0}},
      {"DeepSeek-V3, 256 B200, FP8", {2009, 0}},
      {"Qwen3-235B-A22B, 256 H100, FP8", {1894, 0}},
      {"DeepSeek-V3, 1024 H100, FP8", {1332, 0}}};
  return r;
}

double error_of(double predicted, double published) { return predicted / published - 1; }

// The rows the presets' efficiency.sustained was fitted to (the geometric mean of predicted / published over a
// device's fitted rows is 1): alternate rows of Narayanan et al.'s table for a100-80g, torchtitan's Table 1 BF16
// FSDP run for h100-gt500, dgxc's BF16 Llama 3.1 8B and GPT-3 175B for h100-sxm, torchtitan's 32-GPU FP8 run for
// h200, NeMo 25.02's Llama 3 8B for b200; and the GPU presets' efficiency.expert_launch_s (one number) to
// Megatron-Bridge 25.11's three B200 MoE runs (hardware/device.cpp).
bool fitted(const std::string& id) {
  for (const char* f : {"GPT 1.7B", "GPT 7.5B", "GPT 39.1B", "GPT 145.6B", "GPT 529.6B", "Llama 3.1 8B, FSDP 8",
                        "Llama 3.1 8B, 8 H100", "GPT-3 175B, 128 H100", "Llama 3.1 8B, FSDP 32, H200, FP8",
                        "Llama 3 8B, 8 B200, FP8", "Qwen3-30B-A3B, 8 B200, FP8", "Qwen3-235B-A22B, 64 B200, FP8",
                        "DeepSeek-V3, 256 B200, FP8"})
    if (id == f) return true;
  return false;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

TEST_CASE("validation: published training runs against trainsim's predictions") {
  std::vector<Run> table = runs();
  std::vector<double> errors, memory_errors, held_out, moe_errors, moe_held_out;
  std::vector<std::string> oom;  // runs reported out of memory
  std::string md =
      "| run | source | configuration | trainsim command | published | predicted | error | memory published | "
      "memory predicted | error |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (Run& run : table) {
    CAPTURE(run.id);
    CommandResult r = run_trainsim(run.command);
    // A run reported out of memory exits 1 with its figures still printed; every run here ran (the list below).
    REQUIRE((r.exit_code == 0 || r.exit_code == 1));
    const nlohmann::json j = nlohmann::json::parse(r.out);
    if (!j["oom"].is_null()) oom.push_back(run.id);
    CHECK((r.exit_code == 1) == !j["oom"].is_null());
    const double per_gpu = j["tokens_per_s_per_gpu"].get<double>();
    // Equation 3 of Narayanan et al.: 96·l·h²·(1 + s/(6h) + V/(16·l·h)) FLOPs per token, recomputation included.
    const double predicted =
        run.tflops ? per_gpu * 96 * run.l * run.h * run.h * (1 + run.s / (6 * run.h) + run.V / (16 * run.l * run.h)) / 1e12
                   : per_gpu;
    const double gib = j["peak_memory_bytes"].get<double>() / (1ull << 30);
    const double err = error_of(predicted, run.published);
    if (run.moe) moe_errors.push_back(std::fabs(err));
    else errors.push_back(std::fabs(err));
    if (run.moe && !fitted(run.id)) moe_held_out.push_back(std::fabs(err));
    if (!fitted(run.id) && !run.moe) held_out.push_back(std::fabs(err));
    std::string mem = "| | | ";
    if (run.published_gib > 0) {
      const double merr = error_of(gib, run.published_gib);
      memory_errors.push_back(std::fabs(merr));
      mem = fmt::format("| {:.1f} GiB | {:.1f} GiB | {:+.1f} % ", run.published_gib, gib, 100 * merr);
    }
    const std::string unit = run.tflops ? " TFLOP/s" : " tok/s";
    md += fmt::format("| {} | {} | {} | `trainsim {}` | {:.0f}{} | {:.0f}{} | {:+.1f} %{} {}|\n", run.id, run.source,
                      run.configuration, run.command, run.published, unit, predicted, unit, 100 * err,
                      fitted(run.id) ? " (fitted)" : "", mem);
    const auto rec = recorded().find(run.id);
    CHECK(rec != recorded().end());
    if (rec != recorded().end()) {
      CHECK(predicted == doctest::Approx(rec->second.first).epsilon(0.005));
      if (rec->second.second > 0) CHECK(gib == doctest::Approx(rec->second.second).epsilon(0.005));
    }
  }
  const double med = median(errors), worst = *std::max_element(errors.begin(), errors.end());
  const double held_med = median(held_out), held_worst = *std::max_element(held_out.begin(), held_out.end());
  md += fmt::format("\nThroughput: median |error| {:.1f} %, worst {:.1f} % over {} runs; over the {} held out, median "
                    "{:.1f} %, worst {:.1f} %.",
                    100 * med, 100 * worst, errors.size(), held_out.size(), 100 * held_med, 100 * held_worst);
  if (!memory_errors.empty())
    md += fmt::format(" Memory: median |error| {:.1f} %, worst {:.1f} % over {} runs.\n", 100 * median(memory_errors),
                      100 * *std::max_element(memory_errors.begin(), memory_errors.end()), memory_errors.size());
  md += fmt::format(" Mixture of Experts: median |error| {:.1f} %, worst {:.1f} % over {} runs; over the {} held out "
                    "(efficiency.expert_launch_s fitted to the other {}), median {:.1f} %.",
                    100 * median(moe_errors), 100 * *std::max_element(moe_errors.begin(), moe_errors.end()),
                    moe_errors.size(), moe_held_out.size(), moe_errors.size() - moe_held_out.size(),
                    100 * median(moe_held_out));
  std::string oom_list;
  for (const auto& id : oom) oom_list += (oom_list.empty() ? "" : ", ") + id;
  md += fmt::format(" Reported out of memory although they ran: {}.\n", oom.empty() ? "none" : oom_list);
  if (const char* out = std::getenv("TRAINSIM_VALIDATION_TABLE")) std::ofstream(out) << md;
  // Issue 33's goal, on the rows held out from the fit (docs/hardware-model.md §5): median |error| 8 %, worst 20 %,
  // memory within 10 %, no run that ran reported out of memory. Met: the median. Not met, and held here so that the
  // model does not drift further (docs/hardware-model.md §5 says which rows and why): the worst (25 %), the memory
  // median (11 %), and NeMo's Nemotron-4 340B runs, whose optimizer settings are not published with them.
  CHECK(held_med < 0.08);
  CHECK(held_worst < 0.25);
  CHECK(median(memory_errors) < 0.11);
  CHECK(oom == std::vector<std::string>{"Nemotron-4 340B, 128 H100", "Nemotron-4 340B, 128 H100, FP8",
                                        "Qwen3-30B-A3B, 16 H100, FP8"});
  // Issue 35's goal for MoE runs, a median within 15 % (docs/hardware-model.md §5, "Mixture of Experts"): met over
  // the seven runs, with the experts' host time fitted to three of them; the four held out (which that time hardly
  // moves: few or large experts per rank, but Qwen3-30B-A3B on 16 H100s, still 89 % fast) are within a median 16 %.
  CHECK(moe_errors.size() == 7);
  CHECK(moe_held_out.size() == 4);
  CHECK(median(moe_errors) < 0.15);
  CHECK(median(moe_held_out) < 0.17);
}
