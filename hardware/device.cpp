#include "hardware/device.h"

#include <fmt/format.h>

namespace trainsim::hw {

void DeviceSpec::validate(const std::string& where) const {
  auto need = [&](bool ok, const char* field, double v, const char* what) {
    if (!ok) throw SpecError(fmt::format("{}: field '{}': {}, got {}", where, field, what, v));
  };
  need(peak_flops > 0, "peak_flops", peak_flops, "must be positive (FLOP/s)");
  need(hbm_bandwidth > 0, "hbm_bandwidth", hbm_bandwidth, "must be positive (bytes/s)");
  need(memory_bytes > 0, "memory_bytes", memory_bytes, "must be positive (bytes)");
  need(memory_reserve_bytes >= 0 && memory_reserve_bytes < memory_bytes, "memory_reserve_bytes", memory_reserve_bytes,
       "must be at least 0 and below memory_bytes (bytes)");
  need(fp8_peak_flops >= 0, "fp8_peak_flops", fp8_peak_flops, "must be at least 0 (FLOP/s; 0: no FP8)");
  const EfficiencyTable& e = efficiency;
  for (auto [v, name] : {std::pair{e.forward, "efficiency.forward"}, {e.backward_input, "efficiency.backward_input"},
                         {e.backward_weight, "efficiency.backward_weight"}, {e.attention, "efficiency.attention"},
                         {e.memory, "efficiency.memory"}, {e.fp8, "efficiency.fp8"}, {e.sustained, "efficiency.sustained"}})
    need(v > 0 && v <= 1, name, v, "must be in (0, 1] (a fraction of the peak)");
  need(e.op_overhead_s >= 0, "efficiency.op_overhead_s", e.op_overhead_s, "must be at least 0 (seconds)");
  need(e.dispatch_s >= 0, "efficiency.dispatch_s", e.dispatch_s, "must be at least 0 (seconds)");
  need(e.expert_launch_s >= 0, "efficiency.expert_launch_s", e.expert_launch_s, "must be at least 0 (seconds)");
}

const std::vector<Field<DeviceSpec>>& device_fields() {
  using D = DeviceSpec;
  auto eff = [](std::string name, double EfficiencyTable::*m) {
    return Field<D>{"efficiency." + name, FieldType::Number, [m](const D& d) { return d.efficiency.*m; },
                    [m](D& d, double v) { d.efficiency.*m = v; }, {}, {}};
  };
  auto text = [](std::string name, auto get, auto set) {
    return Field<D>{std::move(name), FieldType::Text, {}, {}, get, set};
  };
  static const std::vector<Field<D>> f = {
      field("peak_flops", &D::peak_flops),
      field("hbm_bandwidth", &D::hbm_bandwidth),
      field("memory_bytes", &D::memory_bytes),
      field("memory_reserve_bytes", &D::memory_reserve_bytes),
      field("fp8_peak_flops", &D::fp8_peak_flops),
      text(
          "gemm_shapes",
          [](const D& d) { return d.gemm_shapes.empty() ? std::string("none") : gemm_table_text(d.gemm_shapes); },
          [](D& d, const std::string& v) { d.gemm_shapes = parse_gemm_table(v); }),
      text(
          "attention_shapes",
          [](const D& d) {
            return d.attention_shapes.empty() ? std::string("none") : attention_table_text(d.attention_shapes);
          },
          [](D& d, const std::string& v) { d.attention_shapes = parse_attention_table(v); }),
      eff("forward", &EfficiencyTable::forward),
      eff("backward_input", &EfficiencyTable::backward_input),
      eff("backward_weight", &EfficiencyTable::backward_weight),
      eff("attention", &EfficiencyTable::attention),
      eff("memory", &EfficiencyTable::memory),
      eff("fp8", &EfficiencyTable::fp8),
      eff("sustained", &EfficiencyTable::sustained),
      eff("op_overhead_s", &EfficiencyTable::op_overhead_s),
      eff("dispatch_s", &EfficiencyTable::dispatch_s),
      eff("expert_launch_s", &EfficiencyTable::expert_launch_s),
      text(
          "fitted_to", [](const D& d) { return d.fitted_to.empty() ? std::string("none") : d.fitted_to; },
          [](D& d, const std::string& v) { d.fitted_to = v == "none" ? std::string() : v; }),
  };
  return f;
}

const std::vector<std::string>& device_preset_names() {
  static const std::vector<std::string> names{"h100-sxm", "h100-gt500", "h200", "b200", "a100-80g", "cpu", "custom"};
  return names;
}

namespace {

// GEMM throughput by shape on an H100 SXM, BF16 inputs and output: XLA's measured table of cuBLAS GEMMs
// (openxla/xla via tensorflow/tensorflow, third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h,
// kDefaultMatmulPTable, key "sm_90", entries with b: 1, flops "bf16xbf16->bf16"), every M, N, K of 256, 512,
// 1024, 2048 and 4096, divided by the H100's 989.4 TFLOP/s and rounded to 3 digits. The best, 4096^3, is 783
// TFLOP/s (0.792); the cost model uses each point relative to it (hardware/kernel_tables.h).
const char* h100_gemm_shapes() {
  return
      "256x256x256:0.00652,256x256x512:0.0116,256x256x1024:0.0197,256x256x2048:0.0315,256x256x4096:0.0852,"
      "256x512x256:0.0116,256x512x512:0.0222,256x512x1024:0.0395,256x512x2048:0.063,256x512x4096:0.0927,"
      "256x1024x256:0.0229,256x1024x512:0.0423,256x1024x1024:0.0732,256x1024x2048:0.12,256x1024x4096:0.174,"
      "256x2048x256:0.0423,256x2048x512:0.0791,256x2048x1024:0.14,256x2048x2048:0.218,256x2048x4096:0.289,"
      "256x4096x256:0.0789,256x4096x512:0.14,256x4096x1024:0.228,256x4096x2048:0.328,256x4096x4096:0.416,"
      "512x256x256:0.0116,512x256x512:0.022,512x256x1024:0.0397,512x256x2048:0.0608,512x256x4096:0.092,"
      "512x512x256:0.0219,512x512x512:0.0412,512x512x1024:0.072,512x512x2048:0.116,512x512x4096:0.176,"
      "512x1024x256:0.0439,512x1024x512:0.0813,512x1024x1024:0.14,512x1024x2048:0.219,512x1024x4096:0.313,"
      "512x2048x256:0.0802,512x2048x512:0.145,512x2048x1024:0.235,512x2048x2048:0.346,512x2048x4096:0.435,"
      "512x4096x256:0.136,512x4096x512:0.239,512x4096x1024:0.377,512x4096x2048:0.528,512x4096x4096:0.651,"
      "1024x256x256:0.0222,1024x256x512:0.0414,1024x256x1024:0.0691,1024x256x2048:0.114,1024x256x4096:0.171,"
      "1024x512x256:0.0434,1024x512x512:0.0831,1024x512x1024:0.143,1024x512x2048:0.222,1024x512x4096:0.302,"
      "1024x1024x256:0.0829,1024x1024x512:0.147,1024x1024x1024:0.239,1024x1024x2048:0.354,1024x1024x4096:0.475,"
      "1024x2048x256:0.141,1024x2048x512:0.24,1024x2048x1024:0.377,1024x2048x2048:0.53,1024x2048x4096:0.661,"
      "1024x4096x256:0.212,1024x4096x512:0.343,1024x4096x1024:0.496,1024x4096x2048:0.641,1024x4096x4096:0.746,"
      "2048x256x256:0.044,2048x256x512:0.0781,2048x256x1024:0.137,2048x256x2048:0.218,2048x256x4096:0.311,"
      "2048x512x256:0.0848,2048x512x512:0.144,2048x512x1024:0.238,2048x512x2048:0.351,2048x512x4096:0.456,"
      "2048x1024x256:0.143,2048x1024x512:0.241,2048x1024x1024:0.377,2048x1024x2048:0.529,2048x1024x4096:0.66,"
      "2048x2048x256:0.215,2048x2048x512:0.349,2048x2048x1024:0.499,2048x2048x2048:0.639,2048x2048x4096:0.746,"
      "2048x4096x256:0.302,2048x4096x512:0.455,2048x4096x1024:0.601,2048x4096x2048:0.723,2048x4096x4096:0.762,"
      "4096x256x256:0.0831,4096x256x512:0.139,4096x256x1024:0.22,4096x256x2048:0.308,4096x256x4096:0.38,"
      "4096x512x256:0.144,4096x512x512:0.241,4096x512x1024:0.375,4096x512x2048:0.527,4096x512x4096:0.657,"
      "4096x1024x256:0.219,4096x1024x512:0.347,4096x1024x1024:0.493,4096x1024x2048:0.639,4096x1024x4096:0.746,"
      "4096x2048x256:0.307,4096x2048x512:0.452,4096x2048x1024:0.6,4096x2048x2048:0.724,4096x2048x4096:0.767,"
      "4096x4096x256:0.396,4096x4096x512:0.549,4096x4096x1024:0.685,4096x4096x2048:0.747,4096x4096x4096:0.792";
}

// Causal FlashAttention-2 (what PyTorch's scaled_dot_product_attention runs on H100 and A100) on an H100 SXM, BF16,
// FlashAttention's FLOP count, as fractions of 989.4 TFLOP/s, head dimensions 64 and 128, sequence lengths 512
// to 16k: the FlashAttention-2 bars of Shah et al. 2024 (FlashAttention-3, arXiv 2407.08608), Figure 5 (forward,
// with causal mask: 180, 229, 262, 284, 295, 299 TFLOP/s at head dimension 64; 191, 260, 298, 319, 333, 335 at
// 128) and Figure 6 (backward, without causal mask: 198, 238, 264, 279, 287, 291 and 214, 260, 291, 310, 318,
// 322). The causal backward is the unmasked one times the forward's causal/unmasked ratio at the same point
// (unmasked forward: 282, 306, 318, 321, 322, 324 and 309, 350, 362, 368, 370, 370).
const char* h100_attention_shapes() {
  return
      "64x512:0.1819/0.1277,64x1024:0.2315/0.18,64x2048:0.2648/0.2198,64x4096:0.287/0.2495,64x8192:0.2982/0.2658,"
      "64x16384:0.3022/0.2714,128x512:0.193/0.1337,128x1024:0.2628/0.1952,"
      "128x2048:0.3012/0.2421,128x4096:0.3224/0.2716,128x8192:0.3366/0.2893,128x16384:0.3386/0.2947";
}

// Causal FlashAttention-2 on an A100: Dao 2023 (FlashAttention-2, arXiv 2307.08691) reports up to 73% of the
// A100's peak in the forward pass and up to 63% in the backward (§4.1, head dimension 128, long sequences); the
// H100 table above scaled so that its unmasked best (370 TFLOP/s forward, 322 backward) is those fractions of
// 312 TFLOP/s: forward x 0.73 / 370, backward x 0.63 / 322 of the H100 TFLOP/s.
const char* a100_attention_shapes() {
  return
      "64x512:0.3551/0.2473,64x1024:0.4518/0.3485,64x2048:0.5169/0.4256,64x4096:0.5603/0.483,64x8192:0.582/0.5144,"
      "64x16384:0.5899/0.5254,128x512:0.3768/0.2588,128x1024:0.513/0.3779,"
      "128x2048:0.5879/0.4687,128x4096:0.6294/0.5258,128x8192:0.657/0.56,128x16384:0.6609/0.5704";
}

// A GPU of the H100 family: the H100 tables, GEMMs at the best shape at the maximum achievable matmul FLOP/s
// (stas00/ml-engineering, compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison table":
// H100 SXM, BF16 794.5 of 989 TFLOP/s; FP8 1,402.6 of 1,979), the attention core at the table's best.
void hopper(DeviceSpec& d, double bf16_mamf, double fp8_mamf) {
  d.gemm_shapes = parse_gemm_table(h100_gemm_shapes());
  d.attention_shapes = parse_attention_table(h100_attention_shapes());
  EfficiencyTable& e = d.efficiency;
  e.forward = e.backward_input = e.backward_weight = bf16_mamf / d.peak_flops;
  e.fp8 = fp8_mamf / d.fp8_peak_flops;
  e.attention = d.attention_shapes.best;
  e.memory = 1;
}

// MiB, as nvidia-smi counts its memory total.
constexpr double kMiB = 1024.0 * 1024.0;

// The memory a training framework cannot use on a GPU of `capacity` bytes (docs/hardware-model.md §3, "The memory
// reserve"): 1 GiB for the CUDA context, cuBLAS's workspaces and NCCL's buffers (a few hundred MiB of context on
// Hopper with CUDA 12's lazy loading; NCCL allocates NCCL_BUFFSIZE, 4 MiB by default, per channel and peer of
// each communicator, and a 3D job holds TP, DP and PP communicators), plus 3 % of the capacity for the caching
// allocator's fragmentation (memory reserved by PyTorch's allocator beyond what is allocated at the peak). An
// assumption of trainsim's, not a measurement: --set device.memory_reserve_bytes=B changes it.
double gpu_reserve(double capacity) { return 1024.0 * kMiB + 0.03 * capacity; }

}  // namespace

DeviceSpec device_preset(const std::string& name) {
  DeviceSpec d;
  if (name == "h100-sxm") {
    // NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: BF16 Tensor Core 1,979 TFLOPS with sparsity, so 989.4
    // dense (2:4 sparsity doubles the figure); FP8 3,958 with sparsity, 1,978.9 dense; GPU memory 80 GB HBM3 at
    // 3.35 TB/s, which nvidia-smi shows as 81,559 MiB ("NVIDIA H100 80GB HBM3 ... 81559MiB").
    d.peak_flops = 989.4e12, d.hbm_bandwidth = 3.35e12, d.memory_bytes = 81559 * kMiB, d.fp8_peak_flops = 1978.9e12;
    hopper(d, 794.5e12, 1402.6e12);
    // Sustained: fitted to two published runs, NVIDIA's dgxc-benchmarking BF16 Llama 3.1 8B on 8 GPUs and GPT-3 175B
    // on 128 (NeMo 24.09; docs/hardware-model.md §5): the geometric mean of predicted over published tokens/s is 1.
    // The tables' other rows (70B, Nemotron-4, FP8, NeMo 24.07's) are held out.
    d.efficiency.sustained = 0.855;
    d.fitted_to = "dgxc-nemo2409-bf16-8b-175b";
  } else if (name == "h100-gt500") {
    // The H100 of Meta's Grand Teton hosts that torchtitan's benchmarks ran on (benchmarks/
    // llama3_h100_202412_torchtitan.md: "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", "the default 500W
    // power limit"; "the actual peak TFLOPs number is between SXM and NVL, and we don't know its exact value").
    // Peak: the middle of that bracket, SXM 989.4 dense BF16 (1,978.9 FP8) and H100 NVL 835.5 (1,670.5 FP8;
    // H100 NVL datasheet: 1,671 and 3,341 TFLOPS with sparsity): 912.5 and 1,824.7 TFLOP/s. GEMMs and attention
    // at the H100 SXM's fractions of the peak.
    // Its 96 GB as the tools show a Hopper GPU of six 16 GB HBM stacks: 97,871 MiB (nvidia-smi on GH200's and
    // H20's 96 GB).
    d.peak_flops = 912.45e12, d.hbm_bandwidth = 2.4e12, d.memory_bytes = 97871 * kMiB, d.fp8_peak_flops = 1824.7e12;
    hopper(d, 794.5e12 / 989.4e12 * d.peak_flops, 1402.6e12 / 1978.9e12 * d.fp8_peak_flops);
    // Sustained: fitted to one published run, torchtitan's Table 1 BF16 FSDP run on 8 of these GPUs (5,762
    // tokens/s per GPU; docs/hardware-model.md §5): the fraction for which trainsim predicts it exactly. The
    // page's ten other runs (compile, FP8, 128 GPUs, long context, 70B 2D) are held out.
    d.efficiency.sustained = 0.671;
    d.fitted_to = "torchtitan-llama3.1-8b-fsdp8";
  } else if (name == "h200") {
    // NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: BF16 Tensor Core 1,979 TFLOPS with sparsity (989.4
    // dense, the H100's compute), FP8 3,958 (1,978.9 dense); 141 GB HBM3e at 4.8 TB/s, which nvidia-smi shows as
    // 143,771 MiB. Maximum achievable matmul FLOP/s as the H100's for BF16 ("H200 is the same"), 1,453.4 TFLOP/s
    // for FP8 (ibid.).
    d.peak_flops = 989.4e12, d.hbm_bandwidth = 4.8e12, d.memory_bytes = 143771 * kMiB, d.fp8_peak_flops = 1978.9e12;
    hopper(d, 794.5e12, 1453.4e12);
    // Sustained: fitted to one published run, torchtitan's Llama 3.1 8B FP8 FSDP on 32 H200s
    // (benchmarks/llama3_8b_h200_2025-06_torchtitan.md; docs/hardware-model.md §5); the 64-GPU run is held out.
    d.efficiency.sustained = 0.722;
    d.fitted_to = "torchtitan-h200-llama3.1-8b-fsdp32";
  } else if (name == "a100-80g") {
    // NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM: BF16 Tensor Core 312 TFLOPS (624 with sparsity);
    // 80 GB HBM2e at 2,039 GB/s; no FP8. GEMMs at the best shape at the maximum achievable matmul FLOP/s, 271.2
    // of 312 TFLOP/s (ml-engineering's table, A100 SXM); no per-shape A100 table is published in the sources
    // used, so the H100's shape factors (the same table, relative to its best); attention: the A100 flash table.
    // nvidia-smi shows its memory as 81,920 MiB ("NVIDIA A100-SXM4-80GB ... 81920MiB").
    d.peak_flops = 312e12, d.hbm_bandwidth = 2.039e12, d.memory_bytes = 81920 * kMiB;
    d.gemm_shapes = parse_gemm_table(h100_gemm_shapes());
    d.attention_shapes = parse_attention_table(a100_attention_shapes());
    EfficiencyTable& e = d.efficiency;
    e.forward = e.backward_input = e.backward_weight = 271.2e12 / d.peak_flops;
    e.attention = d.attention_shapes.best;
    e.memory = 1;
    // Sustained: fitted to five of Narayanan et al. 2021's Table 1 runs on Selene (GPT 1.7B, 7.5B, 39.1B, 145.6B
    // and 529.6B; docs/hardware-model.md §5): the fraction for which the geometric mean of trainsim's predictions
    // over their published TFLOP/s is 1. The other five runs and torchtitan's six A100 runs are held out.
    e.sustained = 0.861;
    d.fitted_to = "narayanan2021-table1";
  } else if (name == "b200") {
    // NVIDIA DGX B200 datasheet, per GPU (eight in a system): FP8 training 72 PFLOPS for the system with sparsity,
    // so 4.5 PFLOPS dense FP8 and 2.25 dense BF16 per GPU; 1,440 GB of HBM3e at 64 TB/s, 180 GB at 8 TB/s per
    // GPU, which nvidia-smi shows as 183,359 MiB. No GEMM or attention table of its own in the sources used: the
    // H100's shape factors, at the H100's fractions of the peak (ml-engineering's MAMF table has no B200 row).
    d.peak_flops = 2250e12, d.hbm_bandwidth = 8e12, d.memory_bytes = 183359 * kMiB, d.fp8_peak_flops = 4500e12;
    hopper(d, 794.5e12 / 989.4e12 * d.peak_flops, 1402.6e12 / 1978.9e12 * d.fp8_peak_flops);
    // Sustained: fitted to one published run, NeMo 25.02's FP8 Llama 3 8B on 8 B200s (docs/hardware-model.md §5);
    // its 70B and 405B runs are held out.
    d.efficiency.sustained = 0.726;
    d.fitted_to = "nemo2502-b200-llama3-8b";
  } else if (name == "cpu") {
    // The executor's CPU backend on the development machine (an Intel Xeon @ 2.50 GHz with AVX-512, 2 cores,
    // idle, fp32 GEMMs on oneDNN, one thread per rank; other CPUs differ: bench/README.md, issue 23's sixth
    // round), as fitted by `trainsim calibrate` on 3 rounds x 3 traced steps of gpipe and ddp replays with the
    // `small` model on 2026-11-28, after issue 23's fifth round (bench/calibration_fidelity.sh;
    // bench/README.md, "Hardware cost model"), rounded to 3 digits. peak_flops and hbm_bandwidth are nominal
    // scales (2e11 FLOP/s, about that machine's single-core fp32 FMA peak; 1e10 bytes/s) that the fitted
    // efficiencies are fractions of (memory at its bound, 1: the element-wise passes now move more than 1e10
    // bytes/s); memory_bytes a RAM budget for one replay (8 GiB). No kernel tables: every GEMM and attention
    // shape alike.
    d.peak_flops = 2e11, d.hbm_bandwidth = 1e10, d.memory_bytes = 8.0 * (1ull << 30);
    d.efficiency.forward = 0.640, d.efficiency.backward_input = 0.579, d.efficiency.backward_weight = 0.579;
    d.efficiency.attention = 0.640, d.efficiency.memory = 1.0, d.efficiency.op_overhead_s = 5.70e-4;
    d.efficiency.dispatch_s = 1.47e-3;
    d.fitted_to = "calibrate-small-xeon-avx512";
  } else if (name != "custom") {
    std::string list;
    for (const auto& n : device_preset_names()) list += (list.empty() ? "" : ", ") + n;
    throw SpecError(fmt::format("unknown device '{}' (the presets are: {}; or a JSON file)", name, list));
  }
  if (name != "cpu" && name != "custom") {
    d.memory_reserve_bytes = gpu_reserve(d.memory_bytes);
    // The host's issuing of each local expert's kernels (EfficiencyTable::expert_launch_s): fitted, one number for
    // every GPU preset (it is the host's and the framework's, not the GPU's), to the three B200 rows of
    // Megatron-Bridge's 25.11 performance summary (Qwen3-30B-A3B on 8, Qwen3-235B-A22B on 64, DeepSeek-V3 on 256
    // B200s: the geometric mean of predicted / published over them is 1) and held out on its H100 rows and NeMo
    // 25.02's Mixtral 8x7B (docs/hardware-model.md §4b, §5). 140 us a forward: TE's grouped linear layers issue a
    // GEMM and FP8 casts per expert, each a few tens of microseconds of Python and launch.
    d.efficiency.expert_launch_s = 1.40e-4;
  }
  d.preset = name;
  return d;
}

DeviceSpec device_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw SpecError(fmt::format("{}: expected a JSON object describing a device", where));
  std::string base = "custom";
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) throw SpecError(fmt::format("{}: field 'preset': expected a string", where));
    base = j["preset"].get<std::string>();
  }
  DeviceSpec d;
  try {
    d = device_preset(base);
  } catch (const SpecError& e) {
    throw SpecError(fmt::format("{}: field 'preset': {}", where, e.what()));
  }
  apply_json(device_fields(), d, j, where, {"preset", "calibration"});
  d.validate(where);
  return d;
}

nlohmann::ordered_json to_json(const DeviceSpec& d) {
  nlohmann::ordered_json j;
  j["preset"] = d.preset;
  j.update(fields_json(device_fields(), d));
  return j;
}

}  // namespace trainsim::hw
