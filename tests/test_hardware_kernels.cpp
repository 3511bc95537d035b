// The hardware model's compute side (issue 20 §3, §5, §6): kernel tables by shape, GEMM times against the
// formula written out here, flash and eager attention (time and memory), selective op checkpointing, eager
// elementwise kernels, FP8 and context parallelism; the header lines that carry them round-trip.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "hardware/comm.h"
#include "hardware/cost_model.h"
#include "hardware/kernel_tables.h"
#include "hardware/memory.h"
#include "hardware/op_costs.h"
#include "schedules/generators.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::hw;
using trainsim::testing::CommandResult;
using trainsim::testing::run_trainsim;

namespace {

std::string message_of(auto f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

HardwareSetting llama8b(const std::string& device = "h100-sxm") {
  HardwareSetting s;
  s.model = model_preset("llama3-8b");
  s.device = device_preset(device);
  s.network = network_preset("nvlink8-ib400");
  s.seq = 8192;
  return s;
}

}  // namespace

TEST_CASE("kernel tables: grid points, log2 interpolation, clamping, errors") {
  const GemmShapeTable g = parse_gemm_table("256x256x256:0.1,256x256x1024:0.3,1024x256x256:0.2,1024x256x1024:0.8");
  CHECK(g.m == std::vector<double>{256, 1024});
  CHECK(g.best == 0.8);
  CHECK(g.factor(256, 256, 256) == doctest::Approx(0.1 / 0.8));
  CHECK(g.factor(1024, 256, 1024) == doctest::Approx(1.0));
  // 512 is halfway between 256 and 1024 in log2: the mean of the two K points.
  CHECK(g.factor(256, 256, 512) == doctest::Approx((0.1 + 0.3) / 2 / 0.8));
  CHECK(g.factor(512, 256, 512) == doctest::Approx((0.1 + 0.3 + 0.2 + 0.8) / 4 / 0.8));
  // Beyond the grid: its edge (a larger GEMM as efficient as the largest measured; N has one point).
  CHECK(g.factor(1 << 20, 77, 1 << 20) == doctest::Approx(1.0));
  CHECK(g.factor(1, 256, 1) == doctest::Approx(0.1 / 0.8));
  // Canonical text round-trips; an empty table is every shape alike.
  CHECK(parse_gemm_table(gemm_table_text(g)) == g);
  CHECK(GemmShapeTable{}.factor(1, 2, 3) == 1);
  CHECK(message_of([] { parse_gemm_table("256x256x256:0.1,256x256x512:0.2,512x256x256:0.3"); })
            .starts_with("the shapes must fill a grid"));
  CHECK(message_of([] { parse_gemm_table("256x256x256:1.5"); }).find("must be in (0, 1]") != std::string::npos);
  CHECK(message_of([] { parse_gemm_table("256x256:0.5"); }).starts_with("expected MxNxK:VALUE"));
  CHECK(message_of([] { parse_gemm_table("256x256x256:0.5,256x256x256:0.4"); }).find("given twice") != std::string::npos);
  const AttentionTable a = parse_attention_table("64x512:0.2/0.1,64x2048:0.4/0.3,128x512:0.3/0.2,128x2048:0.5/0.4");
  CHECK(a.best == 0.5);
  CHECK(a.forward_factor(128, 2048) == doctest::Approx(1.0));
  CHECK(a.backward_factor(64, 1024) == doctest::Approx((0.1 + 0.3) / 2 / 0.5));
  CHECK(parse_attention_table(attention_table_text(a)) == a);
  // A device field: a bad table names the field and the file.
  CHECK(message_of([] { device_from_json(nlohmann::json::parse(R"({"preset":"h100-sxm","gemm_shapes":"1x2"})"), "d.json"); })
            .starts_with("d.json: field 'gemm_shapes': expected MxNxK:VALUE"));
}

TEST_CASE("device presets: maximum achievable matmul FLOP/s, XLA's H100 GEMM table, FlashAttention-2") {
  const DeviceSpec h = device_preset("h100-sxm");
  // ml-engineering's MAMF table: 794.5 of 989.4 TFLOP/s (BF16), 1,402.6 of 1,978.9 (FP8).
  CHECK(h.efficiency.forward * h.peak_flops == doctest::Approx(794.5e12));
  CHECK(h.efficiency.fp8 * h.fp8_peak_flops == doctest::Approx(1402.6e12));
  // XLA's sm_90 table, 125 points; its best is 4096^3 at 783.3 TFLOP/s (0.792 of 989.4, rounded).
  CHECK(h.gemm_shapes.value.size() == 125);
  CHECK(h.gemm_shapes.best == doctest::Approx(0.792));
  CHECK(h.gemm_shapes.factor(4096, 4096, 4096) == doctest::Approx(1.0));
  CHECK(h.gemm_shapes.factor(256, 256, 256) == doctest::Approx(0.00652 / 0.792));
  // FlashAttention-2 on H100: 335 TFLOP/s causal forward at head dim 128 and 16k.
  CHECK(h.efficiency.attention * h.peak_flops == doctest::Approx(335e12).epsilon(1e-3));
  CHECK(h.attention_shapes.forward_factor(128, 512) == doctest::Approx(191.0 / 335).epsilon(2e-3));
  const DeviceSpec a = device_preset("a100-80g");
  CHECK(a.efficiency.forward * a.peak_flops == doctest::Approx(271.2e12));
  CHECK(a.fp8_peak_flops == 0);
  CHECK(device_preset("cpu").gemm_shapes.empty());
  // The presets print as their names alone (the tables are the preset's).
  CHECK(spec_text(h) == "h100-sxm");
  CHECK(device_from_words({"h100-sxm", "efficiency.forward=0.5"}, "x") != h);
}

TEST_CASE("a linear's time: FLOPs over the shape factor, no less than its memory traffic") {
  HardwareSetting s = llama8b();
  const DeviceSpec& d = s.device;
  // One block's forward on 8192 tokens: each linear of in -> out is an 8192 x out x in GEMM.
  const double T = 8192;
  double expect = 0;
  for (const Linear& l : block_linears(s.model)) {
    const double flops = 2 * T * l.in * l.out;
    const double bytes = 2 * (T * l.in + l.in * l.out) + 2 * T * l.out;
    const double compute = flops / (d.peak_flops * d.efficiency.forward * d.gemm_shapes.factor(T, l.out, l.in));
    expect += std::max(compute, bytes / d.hbm_bandwidth);
  }
  Work w;
  for (const Linear& l : block_linears(s.model)) w.forward_flops += 2 * T * l.in * l.out;
  const Work fwd = block_forward(s, T);
  CHECK(fwd.forward_flops == doctest::Approx(w.forward_flops));
  CHECK(fwd.forward_weighted / (d.peak_flops * d.efficiency.forward) == doctest::Approx(expect));
  // The block's seven linears: wq, wk, wv, wo, w1, w3, w2 (torchtitan's order), 2·(h(h + 2kv) + h² + 3hf) FLOPs.
  const double h = 4096, kv = 1024, f = 14336;
  CHECK(w.forward_flops == doctest::Approx(2 * T * (h * (h + 2 * kv) + h * h + 3 * h * f)));
  // Flash attention: FlashAttention's causal count (half of 4·T·s·h) over its table at head dim 128, s = 8192.
  const double F = 4 * T * 8192 * h;
  CHECK(fwd.attention_flops == doctest::Approx(F));
  CHECK(fwd.attention_forward_weighted / (d.peak_flops * d.efficiency.attention) ==
        doctest::Approx(0.5 * F / (d.peak_flops * 0.3366)).epsilon(1e-3));
  // Without tables (the cpu device) a GEMM takes its FLOPs at the pass's efficiency, as before the tables.
  HardwareSetting c = s;
  c.device = device_preset("cpu");
  const Work cpu = block_forward(c, T);
  CHECK(cpu.forward_weighted == doctest::Approx(cpu.forward_flops));
  CHECK(cpu.attention_forward_weighted == doctest::Approx(F));
}

TEST_CASE("attention: flash keeps no s x s scores, eager does, independent of --recompute") {
  const ModelSpec m = model_preset("llama3-8b");
  const double s = 8192, b = 1, h = 4096, a = 32;
  const double eager = activation_bytes_per_block(m, s, b, Recompute::None, 1, false, Attention::Eager);
  const double flash = activation_bytes_per_block(m, s, b, Recompute::None, 1, false, Attention::Flash);
  // The scores and probabilities (2·a·s²·b in bf16, no dropout) against one fp32 statistic per head and token.
  CHECK(eager - flash == doctest::Approx(2 * a * s * s * b - 4 * a * s * b));
  CHECK(activation_bytes_per_block(m, s, b, Recompute::Selective, 1, false, Attention::Flash) ==
        doctest::Approx(flash - 4 * a * s * b));
  // The issue's newcomer run: llama3-8b with --recompute none on one H100 was 196 GiB with the scores; flash
  // attention is the default, and the step now fits in 80 GB.
  const std::string run = "gen fsdp --dp 8 --layers 32 --microbatches 1 --model llama3-8b --device h100-sxm "
                          "--network nvlink8-ib400 --recompute none --sim --json";
  nlohmann::json flash_run = nlohmann::json::parse(run_trainsim(run).out);
  nlohmann::json eager_run = nlohmann::json::parse(run_trainsim(run + " --attention eager").out);
  CHECK(flash_run["peak_memory_bytes"].get<double>() < 80e9);
  CHECK(flash_run["oom"].is_null());
  CHECK(eager_run["peak_memory_bytes"].get<double>() > 80e9);
  CHECK(eager_run["peak_memory_bytes"].get<double>() - flash_run["peak_memory_bytes"].get<double>() ==
        doctest::Approx(32 * (2 * a * s * s - 4 * a * s)).epsilon(1e-6));
  (void)h;
}

TEST_CASE("selective op checkpointing: every other matrix multiply recomputed, their outputs not kept") {
  HardwareSetting s = llama8b();
  s.recompute = Recompute::Op;
  const LayerContent layer{0, 1, false, false};
  const double T = 8192, h = 4096, kv = 1024, f = 14336;
  HardwareSetting none = s;
  none.recompute = Recompute::None;
  const Work with = compute_work(s, layer, OpKind::BackwardInput, 1);
  const Work without = compute_work(none, layer, OpKind::BackwardInput, 1);
  // torchtitan's policy keeps mm 1, 3, 5, 7 (wq, wv, w1, w2) and recomputes wk, wo, w3; the elementwise ops again.
  CHECK(with.forward_flops - without.forward_flops == doctest::Approx(2 * T * (h * kv + h * h + h * f)));
  CHECK(with.attention_flops == doctest::Approx(without.attention_flops));  // the attention's output is kept
  CHECK(with.bytes - without.bytes == doctest::Approx(elementwise_bytes(s, T).forward));
  // Kept: the block's input, wq, wv, w1, w2 outputs, the attention's output and statistics.
  const ModelSpec& m = s.model;
  CHECK(activation_bytes_per_block(m, T, 1, Recompute::Op, 1, false, Attention::Flash) ==
        doctest::Approx(2 * T * (h + h + kv + f + h) + 2 * T * h + 4 * 32 * T));
  CHECK(recompute_from_name("op", "x") == Recompute::Op);
  CHECK(message_of([] { recompute_from_name("ops", "--recompute"); }) ==
        "--recompute: expected none, selective, full or op, got 'ops'");
}

TEST_CASE("elementwise eager: torchtitan's kernels one by one move more bytes than fused ones") {
  HardwareSetting s = llama8b();
  const double T = 1, h = 4096, kv = 1024, f = 14336;
  const ElementwiseBytes fused = elementwise_bytes(s, T);
  CHECK(fused.forward == doctest::Approx(2 * (4 * h + 6 * h + 3 * f + 2 * (h + kv))));
  CHECK(fused.backward == doctest::Approx(2 * fused.forward));
  s.elementwise = Elementwise::Eager;
  const ElementwiseBytes eager = elementwise_bytes(s, T);
  // Two RMSNorms of 36 bytes per element, two adds of 6, SwiGLU 10 per FFN element, rotary 20 per Q and K
  // element, repeat_kv's copies of K and V: 2·2·(kv + h).
  CHECK(eager.forward == doctest::Approx(2 * 36 * h + 12 * h + 10 * f + 20 * (h + kv) + 4 * (kv + h)));
  CHECK(eager.backward == doctest::Approx(2 * 56 * h + 24 * h + 18 * f + 20 * (h + kv) + 4 * (kv + h)));
  CHECK(elementwise_from_name("eager", "x") == Elementwise::Eager);
}

TEST_CASE("FP8: block GEMMs at the FP8 peak, eager casts as memory traffic, FP8 weight all-gathers") {
  HardwareSetting s = llama8b();
  const LayerContent layer{0, 1, false, false};
  const Work bf16 = compute_work(s, layer, OpKind::Forward, 1);
  s.fp8 = true;
  const Work fp8 = compute_work(s, layer, OpKind::Forward, 1);
  CHECK(fp8.forward_flops == doctest::Approx(bf16.forward_flops));  // FLOPs count the same
  CHECK(fp8.forward_weighted == 0);
  CHECK(fp8.fp8_weighted > 0);
  CHECK(work_seconds(s.device, fp8) < work_seconds(s.device, bf16));
  // With fused elementwise kernels (torch.compile, TransformerEngine) the casts run inside the kernels that make the
  // operands: no pass of their own. Eager, each GEMM casts its input and its weight: (2e + 1) bytes per element.
  CHECK(fp8.bytes == doctest::Approx(bf16.bytes));
  HardwareSetting eager = s;
  eager.elementwise = Elementwise::Eager;
  HardwareSetting eager_bf16 = eager;
  eager_bf16.fp8 = false;
  double casts = 0;
  for (const Linear& l : block_linears(s.model)) casts += 5 * (8192 * l.in + l.in * l.out);
  CHECK(compute_work(eager, layer, OpKind::Forward, 1).bytes - compute_work(eager_bf16, layer, OpKind::Forward, 1).bytes ==
        doctest::Approx(casts));
  // The LM head stays in BF16.
  const LayerContent head{0, 1, false, true};
  HardwareSetting b = s;
  b.fp8 = false;
  CHECK(compute_work(s, head, OpKind::Forward, 1).forward_weighted ==
        doctest::Approx(compute_work(b, head, OpKind::Forward, 1).forward_weighted - bf16.forward_weighted));
  // FP8 needs a device with FP8 tensor cores; all-gathers in FP8 go with FP8 linear layers.
  HardwareSetting a = s;
  a.device = device_preset("a100-80g");
  CHECK(message_of([&] { a.validate("--fp8"); }).starts_with("--fp8: FP8 needs a device with FP8 tensor cores"));
  HardwareSetting g = llama8b();
  g.fp8_all_gather = true;
  CHECK(message_of([&] { g.validate("x"); }).find("goes with FP8 linear layers") != std::string::npos);
  // An FSDP all-gather of a layer's weights moves its linear weights in one byte each.
  HardwareSetting fs = llama8b();
  fs.fp8 = fs.fp8_all_gather = true;
  std::vector<std::vector<int>> groups(1, {0, 1, 2, 3, 4, 5, 6, 7});
  HardwareCostModel with(fs, 4, 8, groups);
  fs.fp8_all_gather = false;
  HardwareCostModel without(fs, 4, 8, groups);
  Op ag;
  ag.kind = OpKind::AllGather, ag.layer = 1, ag.group = 0, ag.rank = 0;
  ag.reads = {weight_tensor(1, IdSet{0}, 8)};
  ag.writes = {weight_tensor(1, IdSet::range(0, 8), 8)};
  const double linear = with.sizes().layer_linear_parameters(1), all = with.sizes().layer_parameters(1);
  const GroupShape node = fs.network.shape_of(groups[0]);
  CHECK(with.seconds_of(ag, 8) ==
        doctest::Approx(nccl_collective(Collective::AllGather, node, 2 * all - linear, fs.network).seconds));
  CHECK(without.seconds_of(ag, 8) ==
        doctest::Approx(nccl_collective(Collective::AllGather, node, 2 * all, fs.network).seconds));
}

TEST_CASE("context parallelism: gen 3d --cp, CP groups next to TP, b·s/c tokens per op, ring attention") {
  GenOptions o;
  o.tp = 2, o.cp = 2, o.dp = 2, o.pp = 2, o.microbatches = 2;
  Schedule s = generate("3d", o);
  CHECK(s.header.world_size == 16);
  // rank = tp + T * (cp + C * (dp + D * pp)): cp0 holds ranks 0 and 2 (tp 0), cp1 ranks 1 and 3.
  std::map<std::string, std::vector<int>> groups;
  for (std::size_t g = 0; g < s.header.groups.size(); ++g) groups[s.header.group_names[g]] = s.header.groups[g];
  CHECK(groups["tp0"] == std::vector<int>{0, 1});
  CHECK(groups["cp0"] == std::vector<int>{0, 2});
  CHECK(groups["cp1"] == std::vector<int>{1, 3});
  CHECK(groups["cp2"] == std::vector<int>{4, 6});
  CHECK(groups["dp0"] == std::vector<int>{0, 2, 4, 6});  // grads over DP x CP
  CommandResult r = run_trainsim("gen 3d --tp 2 --cp 2 --dp 2 --pp 2 --microbatches 2 --layers 4 --model llama3-8b "
                                 "--device h100-sxm --network nvlink8-ib400 --seq 65536 --recompute full");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("  context_parallel 2\n") != std::string::npos);
  Schedule back = parse_schedule(r.out, "cp.sched");
  REQUIRE(back.header.hardware);
  CHECK(back.header.hardware->context_parallel == 2);
  CHECK(back.header.hardware->tokens_per_microbatch() == 32768);
  CHECK(print_schedule(back) == r.out);
  // Same work per GPU as one rank on 32768 tokens attending to 65536: twice the throughput of CP 1 per token
  // would be wrong; each op does half a sequence's tokens.
  nlohmann::json cp = nlohmann::json::parse(run_trainsim(
      "gen 3d --cp 2 --dp 1 --layers 4 --microbatches 1 --model llama3-8b --device h100-sxm --network nvlink8-ib400 "
      "--seq 65536 --sim --json").out);
  CHECK(cp["tokens_per_step"].get<double>() == 65536);
  // The ring's KV exchange over NVLink hides under the attention core at this length.
  const HardwareSetting& hs = *back.header.hardware;
  const AttentionSeconds att = attention_core_seconds(hs, 32768, 2);
  const double kv = 32768 * 2 * 1024 / 2 * 2.0;
  CHECK(p2p_seconds(kv, {hs.network.intra_latency_s, hs.network.intra_bandwidth}) < att.forward);
  // Eager attention cannot be split; a CP setting needs CP groups; the executor refuses CP schedules.
  HardwareSetting bad = hs;
  bad.attention = Attention::Eager;
  CHECK(message_of([&] { bad.validate("x"); }).find("ring attention on flash attention") != std::string::npos);
  CHECK(message_of([&] { HardwareCostModel(hs, 4, 2, {{0, 1}}); })
            .starts_with("rank 0: the hardware setting has context parallelism of degree 2, but no CP group holds"));
  auto dir = trainsim::testing::fresh_dir("cp-replay");
  const std::string file = (dir / "cp.sched").string();
  REQUIRE(run_trainsim("gen 3d --cp 2 --dp 1 --layers 2 --microbatches 1 -o " + file).exit_code == 0);
  CommandResult replay = run_trainsim("replay " + file + " --model tiny --steps 1", true);
  CHECK(replay.exit_code != 0);
  CHECK(replay.out.find("the executor does not replay context parallelism") != std::string::npos);
}

TEST_CASE("the hardware block's attention, elementwise, fp8 and context_parallel lines round-trip") {
  GenOptions o;
  o.stages = 2, o.microbatches = 2;
  Schedule s = generate("1f1b", o);
  s.header.cost_model = "hardware";
  HardwareSetting hs = llama8b();
  s.header.hardware = hs;
  const std::string plain = print_schedule(s);
  CHECK(plain.find("attention") == std::string::npos);  // defaults print nothing: older files unchanged
  hs.attention = Attention::Eager, hs.elementwise = Elementwise::Eager, hs.fp8 = hs.fp8_all_gather = true;
  s.header.hardware = hs;
  const std::string text = print_schedule(s);
  CHECK(text.find("  recompute none\n  attention eager\n  elementwise eager\n  fp8 linear+all-gather\n") !=
        std::string::npos);
  Schedule back = parse_schedule(text, "h.sched");
  CHECK(back.header == s.header);
  CHECK(print_schedule(back) == text);
  // --set applies every override before checking: hidden and heads change together, in any order.
  CommandResult r = run_trainsim("gen 1f1b --stages 2 --model gpt2-1.5b --set model.hidden=2304 --set model.heads=24 "
                                 "--set model.kv_heads=24 --device a100-80g --network nvlink8-ib200");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("model gpt2-1.5b hidden=2304 heads=24 kv_heads=24") != std::string::npos);
}
