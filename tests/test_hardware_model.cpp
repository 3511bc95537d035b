// The hardware cost model against published figures: ZeRO model-state memory, Megatron-LM's FLOPs per
// iteration, Korthikanti et al.'s activation memory, the ring formulas and nccl-tests' bus bandwidth, and
// the presets' parameter counts.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "exec/model_config.h"
#include "hardware/comm.h"
#include "hardware/cost_model.h"
#include "hardware/memory.h"
#include "hardware/op_costs.h"

using namespace trainsim;
using namespace trainsim::hw;

namespace {

double round_to(double v, double unit) { return std::round(v / unit) * unit; }

// A GPT-3-style model as Narayanan et al. 2021 and Korthikanti et al. 2022 count it: multi-head attention, a
// GeLU MLP of 4h, dropout, bf16 activations.
ModelSpec gpt(int blocks, int hidden, int heads, int vocab) {
  ModelSpec m;
  m.preset = "custom", m.blocks = blocks, m.hidden = hidden, m.heads = heads, m.kv_heads = heads;
  m.ffn = 4 * hidden, m.vocab = vocab, m.seq = 2048, m.gated_ffn = false, m.dropout = true;
  m.learned_positions = true, m.layernorm = true;
  return m;
}

}  // namespace

TEST_CASE("ZeRO memory per GPU matches Rajbhandari et al. 2020, Figure 1") {
  // Figure 1: 7.5 B parameters, K = 12 (fp32 master weight, momentum, variance), N_d = 64 GPUs, fp16 weights
  // and grads: baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB per GPU (model states only).
  ModelSpec m;  // defaults: bf16 weights, fp32 grads, fp32 master + AdamW moments (4 + 8 = K)
  CHECK(m.master_bytes + m.optimizer_bytes == 12);
  CHECK(m.grad_bytes == 4);  // fp32, as Megatron-LM and torchtitan keep them under bf16 mixed precision
  m.grad_bytes = 2;          // the paper's fp16 grads
  const double psi = 7.5e9;
  CHECK(model_state_bytes(m, psi, 0, 64).total() == doctest::Approx(120e9));
  CHECK(round_to(model_state_bytes(m, psi, 1, 64).total(), 0.1e9) == doctest::Approx(31.4e9));
  CHECK(round_to(model_state_bytes(m, psi, 2, 64).total(), 0.1e9) == doctest::Approx(16.6e9));
  CHECK(round_to(model_state_bytes(m, psi, 3, 64).total(), 0.1e9) == doctest::Approx(1.9e9));
}

TEST_CASE("the cost model's tensor bytes shard as ZeRO's stages say") {
  HardwareSetting s;
  s.model = model_preset("llama3-8b");
  s.device = device_preset("h100-sxm");
  s.network = network_preset("nvlink8-ib400");
  s.seq = 8192;
  TensorSizes sizes(s, 4);
  const double p = sizes.layer_parameters(1);
  CHECK(sizes.wire_bytes(weight_tensor(1)) == doctest::Approx(2 * p));
  CHECK(sizes.wire_bytes(opt_state_tensor(1, IdSet{3}, 8)) == doctest::Approx(12 * p / 8));
  CHECK(sizes.wire_bytes(weight_grad_tensor(1, IdSet{0}, IdSet::range(0, 4), 8)) == doctest::Approx(4 * p / 2));  // fp32
  double total = 0;
  for (int l = 0; l < 4; ++l) total += sizes.layer_parameters(l);
  CHECK(total == doctest::Approx(s.model.parameters()));
}

TEST_CASE("FLOPs per iteration match Narayanan et al. 2021, equation 3, for GPT-3 175B") {
  // GPT-3 175B (Narayanan et al. 2021, Table 1 / §5.1): l = 96, h = 12288, 96 heads, V = 51200, s = 2048,
  // global batch B = 1536. Equation 3 (with activation recomputation, the blocks' forward runs twice):
  // F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)). Without recomputation the same derivation (appendix) has three
  // passes over the blocks instead of four and the same logit layer: 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)).
  const double l = 96, h = 12288, V = 51200, s = 2048, B = 1536;
  HardwareSetting hs;
  hs.model = gpt(96, 12288, 96, 51200);
  hs.seq = 2048;
  hs.microbatch_size = 1;
  auto layers = partition_layers(hs.model, 8);
  auto iteration = [&](Recompute r, bool split) {
    hs.recompute = r;
    double f = 0;
    for (const auto& layer : layers) {
      f += compute_work(hs, layer, OpKind::Forward, 1536).flops();
      if (split) {
        f += compute_work(hs, layer, OpKind::BackwardInput, 1536).flops();
        f += compute_work(hs, layer, OpKind::BackwardWeight, 1536).flops();
      } else {
        f += compute_work(hs, layer, OpKind::Backward, 1536).flops();
      }
    }
    return f;
  };
  const double eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  const double no_recompute = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  CHECK(iteration(Recompute::Full, false) == doctest::Approx(eq3).epsilon(1e-12));
  CHECK(iteration(Recompute::Full, true) == doctest::Approx(eq3).epsilon(1e-12));
  CHECK(iteration(Recompute::None, false) == doctest::Approx(no_recompute).epsilon(1e-12));
  CHECK(iteration(Recompute::None, true) == doctest::Approx(no_recompute).epsilon(1e-12));
  // MFU counts the model FLOPs without recomputation, 6·N + 12·l·h·s per token: the same as the above plus
  // 6 x the norms' parameters (two LayerNorms of 2h per block and the final one), which equation 3 leaves out.
  CHECK(hs.model.flops_per_token(2048) * B * s ==
        doctest::Approx(no_recompute + 6 * B * s * (l * 4 * h + 2 * h)).epsilon(1e-12));
}

TEST_CASE("activation memory per block matches Korthikanti et al. 2022, Table 2") {
  // Table 2 (bytes per transformer layer; s sequence, b microbatch, h hidden, a heads, t tensor-parallel):
  // no parallelism sbh(34 + 5as/h); tensor parallel sbh(10 + 24/t + 5as/(ht)); + sequence parallel
  // sbh(34/t + 5as/(ht)); tensor parallel + selective recomputation sbh(10 + 24/t); + sequence parallel
  // sbh(34/t); full recomputation 2sbh. Evaluated for their Table 3 models (a, h; s = 2048, t = 8).
  struct Config {
    int a, h;
  };
  for (Config c : {Config{64, 6144}, Config{96, 12288}, Config{128, 20480}, Config{160, 25600}}) {
    CAPTURE(c.h);
    ModelSpec m = gpt(1, c.h, c.a, 51200);
    const double s = 2048, b = 1, h = c.h, a = c.a, t = 8, sbh = s * b * h;
    CHECK(activation_bytes_per_block(m, s, b, Recompute::None) == doctest::Approx(sbh * (34 + 5 * a * s / h)));
    CHECK(activation_bytes_per_block(m, s, b, Recompute::None, 8) ==
          doctest::Approx(sbh * (10 + 24 / t + 5 * a * s / (h * t))));
    CHECK(activation_bytes_per_block(m, s, b, Recompute::None, 8, true) ==
          doctest::Approx(sbh * (34 / t + 5 * a * s / (h * t))));
    CHECK(activation_bytes_per_block(m, s, b, Recompute::Selective, 8) == doctest::Approx(sbh * (10 + 24 / t)));
    CHECK(activation_bytes_per_block(m, s, b, Recompute::Selective, 8, true) == doctest::Approx(sbh * 34 / t));
    CHECK(activation_bytes_per_block(m, s, b, Recompute::Full, 8) == doctest::Approx(2 * sbh));
  }
}

TEST_CASE("ring collectives follow the alpha-beta formulas and nccl-tests' bus bandwidth") {
  const Link link{3.4e-6, 450e9};
  const double S = 1 << 30;
  for (int n : {2, 8, 64}) {
    CAPTURE(n);
    // DESIGN §2: (n-1)·alpha + ((n-1)/n)·S/B; all-reduce twice that.
    const double one = (n - 1) * link.latency_s + (n - 1.0) / n * S / link.bandwidth;
    CHECK(collective_seconds(Collective::AllGather, n, S, link) == doctest::Approx(one));
    CHECK(collective_seconds(Collective::ReduceScatter, n, S, link) == doctest::Approx(one));
    CHECK(collective_seconds(Collective::AllReduce, n, S, link) == doctest::Approx(2 * one));
    // nccl-tests (doc/PERFORMANCE.md): busbw = algbw·2(n-1)/n for all-reduce, algbw·(n-1)/n for all-gather
    // and reduce-scatter; without latency a ring's bus bandwidth is the link's.
    const Link free{0, 450e9};
    for (Collective c : {Collective::AllGather, Collective::ReduceScatter, Collective::AllReduce})
      CHECK(bus_bandwidth(c, n, S, collective_seconds(c, n, S, free)) == doctest::Approx(450e9));
    CHECK(bus_bandwidth(Collective::AllReduce, n, S, 1.0) == doctest::Approx(S * 2 * (n - 1.0) / n));
  }
  CHECK(p2p_seconds(S, link) == doctest::Approx(3.4e-6 + S / 450e9));
  CHECK(collective_seconds(Collective::AllReduce, 1, S, link) == 0);
}

TEST_CASE("NCCL's algorithm choice: ring, tree and NVLS by message size and node count") {
  // hardware/comm.h: NCCL's tuning model (src/graph/tuning.cc) for the Simple protocol, with nvlink8-ib400's
  // numbers written out: NVLink bus 370.8 GB/s, NIC 50 GB/s, NVLS 480 GB/s; latencies 3.4 us (ring step, NVLink),
  // 14 us (ring step, network), 8.4 us (ring call), 28 us (tree hop, tree level), 23 us (NVLS call).
  const NetworkSpec net = network_preset("nvlink8-ib400");
  const double nvlink = 370.8e9, nic = 50e9, nvls = 480e9, S = 256e6;
  auto shape = [&](int first, int count, int stride) {
    std::vector<int> r;
    for (int i = 0; i < count; ++i) r.push_back(first + i * stride);
    return net.shape_of(r);
  };
  // One node, 8 ranks: all-reduce over NVLS (2·7/8·S/480 GB/s + 23 us beats the ring's 2·7/8·S/370.8 GB/s).
  const GroupShape node = shape(0, 8, 1);
  CHECK(node.nodes == 1);
  CHECK(node.ranks_per_node == 8);
  CollectiveTime ar = nccl_collective(Collective::AllReduce, node, S, net);
  CHECK(ar.algorithm == NcclAlgorithm::Nvls);
  CHECK(ar.seconds == doctest::Approx(23e-6 + 2 * 7.0 / 8 * S / nvls));
  // ... the all-gather has no NVLS: the ring.
  CollectiveTime ag = nccl_collective(Collective::AllGather, node, S, net);
  CHECK(ag.algorithm == NcclAlgorithm::Ring);
  CHECK(ag.seconds == doctest::Approx(8.4e-6 + 7 * 3.4e-6 + 7.0 / 8 * S / nvlink));
  // Without NVLink SHARP (the A100 cluster preset): the ring, at 240 GB/s.
  const NetworkSpec a100 = network_preset("nvlink8-ib200");
  CHECK(nccl_collective(Collective::AllReduce, node, S, a100).algorithm == NcclAlgorithm::Ring);
  CHECK(nccl_collective(Collective::AllReduce, node, S, a100).seconds ==
        doctest::Approx(8.4e-6 + 14 * 3.4e-6 + 2 * 7.0 / 8 * S / 240e9));
  // Rail-optimised: 4 ranks of each of 4 nodes use their 4 NICs (200 GB/s), not one.
  const GroupShape four = shape(0, 16, 1);
  CHECK(ring_bus_bandwidth(net.shape_of({0, 1, 2, 3, 8, 9, 10, 11}), net) == doctest::Approx(4 * nic));
  CHECK(ring_bus_bandwidth(four, net) == doctest::Approx(nvlink));  // 8 NICs (400 GB/s), NVLink the cap
  // One rank per node (a data-parallel group under TP 8): one NIC each. 64 nodes, all-reduce: the ring's
  // 2·63 steps of 14 us make the tree faster for small messages, the ring's bandwidth wins for large ones.
  const GroupShape dp = shape(0, 64, 8);
  CHECK(dp.nodes == 64);
  CHECK(dp.ranks_per_node == 1);
  CHECK(ring_bus_bandwidth(dp, net) == doctest::Approx(nic));
  const double ring_latency = 8.4e-6 + 2 * 63 * 14e-6, tree_latency = 2 * (0 * 28e-6 + 6 * 28e-6);
  const double small = 4e6, large = 4e9;
  CollectiveTime t_small = nccl_collective(Collective::AllReduce, dp, small, net);
  CHECK(t_small.algorithm == NcclAlgorithm::Tree);
  CHECK(t_small.seconds == doctest::Approx(tree_latency + small / (0.5 * 0.92 * nic)));
  CollectiveTime t_large = nccl_collective(Collective::AllReduce, dp, large, net);
  CHECK(t_large.algorithm == NcclAlgorithm::Ring);
  CHECK(t_large.seconds == doctest::Approx(ring_latency + 2 * 63.0 / 64 * large / nic));
  // One rank: nothing to do.
  CHECK(nccl_collective(Collective::AllReduce, shape(0, 1, 1), S, net).seconds == 0);
  // The cpu network is one node with no fixed costs: the ring formulas of DESIGN §2, as before.
  const NetworkSpec cpu = network_preset("cpu");
  const GroupShape two = cpu.shape_of({0, 1});
  CHECK(nccl_collective(Collective::AllReduce, two, S, cpu).seconds ==
        doctest::Approx(collective_seconds(Collective::AllReduce, 2, S, {0, cpu.intra_bandwidth})));
  CHECK(nccl_collective(Collective::Broadcast, two, S, cpu).seconds ==
        doctest::Approx(collective_seconds(Collective::Broadcast, 2, S, {0, cpu.intra_bandwidth})));
}

TEST_CASE("the cost model times collectives and sends from where the group's ranks sit") {
  HardwareSetting s;
  s.model = model_preset("llama3-8b");
  s.device = device_preset("h100-sxm");
  s.network = network_preset("nvlink8-ib400");
  s.seq = 8192;
  std::vector<std::vector<int>> groups(3);
  for (int r = 0; r < 16; ++r) groups[0].push_back(r);
  groups[1] = {0, 1, 2, 3, 4, 5, 6, 7};
  groups[2] = {0, 8};
  HardwareCostModel cost(s, 4, 16, groups);
  const double w = cost.sizes().wire_bytes(weight_tensor(1));
  // nvlink8-ib400 (hardware/network.cpp): NVLink bus bandwidth 18 x 20.6 GB/s, 3.4 us per ring step inside a
  // node, 14 us per step between nodes, 8.4 us per ring call, one 50 GB/s NIC per GPU.
  const double nvlink = 18 * 20.6e9, nic = 50e9;
  Op ag;
  ag.kind = OpKind::AllGather, ag.layer = 1, ag.group = 1;
  ag.reads = {weight_tensor(1, IdSet{0}, 8)};
  ag.writes = {weight_tensor(1, IdSet::range(0, 8), 8)};
  // Eight ranks of one node: a ring over NVLink, 7 steps.
  CHECK(cost.seconds_of(ag, 8) == doctest::Approx(8.4e-6 + 7 * 3.4e-6 + 7.0 / 8 * w / nvlink));
  // One rank on each of two nodes: one step across, over the rank's own NIC.
  ag.group = 2;
  ag.reads = {weight_tensor(1, IdSet{0}, 2)};
  ag.writes = {weight_tensor(1, IdSet::range(0, 2), 2)};
  CHECK(cost.seconds_of(ag, 2) == doctest::Approx(8.4e-6 + 14e-6 + 0.5 * w / nic));
  // Sixteen ranks on two nodes: every NIC of each node (8 x 50 GB/s), capped by NVLink: 7 steps of 8 cross
  // nothing, 1 crosses, 15 in all.
  ag.group = 0;
  ag.reads = {weight_tensor(1, IdSet{0}, 16)};
  ag.writes = {weight_tensor(1, IdSet::range(0, 16), 16)};
  CHECK(cost.seconds_of(ag, 16) ==
        doctest::Approx(8.4e-6 + 14 * 3.4e-6 + 1 * 14e-6 + 15.0 / 16 * w / std::min(nvlink, 8 * nic)));
  Op send;
  send.kind = OpKind::Send, send.rank = 0, send.peer = 1;
  send.reads = {activation_tensor(2, IdSet{0})};
  const double a = 8192.0 * 4096 * 2;  // one sequence of hidden states in bf16
  CHECK(cost.seconds_of(send, 1) == doctest::Approx(3.4e-6 + a / nvlink));
  send.peer = 9;
  CHECK(cost.seconds_of(send, 1) == doctest::Approx(14e-6 + a / nic));
  Op recv = send;
  recv.kind = OpKind::Recv;
  CHECK(cost.seconds_of(recv, 1) == 0);  // the send carries the transfer
  // A device's dispatch time goes on every timed op (compute and communication), not on load or free.
  HardwareSetting d = s;
  d.device.efficiency.dispatch_s = 1e-3;
  HardwareCostModel with(d, 4, 16, groups);
  Op fwd;
  fwd.kind = OpKind::Forward, fwd.layer = 1, fwd.batches = IdSet{0};
  CHECK(cost.seconds_of(fwd, 1) > 0);
  for (const Op& op : {fwd, send, recv, ag}) {
    CAPTURE(op_name(op.kind));
    CHECK(with.seconds_of(op, 2) == doctest::Approx(cost.seconds_of(op, 2) + 1e-3));
  }
  Op load;
  load.kind = OpKind::Load, load.writes = {weight_tensor(1)};
  CHECK(with.seconds_of(load, 1) == 0);
}

TEST_CASE("model presets: published dimensions and the executor's own models") {
  // Llama 3 8B: "8.03B" parameters (Meta's model card for Llama-3.1-8B) from Table 3's dimensions.
  CHECK(round_to(model_preset("llama3-8b").parameters(), 1e7) == doctest::Approx(8.03e9));
  CHECK(round_to(model_preset("llama3-70b").parameters(), 1e9) == doctest::Approx(71e9));  // "70.6B", model card
  // GPT-2 small: nanoGPT reports 123.65M parameters without the position embedding (model.py
  // get_num_params(non_embedding=True)), 124M with it.
  ModelSpec g = model_preset("gpt2-124m");
  CHECK(round_to(g.parameters() - g.seq * g.hidden, 1e4) == doctest::Approx(123.65e6));
  // The executor's presets are the same models as exec/model_config.h's.
  for (const char* name : {"tiny", "small"}) {
    CAPTURE(name);
    ModelSpec m = model_preset(name);
    exec::ModelConfig e = exec::preset(name);
    CHECK(m.blocks == e.blocks);
    CHECK(m.hidden == e.dim);
    CHECK(m.heads == e.heads);
    CHECK(m.ffn == e.ffn);
    CHECK(m.vocab == e.vocab);
    CHECK(m.seq == e.seq);
    CHECK(m.parameters() == doctest::Approx(static_cast<double>(e.parameters())));
    CHECK(m.flops_per_token(m.seq) == doctest::Approx(e.flops_per_token()));
  }
}

TEST_CASE("JSON descriptions: overrides, and errors naming the file and the field") {
  ModelSpec m = model_from_json(nlohmann::json{{"preset", "llama3-8b"}, {"blocks", 16}}, "m.json");
  CHECK(m.blocks == 16);
  CHECK(m.hidden == 4096);
  DeviceSpec d = device_from_json(nlohmann::json::parse(R"({"preset":"h100-sxm","efficiency":{"forward":0.7}})"), "d.json");
  CHECK(d.efficiency.forward == 0.7);
  CHECK(d.efficiency.backward_input == 794.5e12 / 989.4e12);  // the preset's (the MAMF of an H100 SXM)
  auto message = [](auto f) {
    try {
      f();
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([] { model_from_json(nlohmann::json{{"hiden", 4}}, "m.json"); }).starts_with("m.json: unknown field 'hiden'"));
  CHECK(message([] { model_from_json(nlohmann::json{{"preset", "llama3-8b"}, {"heads", "x"}}, "m.json"); }) ==
        "m.json: field 'heads': expected an integer, got \"x\"");
  CHECK(message([] { model_from_json(nlohmann::json{{"preset", "llama3-8b"}, {"heads", 5}}, "m.json"); }) ==
        "m.json: field 'heads': hidden (4096) must be a multiple of heads (5)");
  CHECK(message([] { device_from_json(nlohmann::json::parse(R"({"efficiency":{"forward":2}})"), "d.json"); })
            .starts_with("d.json: field 'peak_flops'"));
  CHECK(message([] { device_from_json(nlohmann::json::parse(R"({"preset":"cpu","efficiency":{"forward":2}})"), "d.json"); }) ==
        "d.json: field 'efficiency.forward': must be in (0, 1] (a fraction of the peak), got 2");
  CHECK(message([] { network_from_json(nlohmann::json{{"preset", "nvlink9"}}, "n.json"); })
            .starts_with("n.json: field 'preset': unknown network 'nvlink9'"));
}

TEST_CASE("memory inside ops: the loss's fp32 log-softmax and its grad, full recomputation's block") {
  HardwareSetting s;
  s.model = model_preset("llama3-8b");
  s.device = device_preset("h100-sxm");
  s.network = network_preset("nvlink8-ib400");
  s.seq = 8192, s.microbatch_size = 2;
  const int L = 4;  // embedding with blocks, two layers of blocks, blocks with the head: 32 blocks
  TensorSizes sizes(s, L);
  const double tokens = 2.0 * 8192;
  Op loss;
  loss.kind = OpKind::Loss, loss.layer = L - 1, loss.batches = IdSet{0};
  loss.reads = {activation_tensor(L, IdSet{0})};
  loss.writes = {activation_grad_tensor(L, IdSet{0})};
  // The logits are fp32 (4·V per token); the log-softmax and its grad, fp32 too, twice that.
  CHECK(sizes.wire_bytes(loss.reads[0]) == doctest::Approx(tokens * 4 * s.model.vocab));
  CHECK(sizes.workspace_bytes(loss) == doctest::Approx(tokens * 8 * s.model.vocab));
  // A vocabulary-parallel head's slice of the logits: 1/t of it.
  Op sliced = loss;
  sliced.reads = {tp_slice(activation_tensor(L, IdSet{0}), 1, 4)};
  CHECK(sizes.workspace_bytes(sliced, {4, false}) == doctest::Approx(tokens * 8 * s.model.vocab / 4));
  // A backward holds a recomputed block only under full recomputation: the block's activations less its input.
  Op backward;
  backward.kind = OpKind::Backward, backward.layer = 1, backward.batches = IdSet{0};
  CHECK(sizes.workspace_bytes(backward) == 0);
  s.recompute = Recompute::Full;
  TensorSizes full(s, L);
  const double block = activation_bytes_per_block(s.model, 8192, 2, Recompute::None, 1, false, Attention::Flash);
  CHECK(full.workspace_bytes(backward) == doctest::Approx(block - 2 * tokens * s.model.hidden));
  backward.kind = OpKind::BackwardWeight;  // (no recomputation in the weight-grad half)
  CHECK(full.workspace_bytes(backward) == 0);
  Op forward = backward;
  forward.kind = OpKind::Forward;
  CHECK(full.workspace_bytes(forward) == 0);
}
