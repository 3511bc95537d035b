// Calibration from a user's own GPU run: PyTorch profiler (Kineto) traces, written here in Kineto's format
// (libkineto/src/output_json.cpp: complete events with "cat" kernel or cpu_op, "ts"/"dur" in microseconds with
// three decimals, "args" with "External id", "Input Dims", "Input type", and on NCCL kernels "Collective name",
// "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name", "Process Group Ranks", "Seq"),
// with kernel times made from a known efficiency table and network; the fit must find them again.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "hardware/comm.h"
#include "schedules/calibration.h"
#include "interop/kineto_trace.h"

using namespace trainsim;
using namespace trainsim::testing;
using nlohmann::json;

namespace {

// The truth the kernels are timed with.
constexpr double kForward = 0.62, kBackward = 0.48, kAttention = 0.41, kMemory = 0.83, kFloor = 4e-6;
constexpr double kIntraLatency = 5e-6, kIntraBandwidth = 300e9, kInterLatency = 20e-6, kInterBandwidth = 40e9;

const hw::DeviceSpec& h100() {
  static const hw::DeviceSpec d = hw::device_preset("h100-sxm");
  return d;
}

// "us.fractional" with nanoseconds, as Kineto writes ts and dur.
double us(double seconds) { return std::round(seconds * 1e9) / 1e3; }

struct TraceWriter {
  json events = json::array();
  double clock = 1000;  // microseconds
  long long next_id = 1;

  // A CPU op and its kernels (split into `parts` kernels of equal time), on thread `tid`.
  long long op(const std::string& name, json dims, json types, double seconds, int tid = 1, int parts = 1) {
    const long long id = next_id++;
    events.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", name}, {"pid", 1234}, {"tid", tid}, {"ts", clock},
                      {"dur", 5.0}, {"args", {{"External id", id}, {"Input Dims", dims}, {"Input type", types},
                                              {"Ev Idx", id}}}});
    for (int k = 0; k < parts; ++k) {
      events.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "sm90_xmma_gemm_bf16bf16_bf16f32"}, {"pid", 0},
                        {"tid", 7}, {"ts", clock + 10}, {"dur", us(seconds / parts)},
                        {"args", {{"External id", id}, {"device", 0}, {"stream", 7}, {"correlation", 5000 + id}}}});
      clock += 20 + seconds * 1e6;
    }
    return id;
  }
  // An autograd engine function around what follows (the backward), on thread `tid`.
  void backward_span(double from_us, double to_us, int tid) {
    events.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "autograd::engine::evaluate_function: MmBackward0"},
                      {"pid", 1234}, {"tid", tid}, {"ts", from_us}, {"dur", to_us - from_us},
                      {"args", {{"External id", next_id++}}}});
  }
  void nccl(const std::string& collective, long long in, long long out, int group, const std::string& ranks,
            const std::string& pg, long long seq, double seconds) {
    events.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"},
                      {"pid", 0}, {"tid", 20}, {"ts", clock}, {"dur", us(seconds)},
                      {"args", {{"External id", next_id++}, {"device", 0}, {"stream", 20},
                                {"Collective name", collective}, {"In msg nelems", in}, {"Out msg nelems", out},
                                {"Group size", group}, {"dtype", "BFloat16"}, {"Process Group Name", pg},
                                {"Process Group Ranks", ranks}, {"Seq", seq}}}});
    clock += 20 + seconds * 1e6;
  }
  std::string text() const {
    json j = {{"schemaVersion", 1},
              {"deviceProperties", json::array({{{"id", 0}, {"name", "NVIDIA H100 80GB HBM3"}, {"totalGlobalMem", 85031714816}}})},
              {"distributedInfo", {{"backend", "nccl"}, {"rank", 0}, {"world_size", 16}}},
              {"traceEvents", events},
              {"traceName", "rank0.json"}};
    return j.dump(1);
  }
};

const json kBf16x2 = json::array({"c10::BFloat16", "c10::BFloat16"});

double gemm_seconds(double m, double n, double k, double eff) { return 2 * m * n * k / (h100().peak_flops * eff); }

// One rank's trace: forward and backward GEMMs, attention, memory-bound ops, and collectives.
TraceWriter rank_trace(double comm_scale) {
  TraceWriter w;
  // Forward GEMMs: mm, addmm, bmm; one split into two kernels.
  w.op("aten::mm", json::array({{8192, 4096}, {4096, 4096}}), kBf16x2, gemm_seconds(8192, 4096, 4096, kForward));
  w.op("aten::addmm", json::array({{14336}, {8192, 4096}, {4096, 14336}}),
       json::array({"c10::BFloat16", "c10::BFloat16", "c10::BFloat16"}), gemm_seconds(8192, 14336, 4096, kForward), 1, 2);
  w.op("aten::bmm", json::array({{32, 2048, 128}, {32, 128, 2048}}), kBf16x2, 32 * gemm_seconds(2048, 2048, 128, kForward));
  // An fp32 GEMM (TF32, not at the bf16 peak): left out.
  w.op("aten::mm", json::array({{1024, 1024}, {1024, 1024}}), json::array({"float", "float"}), 1e-3);
  // Attention, forward [B,H,S,D] and backward (2x the FLOPs).
  const double attn = 4.0 * 1 * 32 * 4096 * 4096 * 128;
  w.op("aten::_scaled_dot_product_flash_attention", json::array({{1, 32, 4096, 128}, {1, 32, 4096, 128}, {1, 32, 4096, 128}, {}}),
       json::array({"c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "double"}), attn / (h100().peak_flops * kAttention));
  // Memory-bound: two adds of different sizes (2 inputs + the output).
  for (double n : {8192.0 * 4096, 4.0 * 8192 * 4096})
    w.op("aten::add", json::array({{static_cast<long long>(n)}, {static_cast<long long>(n)}, {}}),
         json::array({"c10::BFloat16", "c10::BFloat16", "Scalar"}), 3 * n * 2 / (h100().hbm_bandwidth * kMemory) + kFloor);
  // The backward, on its own thread inside an autograd function.
  const double from = w.clock;
  w.clock += 1;
  w.op("aten::mm", json::array({{8192, 4096}, {4096, 4096}}), kBf16x2, gemm_seconds(8192, 4096, 4096, kBackward), 2);
  w.op("aten::mm", json::array({{4096, 8192}, {8192, 4096}}), kBf16x2, gemm_seconds(4096, 4096, 8192, kBackward), 2);
  w.op("aten::_scaled_dot_product_flash_attention_backward",
       json::array({{1, 32, 4096, 128}, {1, 32, 4096, 128}, {1, 32, 4096, 128}, {1, 32, 4096, 128}}),
       json::array({"c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "c10::BFloat16"}),
       2 * attn / (h100().peak_flops * kAttention), 2);
  w.backward_span(from, w.clock, 2);
  // Collectives: all-reduces inside a node (8 ranks), all-gathers across nodes (4 ranks, one per node), a send.
  long long seq = 0;
  for (double elems : {1 << 20, 1 << 24, 1 << 26}) {
    const double S = elems * 2;
    w.nccl("allreduce", static_cast<long long>(elems), static_cast<long long>(elems), 8, "[0, 1, 2, 3, 4, 5, 6, 7]", "0", seq++,
           comm_scale * hw::collective_seconds(hw::Collective::AllReduce, 8, S, {kIntraLatency, kIntraBandwidth}));
    w.nccl("_allgather_base", static_cast<long long>(elems / 4), static_cast<long long>(elems), 4, "[0, 8, 16, 24]", "1", seq++,
           comm_scale * hw::collective_seconds(hw::Collective::AllGather, 4, S, {kInterLatency, kInterBandwidth}));
  }
  w.nccl("recv", 1 << 20, 1 << 20, 2, "[0, 1]", "2", seq++, 1.0);  // a receive waits for its send: left out
  return w;
}

std::string write(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("kineto: a profiler trace's kernels become GEMM, attention, memory-bound and collective records") {
  auto dir = fresh_dir("kineto-records");
  const std::string t = write(dir, "rank0.json", rank_trace(1.0).text());
  CHECK(looks_like_kineto_file(t));
  const KinetoRecords r = read_kineto_traces({t}, 8);
  int fwd = 0, bwd = 0, attn = 0, mem = 0;
  for (const MeasuredWork& w : r.work) {
    fwd += w.cls == MeasuredWork::Class::ForwardGemm;
    bwd += w.cls == MeasuredWork::Class::BackwardGemm;
    attn += w.cls == MeasuredWork::Class::Attention;
    mem += w.cls == MeasuredWork::Class::MemoryBound;
  }
  CHECK(fwd == 3);   // mm, addmm (its two kernels one record), bmm
  CHECK(bwd == 2);   // the two mms inside the autograd function
  CHECK(attn == 2);  // flash attention forward and backward
  CHECK(mem == 2);
  for (const MeasuredWork& w : r.work)
    if (w.op == "aten::bmm") CHECK(w.shape == std::vector<long long>{32, 2048, 2048, 128});
  CHECK(r.comm.size() == 6);
  CHECK(r.left_out == 2);  // the fp32 GEMM and the receive
  CHECK(r.kernels == 18);
  int inter = 0;
  for (const MeasuredComm& c : r.comm) inter += c.inter_node;
  CHECK(inter == 3);
}

TEST_CASE("kineto: calibration finds the efficiency table and the network the kernels were timed with") {
  auto dir = fresh_dir("kineto-fit");
  // Two ranks: rank 1's collectives took longer (they waited for rank 0); each call counts its shortest.
  const std::string r0 = write(dir, "rank0.json", rank_trace(1.0).text());
  const std::string r1 = write(dir, "rank1.json", rank_trace(1.7).text());
  hw::HardwareSetting base;
  base.model = hw::model_preset("llama3-8b");
  base.device = h100();
  base.network = hw::network_preset("nvlink8-ib400");
  const Calibration c = calibrate_kineto({r0, r1}, base);
  const hw::EfficiencyTable& e = c.device.efficiency;
  // Kineto's nanosecond times round each kernel: 1e-5 relative.
  CHECK(e.forward == doctest::Approx(kForward).epsilon(1e-5));
  CHECK(e.backward_input == doctest::Approx(kBackward).epsilon(1e-5));
  CHECK(e.backward_weight == doctest::Approx(kBackward).epsilon(1e-5));
  CHECK(e.attention == doctest::Approx(kAttention).epsilon(1e-5));
  CHECK(e.memory == doctest::Approx(kMemory).epsilon(1e-5));
  CHECK(c.kernel_floor_s == doctest::Approx(kFloor).epsilon(1e-3));
  CHECK(e.op_overhead_s == h100().efficiency.op_overhead_s);  // per schedule op: not a kernel's floor
  CHECK(c.network_fitted);
  CHECK(c.network.intra_latency_s == doctest::Approx(kIntraLatency).epsilon(1e-4));
  CHECK(c.network.intra_bandwidth == doctest::Approx(kIntraBandwidth).epsilon(1e-5));
  CHECK(c.network.inter_latency_s == doctest::Approx(kInterLatency).epsilon(1e-4));
  CHECK(c.network.inter_bandwidth == doctest::Approx(kInterBandwidth).epsilon(1e-5));
  CHECK(c.comm_ops == 6);  // the two ranks' records of a call are one
  // The same traces, the same numbers.
  CHECK(calibrate_kineto({r0, r1}, base).device == c.device);
}

TEST_CASE("kineto: the fit reads records, whatever made them") {
  // fit_device on records alone (the function a table by shape will be fitted with).
  std::vector<MeasuredWork> work;
  MeasuredWork g;
  g.cls = MeasuredWork::Class::ForwardGemm, g.op = "aten::mm", g.shape = {1, 4096, 4096, 4096};
  g.flops = 2.0 * 4096 * 4096 * 4096, g.seconds = g.flops / (h100().peak_flops * 0.7);
  work.push_back(g);
  const hw::DeviceSpec d = fit_device(work, h100());
  CHECK(d.efficiency.forward == doctest::Approx(0.7).epsilon(1e-12));
  // No record: the base's, with its sustained fraction folded in (a measured efficiency is what a run sustained).
  CHECK(d.efficiency.backward_input ==
        doctest::Approx(h100().efficiency.backward_input * h100().efficiency.sustained).epsilon(1e-12));
  CHECK(d.efficiency.sustained == 1);
  CHECK(d.fitted_to == "calibrate");
  CHECK(d.efficiency.memory == h100().efficiency.memory);
}

TEST_CASE("trainsim calibrate on a PyTorch profiler trace") {
  auto dir = fresh_dir("kineto-cli");
  const std::string t = write(dir, "rank0.json", rank_trace(1.0).text());
  const std::string out = (dir / "h100-fit.json").string(), net = (dir / "net.json").string();
  CommandResult r = run_trainsim("calibrate " + t + " --device h100-sxm -o " + out + " --network-output " + net, true);
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("network nvlink8-ib400 (8 GPUs per node)") != std::string::npos);
  const json d = json::parse(slurp(out));
  CHECK(d["preset"] == "h100-sxm");
  CHECK(d["efficiency"]["forward"].get<double>() == doctest::Approx(kForward).epsilon(1e-5));
  CHECK(d["calibration"]["source"] == "pytorch-profiler");
  CHECK(json::parse(slurp(net))["inter_bandwidth"].get<double>() == doctest::Approx(kInterBandwidth).epsilon(1e-5));
  // The fitted device drives the hardware model (four stages and full recomputation: with fewer, Llama 3 8B does not
  // fit in the H100's memory, which gen --sim reports as a failure).
  const CommandResult sim = run_trainsim("gen 1f1b --stages 4 --microbatches 4 --model llama3-8b --recompute full --device " +
                                         out + " --network " + net + " --sim --json");
  CHECK(sim.exit_code == 0);
  CHECK(json::parse(sim.out)["device_fitted_to"] == "calibrate");
  // Without --device: which GPU ran it is needed.
  r = run_trainsim("calibrate " + t + " -o " + out, true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("is a PyTorch profiler trace: give --device") != std::string::npos);
  // A malformed event is named.
  const std::string bad = write(dir, "bad.json", R"({"schemaVersion": 1, "traceEvents": [
  {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0}
]})");
  r = run_trainsim("calibrate " + bad + " --device h100-sxm -o " + out, true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("bad.json: traceEvents[0]: a complete event needs numbers 'ts' and 'dur'") != std::string::npos);
  // Profiler and replay traces are not mixed.
  const std::string replay = write(dir, "replay.json", R"({"traceEvents": [], "otherData": {"layers": 2}})");
  r = run_trainsim("calibrate " + t + " " + replay + " --device h100-sxm -o " + out, true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("not both") != std::string::npos);
}

TEST_CASE("kineto: an excerpt as the profiler writes it") {
  // Events as torch.profiler's export_chrome_trace writes them (a linear layer's addmm and its kernel).
  auto dir = fresh_dir("kineto-excerpt");
  const std::string t = write(dir, "excerpt.json", R"({
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85031714816}],
  "traceEvents": [
  {
    "ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 4172, "tid": 4172,
    "ts": 1719000000123.456, "dur": 31.207,
    "args": {
      "External id": 77, "Record function id": 0, "Ev Idx": 76,
      "Input Dims": [[4096], [2048, 1024], [1024, 4096], [], []],
      "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"],
      "Input Strides": [[1], [1024, 1], [1, 1024], [], []],
      "Concrete Inputs": ["", "", "", "1", "1"]
    }
  },
  {
    "ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "pid": 0, "tid": 7,
    "ts": 1719000000160.112, "dur": 46.303,
    "args": {
      "External id": 77, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 1234,
      "registers per thread": 168, "shared memory": 213248, "blocks per SM": 0.5, "warps per SM": 4.0,
      "grid": [32, 8, 1], "block": [384, 1, 1], "est. achieved occupancy %": 6
    }
  }
  ]
})");
  const KinetoRecords r = read_kineto_traces({t}, 8);
  REQUIRE(r.work.size() == 1);
  CHECK(r.work[0].cls == MeasuredWork::Class::ForwardGemm);
  CHECK(r.work[0].shape == std::vector<long long>{1, 2048, 4096, 1024});
  CHECK(r.work[0].flops == 2.0 * 2048 * 4096 * 1024);
  CHECK(r.work[0].seconds == doctest::Approx(46.303e-6));
}

TEST_CASE("calibrate: a network fit no link has is refused, naming the records (issue 38)") {
  const hw::NetworkSpec base = hw::network_preset("nvlink8-ib400");
  auto comm = [](double bytes, double seconds) {
    MeasuredComm c;
    c.collective = hw::Collective::AllReduce;
    c.ranks = 8;
    c.bytes = bytes;
    c.seconds = seconds;
    return c;
  };
  // Sane records fit (about 100 GB/s and 10 us).
  bool fitted = false;
  const hw::NetworkSpec ok = fit_network({comm(1e6, 1e-5 + 1.75e6 / 1e11), comm(1e8, 1e-5 + 1.75e8 / 1e11)}, base, &fitted);
  CHECK(fitted);
  CHECK(ok.intra_bandwidth == doctest::Approx(1e11).epsilon(1e-6));
  // Durations of femtoseconds: an (almost) infinite bandwidth, which the file would write as null.
  const std::vector<MeasuredComm> tiny = {comm(1e6, 1e-300), comm(1e8, 2e-300)};
  std::string why;
  try {
    fit_network(tiny, base);
  } catch (const std::invalid_argument& e) {
    why = e.what();
  }
  CHECK(why.find("calibrate: the intra-node links' fit is not physical") == 0);
  CHECK(why.find("from 2 collectives and sends") != std::string::npos);
  // Durations of centuries: 1e-6 B/s.
  why.clear();
  try {
    fit_network({comm(1e6, 1e12), comm(1e8, 1e14)}, base);
  } catch (const std::invalid_argument& e) {
    why = e.what();
  }
  CHECK(why.find("is not physical") != std::string::npos);
}

TEST_CASE("calibrate: negative sizes in a Kineto trace are refused, naming the event (issue 38)") {
  const json trace = {{"schemaVersion", 1},
                      {"traceEvents",
                       json::array({json{{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mm"}, {"pid", 1}, {"tid", 1},
                                         {"ts", 0}, {"dur", 10},
                                         {"args", {{"External id", 1}, {"Input Dims", json::array({json::array({-4, 8}), json::array({8, 8})})},
                                                   {"Input type", json::array({"c10::BFloat16", "c10::BFloat16"})}}}}})}};
  const auto dir = fresh_dir("kineto-negative");
  const std::string path = (dir / "t.json").string();
  std::ofstream(path) << trace.dump();
  std::string why;
  try {
    read_kineto_traces({path}, 8);
  } catch (const std::invalid_argument& e) {
    why = e.what();
  }
  CHECK(why.find("t.json: traceEvents[0]") != std::string::npos);
  CHECK(why.find("'Input Dims' holds a negative size (-4)") != std::string::npos);
}

TEST_CASE("calibrate: a replay trace of another model than --model's is refused, exit 1 (issue 38)") {
  // The replay records its model in the trace (otherData.model); calibrating a tiny run as `small` exited 0 with a
  // table fitted to the wrong FLOPs.
  const auto dir = fresh_dir("calibrate-model");
  const std::string trace = (dir / "t.json").string(), out = (dir / "d.json").string();
  REQUIRE(run_trainsim("replay ddp --model tiny --steps 2 --trace " + trace + " --data " + std::string(TRAINSIM_SOURCE_DIR) +
                       "/tests/data/corpus.txt")
              .exit_code == 0);
  CHECK(json::parse(slurp(trace))["otherData"]["model"]["preset"] == "tiny");
  CommandResult r = run_trainsim("calibrate " + trace + " --model small -o " + out, true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("the replay trained model 'tiny' (2 blocks, dim 32, 2 heads, vocabulary 256), not --model's 'small'") !=
        std::string::npos);
  CHECK(run_trainsim("calibrate " + trace + " --model tiny -o " + out).exit_code == 0);
}
