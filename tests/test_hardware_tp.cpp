// Tensor and sequence parallelism in the hardware cost model, against the papers' own formulas written out
// here: Megatron-LM's TP communication per layer (Shoeybi et al. 2019; Korthikanti et al. 2022 §4.2.2),
// Narayanan et al. 2021 equation 3 summed over a TP group's ranks, Korthikanti et al. 2022 Table 2 for the
// activations a TP rank keeps; and the figures a TP schedule's report adds.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "cli_helpers.h"
#include "hardware/comm.h"
#include "hardware/cost_model.h"
#include "hardware/memory.h"
#include "schedules/cost_models.h"
#include "schedules/hardware_sim.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::hw;

namespace {

// A GPT-3-style model as Narayanan et al. 2021 and Korthikanti et al. 2022 count it: multi-head attention, a
// GeLU MLP of 4h, dropout, 16-bit activations.
ModelSpec gpt(int blocks, int hidden, int heads, int vocab) {
  ModelSpec m;
  m.preset = "custom", m.blocks = blocks, m.hidden = hidden, m.heads = heads, m.kv_heads = heads;
  m.ffn = 4 * hidden, m.vocab = vocab, m.seq = 2048, m.gated_ffn = false, m.dropout = true;
  m.learned_positions = true, m.layernorm = true;
  return m;
}

// nvlink8-ib400 with NCCL's ring alone and no fixed cost per call, so that a collective takes the ring formulas
// of DESIGN §2 (an all-reduce the time of a reduce-scatter plus an all-gather): these tests count the TP
// collectives; NCCL's choice among ring, tree and NVLS is tests/test_hardware_model.cpp's.
NetworkSpec ring_network() {
  NetworkSpec n = network_preset("nvlink8-ib400");
  n.nvls_bandwidth = 0, n.collective_latency_s = 0;
  return n;
}

// Every TP collective synchronous (TpOverlap::None), so that these tests count them; what the overlap modes
// hide is the last test's.
HardwareSetting setting(ModelSpec m, int microbatch_size, Recompute r = Recompute::None) {
  HardwareSetting s;
  s.model = std::move(m);
  s.device = device_preset("h100-sxm");
  s.network = ring_network();
  s.microbatch_size = microbatch_size;
  s.recompute = r;
  s.tp_overlap = TpOverlap::None;
  return s;
}

// What the TP group's members do to a partial sum `p` (an activation or activation grad of TP degree t) before
// the next layer reads it whole: all-reduce it, or with sequence parallelism reduce-scatter it into this rank's
// sequence shard and all-gather the shards back (docs/design.md, "Tensor parallelism").
// The gathered tensor holds every shard ("A1{0}[0-3/4]"), which the next layer reads as complete.
std::string gathered(const std::string& whole, int t, bool sp) {
  return sp ? whole + "[0-" + std::to_string(t - 1) + "/" + std::to_string(t) + "]" : whole;
}
std::string reduce(const std::string& p, const std::string& whole, int j, int t, bool sp) {
  if (!sp) return "  all-reduce group 1 : " + p + " -> " + whole + "\n";
  const std::string shard = whole + "[" + std::to_string(j) + "/" + std::to_string(t) + "]";
  return "  reduce-scatter group 1 : " + p + " -> " + shard + "\n  all-gather group 1 : " + shard + " -> " +
         gathered(whole, t, sp) + "\n";
}

// TP rank j of t's step of `layers` schedule layers over `mb` microbatches, Megatron's way (the op pattern of
// tests/test_tensor_parallel.cpp): each layer's row-parallel output a partial sum reduced before the next layer
// reads it, the last layer's logits a vocabulary slice the loss reads, the backward the conjugates, the
// microbatches' grads accumulated, one update per slice.
std::string tp_rank(int j, int t, int layers, int mb, bool sp) {
  const std::string s = "<" + std::to_string(j) + "/" + std::to_string(t) + ">";
  const std::string p = "<+" + std::to_string(j) + "/" + std::to_string(t) + ">";
  auto L = [](int l) { return std::to_string(l); };
  std::string out = "rank " + std::to_string(j) + "\n  load ->";
  for (int l = 0; l < layers; ++l) out += " W" + L(l) + s + " O" + L(l) + s;
  for (int b = 0; b < mb; ++b) out += " A0{" + L(b) + "}";
  out += "\n";
  for (int b = 0; b < mb; ++b) {
    const std::string B = "{" + L(b) + "}";
    for (int l = 0; l < layers; ++l) {
      const bool last = l + 1 == layers;
      const std::string input = l == 0 ? "A0" + B : gathered("A" + L(l) + B, t, sp);
      out += "  forward L" + L(l) + " " + B + " : " + input + " W" + L(l) + s + " -> A" + L(l + 1) + B +
             (last ? s : p) + "\n";
      if (!last) out += reduce("A" + L(l + 1) + B + p, "A" + L(l + 1) + B, j, t, sp);
    }
    out += "  loss " + B + " : A" + L(layers) + B + s + " -> dA" + L(layers) + B + s + "\n";
    for (int l = layers - 1; l >= 0; --l) {
      const bool last = l + 1 == layers;
      const std::string input = l == 0 ? "A0" + B : gathered("A" + L(l) + B, t, sp);
      const std::string grad = last ? "dA" + L(l + 1) + B + s : gathered("dA" + L(l + 1) + B, t, sp);
      out += "  backward L" + L(l) + " " + B + " : " + input + " " + grad + " W" + L(l) + s + " -> dW" + L(l) + B + s +
             " dA" + L(l) + B + p + "\n";
      if (l > 0) out += reduce("dA" + L(l) + B + p, "dA" + L(l) + B, j, t, sp);
    }
  }
  const std::string all = mb == 1 ? "{0}" : "{0-" + L(mb - 1) + "}";
  for (int l = 0; l < layers; ++l) {
    for (int b = 1; b < mb; ++b) {
      const std::string before = b == 1 ? "{0}" : "{0-" + L(b - 1) + "}";
      out += "  accumulate : dW" + L(l) + before + s + " dW" + L(l) + "{" + L(b) + "}" + s + " -> dW" + L(l) + "{0-" +
             L(b) + "}" + s + "\n";
    }
    out += "  update L" + L(l) + " : dW" + L(l) + all + s + " W" + L(l) + s + " O" + L(l) + s + " -> W" + L(l) + s +
           "@1 O" + L(l) + s + "@1\n";
  }
  return out;
}

// A TP group of t ranks (group 1, named tp0) on the hardware cost model.
Schedule tp_schedule(int t, int layers, int mb, bool sp, const HardwareSetting& hs, const std::string& group = "tp0") {
  std::string text = "trainsim-schedule 2\nworld_size " + std::to_string(t) + "\nlayers " + std::to_string(layers) +
                     "\nmicrobatches " + std::to_string(mb) + "\ncost_model unit\np2p per-pair\ngroup 1 " + group;
  for (int j = 0; j < t; ++j) text += " " + std::to_string(j);
  text += "\n";
  for (int j = 0; j < t; ++j) text += tp_rank(j, t, layers, mb, sp);
  Schedule s = parse_schedule(text, "tp.sched");
  s.header.cost_model = "hardware";
  s.header.hardware = hs;
  return s;
}

std::unique_ptr<CostModel> cost_of(const Schedule& s) { return make_schedule_cost_model(s); }
const HardwareCostModel& hw_cost(const std::unique_ptr<CostModel>& c) {
  return dynamic_cast<const HardwareCostModel&>(*c);
}

// One rank's TP communication seconds: inside its compute ops, and its explicit TP collectives.
double tp_comm_of_rank(const Schedule& s, const HardwareCostModel& cost, int rank) {
  double total = 0;
  for (const Op& op : s.ranks[rank]) {
    if (is_compute(op.kind)) total += cost.tp_comm_seconds(op);
    else if (cost.is_tp_collective(op)) total += cost.seconds_of(op, static_cast<int>(s.header.groups[0].size()));
  }
  return total;
}

}  // namespace

TEST_CASE("TP: Megatron's 4 all-reduces of b·s·h per block and microbatch, forward and backward, with and without SP") {
  // Shoeybi et al. 2019 §3 (fig. 3: f and g) / Korthikanti et al. 2022 §4.2.2: per transformer layer two
  // all-reduces in the forward and two in the backward, each of the b·s·h activations; the vocabulary-parallel
  // embedding adds one all-reduce after its lookup, the column-parallel LM head one for its input grad, and the
  // vocabulary-parallel cross-entropy three of b·s fp32 values (max, target logit, sum of exponentials). With
  // sequence parallelism each all-reduce is an all-gather plus a reduce-scatter of the same volume (each half an
  // all-reduce's time under the ring formulas), and the backward all-gathers the input of each column-parallel
  // linear again for its weight grad (Megatron-LM keeps only its sequence shard): two per block and the head's,
  // less the inputs this schedule keeps gathered from the forward (layers 1 and 2's: it all-gathers each sequence
  // shard once, right after its reduce-scatter, and keeps the whole). Per microbatch: all-gathers 2·blocks + 1
  // forward and 4·blocks + 2 - 2 backward, reduce-scatters 2·blocks + 1 each way. A ring all-reduce of S bytes
  // over n ranks: 2(n-1)·alpha + 2((n-1)/n)·S/B.
  const NetworkSpec net = ring_network();
  const double alpha = net.intra_latency_s, bw = net.intra_bandwidth;  // the TP group sits in one node
  auto all_reduce = [&](int n, double S) { return 2 * (n - 1) * alpha + 2 * (n - 1.0) / n * S / bw; };
  for (int t : {2, 4, 8}) {
    for (int blocks_per_layer : {1, 3}) {
      for (bool sp : {false, true}) {
        CAPTURE(t);
        CAPTURE(blocks_per_layer);
        CAPTURE(sp);
        const int layers = 3, mb = 2, b = 2, blocks = layers * blocks_per_layer;
        HardwareSetting hs = setting(gpt(blocks, 4096, 32, 51200), b);
        hs.seq = 1024;
        Schedule s = tp_schedule(t, layers, mb, sp, hs);
        REQUIRE(simulate(s).ok);
        auto cost = cost_of(s);
        const double bsh = b * 1024.0 * 4096 * 2;  // bytes of one microbatch's activations (bf16)
        const double halves = sp ? (2.0 * blocks + 1) + (4.0 * blocks) + 2 * (2.0 * blocks + 1) : 2 * (4.0 * blocks + 2);
        const double megatron = mb * (halves / 2 * all_reduce(t, bsh) + 3 * all_reduce(t, b * 1024.0 * 4));
        for (int rank = 0; rank < t; ++rank) CHECK(tp_comm_of_rank(s, hw_cost(cost), rank) == doctest::Approx(megatron));
      }
    }
  }
}

TEST_CASE("TP: Narayanan et al. 2021 eq. 3 FLOPs summed over a TP group's ranks") {
  // F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per iteration with full recomputation (eq. 3), 72·B·s·l·h²·(1 +
  // s/(6h) + V/(12·l·h)) without it (the same derivation with three passes over the blocks): the model's FLOPs,
  // however its layers are split. Each TP rank does 1/t of them (Shoeybi et al. 2019 §3).
  const double l = 8, h = 6144, V = 51200, s = 2048;
  for (int t : {2, 4}) {
    for (Recompute r : {Recompute::Full, Recompute::None}) {
      CAPTURE(t);
      CAPTURE(recompute_name(r));
      const int mb = 2, b = 3;
      const double B = mb * b;
      Schedule sch = tp_schedule(t, 2, mb, false, setting(gpt(8, 6144, 48, 51200), b, r));
      auto cost = cost_of(sch);
      double total = 0, rank0 = 0;
      for (int rank = 0; rank < t; ++rank)
        for (const Op& op : sch.ranks[rank]) {
          const double f = hw_cost(cost).op_work(op).flops();
          total += f;
          if (rank == 0) rank0 += f;
        }
      const double eq3 = r == Recompute::Full ? 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
                                              : 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
      CHECK(total == doctest::Approx(eq3).epsilon(1e-12));
      CHECK(rank0 == doctest::Approx(eq3 / t).epsilon(1e-12));
    }
  }
}

TEST_CASE("TP: a TP rank's saved activations follow Korthikanti et al. 2022, Table 2") {
  // Table 2, bytes per transformer layer at their 16-bit assumptions (s sequence, b microbatch, h hidden, a heads,
  // t tensor-parallel): tensor parallel sbh(10 + 24/t + 5as/(ht)); tensor + sequence parallel
  // sbh(34/t + 5as/(ht)); with selective recomputation sbh(10 + 24/t) and sbh(34/t). Evaluated for their Table 3
  // GPT-3 175B (a = 96, h = 12288, s = 2048, t = 8), one block per schedule layer, on the input of a middle layer
  // (the first holds the embedding's token ids too, the last the head's inputs).
  const double s = 2048, h = 12288, a = 96, t = 8, b = 1, sbh = s * b * h;
  for (bool sp : {false, true}) {
    for (Recompute r : {Recompute::None, Recompute::Selective}) {
      CAPTURE(sp);
      CAPTURE(recompute_name(r));
      HardwareSetting hs = setting(gpt(3, 12288, 96, 51200), 1, r);
      hs.attention = Attention::Eager;  // the paper's attention keeps its s x s scores (flash keeps none)
      Schedule sch = tp_schedule(8, 3, 1, sp, hs);
      auto cost = cost_of(sch);
      const double attention = r == Recompute::None ? 5 * a * s / (h * t) : 0;
      const double table2 = sp ? sbh * (34 / t + attention) : sbh * (10 + 24 / t + attention);
      // What the rank keeps of the input from the forward to the backward holds them: the whole input, or with
      // sequence parallelism its sequence shard (the whole input is gathered afresh for each pass and freed).
      for (int rank : {0, 7}) {
        const Tensor kept = sp ? shard(activation_tensor(1, {0}), rank, 8) : activation_tensor(1, {0});
        CHECK(cost->memory(kept, rank) == doctest::Approx(table2));
      }
      // The partial sum the layer before leaves holds none; nor, with sequence parallelism, the gathered input,
      // and without it a sequence shard.
      CHECK(cost->memory(tp_partial(activation_tensor(1, {0}), 0, 8), 0) == doctest::Approx(sbh * 2));
      if (sp) {
        Tensor whole = shard(activation_tensor(1, {0}), 0, 8);
        whole.shards = IdSet::range(0, 8);
        CHECK(cost->memory(whole, 0) == doctest::Approx(sbh * 2));
      } else {
        CHECK(cost->memory(shard(activation_tensor(1, {0}), 3, 8), 0) == doctest::Approx(sbh * 2 / 8));
      }
    }
  }
  // Full recomputation keeps each block's input, 2sbh, whatever t (Table 2's last row); with sequence parallelism
  // that input is the rank's sequence shard, 2sbh/t.
  Schedule full = tp_schedule(8, 3, 1, false, setting(gpt(3, 12288, 96, 51200), 1, Recompute::Full));
  CHECK(cost_of(full)->memory(activation_tensor(1, {0}), 0) == doctest::Approx(2 * sbh));
  Schedule full_sp = tp_schedule(8, 3, 1, true, setting(gpt(3, 12288, 96, 51200), 1, Recompute::Full));
  CHECK(cost_of(full_sp)->memory(shard(activation_tensor(1, {0}), 0, 8), 0) == doctest::Approx(2 * sbh / 8));
}

TEST_CASE("TP: a slice holds 1/t of the parameters, grads and optimizer state, collectives move whole activations") {
  HardwareSetting hs = setting(model_preset("llama3-8b"), 1);
  hs.seq = 8192;
  TensorSizes sizes(hs, 4);
  const double p = sizes.layer_parameters(1);
  // Mixed-precision bytes per parameter (2 + 4 + 12: fp32 grads), on 1/t of the layer, then FSDP-sharded.
  CHECK(sizes.wire_bytes(tp_slice(weight_tensor(1), 3, 4)) == doctest::Approx(2 * p / 4));
  CHECK(sizes.wire_bytes(tp_slice(opt_state_tensor(1), 3, 4)) == doctest::Approx(12 * p / 4));
  CHECK(sizes.wire_bytes(tp_slice(weight_grad_tensor(1, {0}), 0, 8)) == doctest::Approx(4 * p / 8));  // fp32 grads
  CHECK(sizes.wire_bytes(tp_slice(weight_tensor(1, {1}, 8), 1, 4)) == doctest::Approx(2 * p / 4 / 8));
  const ModelStates whole = model_state_bytes(hs.model, 8e9, 1, 8), sliced = model_state_bytes(hs.model, 8e9, 1, 8, 4);
  CHECK(sliced.total() == doctest::Approx(whole.total() / 4));
  // A partial sum is as large as the sum; a vocabulary slice of the logits (fp32) and of their grad 1/t; a
  // sequence shard its share.
  const double a = 8192.0 * 4096 * 2;
  CHECK(sizes.wire_bytes(tp_partial(activation_tensor(2, {0}), 1, 4)) == doctest::Approx(a));
  CHECK(sizes.wire_bytes(tp_partial(activation_grad_tensor(2, {0}), 1, 4)) == doctest::Approx(a));
  CHECK(sizes.wire_bytes(shard(activation_tensor(2, {0}), 1, 4)) == doctest::Approx(a / 4));
  CHECK(sizes.wire_bytes(tp_slice(activation_tensor(4, {0}), 1, 4)) == doctest::Approx(8192.0 * 4 * 128256 / 4));
  CHECK(sizes.wire_bytes(tp_slice(activation_grad_tensor(4, {0}), 1, 4)) == doctest::Approx(8192.0 * 2 * 128256 / 4));
}

TEST_CASE("TP: compute ops do 1/t of the work, explicit TP collectives take the ring formula over NVLink") {
  const int t = 4, b = 2;
  HardwareSetting hs = setting(gpt(4, 4096, 32, 51200), b);
  hs.seq = 2048;
  Schedule s = tp_schedule(t, 2, 1, false, hs);
  auto cost = cost_of(s);
  const HardwareCostModel& c = hw_cost(cost);
  const NetworkSpec net = ring_network();
  const double bsh = b * 2048.0 * 4096 * 2;
  for (const Op& op : s.ranks[1]) {
    CAPTURE(op.label());
    if (op.kind == OpKind::AllReduce) {
      CHECK(c.is_tp_collective(op));
      // 2(n-1)·alpha + 2((n-1)/n)·S/B over the intra-node link, S the whole activation.
      CHECK(c.seconds_of(op, t) ==
            doctest::Approx(2 * (t - 1) * net.intra_latency_s + 2 * (t - 1.0) / t * bsh / net.intra_bandwidth));
    } else if (op.kind == OpKind::Forward || op.kind == OpKind::Backward) {
      // The same op without TP: t times the matrix and attention FLOPs.
      Op whole = op;
      for (auto* list : {&whole.reads, &whole.writes})
        for (Tensor& x : *list) x.tp_size = 1, x.tp_slices = 1, x.partial = false;
      CHECK(c.op_work(op).forward_flops * t == doctest::Approx(c.op_work(whole).forward_flops));
      CHECK(c.op_work(op).backward_input_flops * t == doctest::Approx(c.op_work(whole).backward_input_flops));
      CHECK(c.op_work(op).attention_flops * t == doctest::Approx(c.op_work(whole).attention_flops));
      CHECK(c.op_work(op).bytes < c.op_work(whole).bytes);
      CHECK(c.tp_comm_seconds(whole) == 0);
      // Its time is its compute plus the TP collectives inside it, which inner_comm gives the timeline.
      CHECK(c.tp_comm_seconds(op) > 0);
      CHECK(c.seconds_of(op, 1) == doctest::Approx(work_seconds(hs.device, c.op_work(op)) + c.tp_comm_seconds(op)));
      CHECK(c.inner_comm(op) == seconds(c.tp_comm_seconds(op)));
    }
  }
  // Sequence parallelism also splits the norms' and residual adds' bytes: less memory traffic per op.
  Schedule sp = tp_schedule(t, 2, 1, true, hs);
  auto sp_cost = cost_of(sp);
  CHECK(hw_cost(sp_cost).op_work(sp.ranks[0][1]).bytes < c.op_work(s.ranks[0][1]).bytes);
  CHECK(hw_cost(sp_cost).op_work(sp.ranks[0][1]).flops() == c.op_work(s.ranks[0][1]).flops());
}

TEST_CASE("TP: the step report's MFU counts the model once over all ranks, and shows the exposed TP communication") {
  const int t = 4, mb = 2, b = 2;
  HardwareSetting hs = setting(gpt(4, 4096, 32, 51200), b);
  hs.seq = 2048;
  Schedule s = tp_schedule(t, 2, mb, false, hs);
  HardwareRun run = simulate_hardware(s);
  REQUIRE(run.result.ok);
  REQUIRE(run.report);
  const StepReport& r = *run.report;
  // MFU = the model's FLOPs per step (6·N + attention per token, every token once) / (step x ranks x peak).
  CHECK(r.model_flops_per_step == doctest::Approx(mb * b * 2048.0 * hs.model.flops_per_token(2048)));
  CHECK(r.mfu == doctest::Approx(r.model_flops_per_step / (r.step_time_s * t * hs.device.peak_flops)));
  CHECK(r.mfu > 0.2);
  CHECK(r.mfu < 0.6);
  // The TP communication inside compute ops is every rank's sum of it; explicit all-reduces run on the compute
  // stream here, so none of them is under compute: all of the TP communication is exposed.
  auto cost = cost_of(s);
  CHECK(r.tensor_parallel);
  CHECK(r.tp_comm_inside_s > 0);
  CHECK(r.tp_comm_exposed_s == doctest::Approx(tp_comm_of_rank(s, hw_cost(cost), 0)).epsilon(1e-6));
  CHECK(r.tp_comm_exposed_share == doctest::Approx(r.tp_comm_exposed_s / r.step_time_s));
  CHECK(r.ranks[2].tp_comm_inside_s == doctest::Approx(r.tp_comm_inside_s));
  const std::string text = format_report(r, hs);
  CHECK(text.find("exposed TP communication") != std::string::npos);
  nlohmann::ordered_json j = to_json(r);
  CHECK(j["tp_comm_exposed_s"].get<double>() == doctest::Approx(r.tp_comm_exposed_s));
  CHECK(j["ranks"][1]["tp_comm_inside_s"].get<double>() == doctest::Approx(r.tp_comm_inside_s));
}

TEST_CASE("TP: a schedule without TP has no TP figures, a TP op on a rank without a TP group is refused") {
  HardwareSetting hs = setting(gpt(4, 1024, 16, 1000), 1);
  hs.seq = 256;
  // The same 2-rank step with the group not named tp...: no TP group holds rank 0.
  Schedule s = tp_schedule(2, 2, 1, false, hs, "dp0");
  // simulate() never throws for a bad schedule (schedules/replay.h): the refusal is the result's error.
  SimResult refused;
  CHECK_NOTHROW(refused = simulate(s));
  CHECK_FALSE(refused.ok);
  const std::string m = refused.error;
  CHECK(m.find("rank 0: forward layer 0") != std::string::npos);
  CHECK(m.find("tp.sched:10") != std::string::npos);
  CHECK(m.find("W0<0/2>") != std::string::npos);
  CHECK(m.find("no TP group holds the rank") != std::string::npos);
  // Through simulate_hardware (sim, validate, gen --sim): the run's error, not an exception (the CLI said "internal
  // error", exit 2, for this invalid schedule: issue 38).
  const HardwareRun bad = simulate_hardware(s);
  CHECK_FALSE(bad.result.ok);
  CHECK(bad.result.error.find("no TP group holds the rank") != std::string::npos);
  {
    const auto dir = std::filesystem::temp_directory_path() / ("trainsim-tp-nogroup-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "tp.sched").string();
    std::ofstream(path) << print_schedule(s);
    const testing::CommandResult r = testing::run_trainsim("sim " + path, true);
    CHECK(r.exit_code == 1);
    CHECK(r.out.find("no TP group holds the rank") != std::string::npos);
    CHECK(r.out.find("internal error") == std::string::npos);
    std::filesystem::remove_all(dir);
  }
  // A TP group of another size than the slices' degree.
  Schedule three = tp_schedule(2, 2, 1, false, hs);
  three.header.world_size = 3;
  three.header.groups[0].push_back(2);
  three.ranks.emplace_back();
  CHECK_THROWS_WITH_AS(make_schedule_cost_model(three), doctest::Contains("its TP group 1 ('tp0') has 3 ranks"),
                       std::invalid_argument);
  // No TP: the report has no TP line and zero TP figures.
  Schedule plain = parse_schedule(
      "trainsim-schedule 1\nworld_size 1\nlayers 1\nmicrobatches 1\nrank 0\n  load -> W0 O0 A0{0}\n"
      "  forward L0 {0} : A0{0} W0 -> A1{0}\n  loss {0} : A1{0} -> dA1{0}\n"
      "  backward L0 {0} : A0{0} dA1{0} W0 -> dW0{0} dA0{0}\n  update L0 : dW0{0} W0 O0 -> W0@1 O0@1\n",
      "plain.sched");
  plain.header.cost_model = "hardware";
  plain.header.hardware = hs;
  HardwareRun run = simulate_hardware(plain);
  REQUIRE(run.report);
  CHECK(!run.report->tensor_parallel);
  CHECK(run.report->tp_comm_exposed_s == 0);
  CHECK(format_report(*run.report, hs).find("TP communication") == std::string::npos);
}

TEST_CASE("TP overlap: the backward's reductions run under the weight-grad GEMMs, and with full overlap every SP collective under its GEMM") {
  // A device without kernel tables (a GEMM takes 2MNK / peak exactly) on the ring network, GPT blocks (GeLU MLP,
  // fused QKV): per block and microbatch of T tokens on TP rank of t, the input groups' weight-grad GEMMs are
  // QKV 2·T·h·3h/t and fc 2·T·h·4h/t FLOPs, their forward and input-grad GEMMs the same; the output linears' (proj
  // of the attention, the MLP's second) 2·T·h·h/t and 2·T·4h·h/t. Each TP collective moves b·s·h bf16 activations.
  const int t = 4, b = 2, layers = 2, blocks = 4;
  const double h = 4096, T = b * 2048.0;
  HardwareSetting hs = setting(gpt(blocks, 4096, 32, 51200), b);
  hs.seq = 2048;
  DeviceSpec d;
  d.preset = "custom", d.peak_flops = 100e12, d.hbm_bandwidth = 1e18, d.memory_bytes = 1e15;
  hs.device = d;
  const NetworkSpec net = ring_network();
  const double S = T * h * 2;
  auto ring = [&](int steps, double share) { return steps * net.intra_latency_s + share * S / net.intra_bandwidth; };
  const double all_reduce = ring(2 * (t - 1), 2 * (t - 1.0) / t), half = ring(t - 1, (t - 1.0) / t);
  auto gemm = [&](double out_width) { return 2 * T * h * out_width / t / d.peak_flops; };  // h -> out over t
  const double qkv = gemm(3 * h), fc = gemm(4 * h), proj = gemm(h), fc2 = gemm(4 * h);
  auto exposed = [](double c, double g) { return std::max(0.0, c - g); };
  for (bool sp : {false, true})
    for (TpOverlap mode : {TpOverlap::None, TpOverlap::Backward, TpOverlap::Full}) {
      CAPTURE(sp);
      CAPTURE(tp_overlap_name(mode));
      hs.tp_overlap = mode;
      Schedule s = tp_schedule(t, layers, 1, sp, hs);
      auto cost = cost_of(s);
      // Per block: forward and backward, each collective exposed whole or less its GEMM (hardware/tp_comm.h).
      const bool full = mode == TpOverlap::Full && sp, backward = mode != TpOverlap::None;
      double per_block = 0;
      if (!sp) {
        per_block = 2 * all_reduce;  // forward: after proj and after fc2, under nothing
        per_block += backward ? exposed(all_reduce, qkv) + exposed(all_reduce, fc) : 2 * all_reduce;
      } else {
        // forward: gathers before QKV and fc, reduce-scatters after proj and fc2
        per_block += full ? exposed(half, qkv) + exposed(half, fc) + exposed(half, proj) + exposed(half, fc2) : 4 * half;
        // backward: the output grads' gathers (under proj's and fc2's input-grad GEMMs with full overlap), the
        // inputs' re-gathers under QKV's and fc's input-grad GEMMs, the input grads' reduce-scatters under their
        // weight-grad GEMMs
        per_block += full ? exposed(half, proj) + exposed(half, fc2) : 2 * half;
        per_block += backward ? exposed(half, qkv) + exposed(half, fc) : 2 * half;
        per_block += backward ? exposed(half, qkv) + exposed(half, fc) : 2 * half;
      }
      // The whole step of the rank, blocks and the embedding's and head's own (which this schedule's embedding
      // and head keep: the embedding's reduction and, with SP, its grad's gather under nothing; the head's as an
      // input group of V/t columns), is the blocks' plus those: compare the blocks' share through the difference of
      // two models that differ only in their blocks.
      HardwareSetting more = hs;
      more.model.blocks = 2 * blocks;
      Schedule s2 = tp_schedule(t, layers, 1, sp, more);
      auto cost2 = cost_of(s2);
      CHECK(tp_comm_of_rank(s2, hw_cost(cost2), 1) - tp_comm_of_rank(s, hw_cost(cost), 1) ==
            doctest::Approx(blocks * per_block).epsilon(1e-9));
      // Overlap never costs time, and full hides more than backward, which hides more than none.
      if (mode != TpOverlap::None) {
        HardwareSetting none = hs;
        none.tp_overlap = TpOverlap::None;
        Schedule s0 = tp_schedule(t, layers, 1, sp, none);
        auto cost0 = cost_of(s0);
        CHECK(tp_comm_of_rank(s, hw_cost(cost), 1) < tp_comm_of_rank(s0, hw_cost(cost0), 1));
      }
    }
}
