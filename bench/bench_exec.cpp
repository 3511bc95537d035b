// Benchmark of the executor's CPU backend (issue: "Speed", bench/README.md): the training step's tokens/s and
// achieved GFLOP/s (6·N per token plus attention, exec/model_config.h) against the single-thread sgemm peak
// measured at the model's own GEMM shapes (the forward's, the input gradient's and the weight gradient's), for
// the GEMM library the executor uses (oneDNN unless TRAINSIM_GEMM=openblas) and for OpenBLAS; the replay's
// overhead (time outside the ops' work, from the measured timeline), and where the time goes inside one
// microbatch's forward and backward, kernel by kernel.
//
//   trainsim_bench_exec [--model small] [--seq T] [--batch B] [--steps 4] [--microbatches 4] [--ranks 1]
//                       [--vs-pytorch ROUNDS [--python python3]]
// --vs-pytorch: then ROUNDS interleaved runs of the one-rank replay and of bench/torch_eager.py (PyTorch eager, one
// thread, the same model and shapes; the order alternating), the median ratio of their tokens/s and the ratio of
// their fastest steps (skipped, with a message, without torch).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "apps/tune_allocator.h"
#include "exec/cpu/cpu_gemm.h"
#include "exec/cpu/cpu_kernels.h"
#include "exec/cpu/simd.h"
#include "exec/layout.h"
#include "exec/model.h"
#include "exec/training.h"
#include "schedules/generators.h"

using namespace trainsim;
using namespace trainsim::exec;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// GFLOP/s of one sgemm shape (C[M×N] = op(A)·op(B), op as the trans flags say) through `lib` on this thread, on
// operands in the device allocator's 64-byte-aligned buffers, as a replay's are (std::vector's 16-byte alignment
// puts them off a cache line, which slows oneDNN's GEMMs by 10-20 %: bench/README.md, issue 23's fourth round):
// the best of 12 windows of at least 20 ms after a warm-up (a busy neighbour only ever slows a window down, so the
// best is the machine's).
double sgemm_gflops(cpu_detail::GemmLibrary lib, bool ta, bool tb, int M, int N, int K) {
  const std::size_t a_n = static_cast<std::size_t>(M) * K, b_n = static_cast<std::size_t>(N) * K;
  HostAllocator buffers;
  const BufferPtr a_buf = buffers.allocate(a_n * sizeof(float)), b_buf = buffers.allocate(b_n * sizeof(float)),
                  c_buf = buffers.allocate(static_cast<std::size_t>(M) * N * sizeof(float));
  float *A = a_buf->as<float>(), *B = b_buf->as<float>(), *C = c_buf->as<float>();
  for (std::size_t i = 0; i < a_n; ++i) A[i] = static_cast<float>(i % 7) * 0.1f;
  std::fill(B, B + b_n, 0.25f);
  auto run = [&] { cpu_detail::sgemm(lib, ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, 0.0f, C, N); };
  run();
  double best = 1e30;
  for (int rep = 0; rep < 12; ++rep) {
    auto t = Clock::now();
    int n = 0;
    do run(), ++n;
    while (seconds_since(t) < 0.02);
    best = std::min(best, seconds_since(t) / n);
  }
  return 2.0 * M * N * K / best / 1e9;
}

// Kernels that add the time of every call to a per-kernel total.
struct TimedKernels : CpuKernels<float> {
  std::map<std::string, double> seconds;
  int depth = 0;  // a kernel may call another (gemm_batched runs gemm): only the outermost call is timed
  template <typename F>
  void timed(const char* name, F f) {
    if (depth > 0) return f();
    ++depth;
    auto t = Clock::now();
    f();
    seconds[name] += seconds_since(t);
    --depth;
  }
#define TIMED(name, call) timed(name, [&] { CpuKernels<float>::call; })
  void gemm(bool ta, bool tb, int M, int N, int K, float a, const float* A, int lda, const float* B, int ldb, float b,
            float* C, int ldc) override {
    TIMED("gemm (linear layers)", gemm(ta, tb, M, N, K, a, A, lda, B, ldb, b, C, ldc));
  }
  void gemm_batched(bool ta, bool tb, int M, int N, int K, float a, const float* A, int lda, long sa, const float* B,
                    int ldb, long sb, float b, float* C, int ldc, long sc, int batch) override {
    TIMED("gemm (attention)", gemm_batched(ta, tb, M, N, K, a, A, lda, sa, B, ldb, sb, b, C, ldc, sc, batch));
  }
  void embedding_forward(const int* t, const float* w, float* o, long n, int d) override {
    TIMED("embedding", embedding_forward(t, w, o, n, d));
  }
  void embedding_backward(const int* t, const float* g, float* w, long n, int d) override {
    TIMED("embedding", embedding_backward(t, g, w, n, d));
  }
  void rmsnorm_forward(const float* x, const float* g, float* y, float* r, long n, int d, float e) override {
    TIMED("rmsnorm", rmsnorm_forward(x, g, y, r, n, d, e));
  }
  void rmsnorm_backward_input(const float* dy, const float* x, const float* g, const float* r, float* dx, long n,
                              int d) override {
    TIMED("rmsnorm", rmsnorm_backward_input(dy, x, g, r, dx, n, d));
  }
  void rmsnorm_backward_input_onto(const float* dy, const float* x, const float* g, const float* r, const float* res,
                                   float* dx, long n, int d) override {
    TIMED("rmsnorm", rmsnorm_backward_input_onto(dy, x, g, r, res, dx, n, d));
  }
  void rmsnorm_backward(const float* dy, const float* x, const float* g, const float* r, const float* res, float* dx,
                        float* dg, long n, int d) override {
    TIMED("rmsnorm", rmsnorm_backward(dy, x, g, r, res, dx, dg, n, d));
  }
  void rmsnorm_backward_weight(const float* dy, const float* x, const float* r, float* dg, long n, int d) override {
    TIMED("rmsnorm", rmsnorm_backward_weight(dy, x, r, dg, n, d));
  }
  void split_heads_rope(const float* qkv, float* q, float* k, float* v, int B, int T, int H, int hd, const float* c,
                        const float* s) override {
    TIMED("rope + head split/merge", split_heads_rope(qkv, q, k, v, B, T, H, hd, c, s));
  }
  void merge_heads_rope_backward(const float* dq, const float* dk, const float* dv, float* dqkv, int B, int T, int H,
                                 int hd, const float* c, const float* s) override {
    TIMED("rope + head split/merge", merge_heads_rope_backward(dq, dk, dv, dqkv, B, T, H, hd, c, s));
  }
  void merge_heads(const float* o, float* out, int B, int T, int H, int hd) override {
    TIMED("rope + head split/merge", merge_heads(o, out, B, T, H, hd));
  }
  void split_heads(const float* x, float* o, int B, int T, int H, int hd) override {
    TIMED("rope + head split/merge", split_heads(x, o, B, T, H, hd));
  }
  void attention_forward(const float* q, const float* k, const float* v, float* p, float* o, float* s, int B, int T,
                         int H, int hd, float scale) override {
    TIMED("attention (GEMMs + softmax)", attention_forward(q, k, v, p, o, s, B, T, H, hd, scale));
  }
  void attention_backward(const float* q, const float* k, const float* v, const float* p, const float* dout, float* dq,
                          float* dk, float* dv, float* s, int B, int T, int H, int hd, float scale) override {
    TIMED("attention (GEMMs + softmax)", attention_backward(q, k, v, p, dout, dq, dk, dv, s, B, T, H, hd, scale));
  }
  void causal_softmax_forward(float* s, int count, int T, float scale) override {
    TIMED("causal softmax", causal_softmax_forward(s, count, T, scale));
  }
  void causal_softmax_backward(const float* p, float* dp, int count, int T, float scale) override {
    TIMED("causal softmax", causal_softmax_backward(p, dp, count, T, scale));
  }
  void swiglu_forward(const float* gu, float* h, long n, int f) override { TIMED("swiglu", swiglu_forward(gu, h, n, f)); }
  void swiglu_backward(const float* gu, const float* dh, float* dgu, long n, int f) override {
    TIMED("swiglu", swiglu_backward(gu, dh, dgu, n, f));
  }
  void add(const float* a, const float* b, float* o, long n) override { TIMED("add/copy/fill", add(a, b, o, n)); }
  void copy(const float* s, float* d, long n) override { TIMED("add/copy/fill", copy(s, d, n)); }
  void fill(float* x, float v, long n) override { TIMED("add/copy/fill", fill(x, v, n)); }
  void cross_entropy(const float* l, const int* t, float* d, double* s, long n, int V, long r, float sc) override {
    TIMED("cross-entropy", cross_entropy(l, t, d, s, n, V, r, sc));
  }
#undef TIMED
};

int arg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}
std::string sarg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

// A run's speed: tokens/s over the steps after the first (the first initialises the weights and warms the caches;
// all of them when there is one), and over its fastest such step (a busy host only ever slows a step down, so the
// fastest is the steadier figure on a shared machine).
struct Speed {
  double mean = 0, best = 0;
};

// The Speed of a replay of the ddp schedule over `ranks` ranks; r: the replay's result (its trace, for the
// overhead).
Speed replay_speed(const ModelConfig& m, int ranks, int microbatches, int steps, ReplayResult& r) {
  GenOptions g;
  g.dp = ranks, g.layers = 1, g.microbatches = microbatches;
  Schedule s = generate("ddp", g);
  ReplayOptions o;
  o.model = m;
  o.steps = steps;
  double later_seconds = 0, fastest = 0;
  int later_steps = 0;
  r = replay(s, o, [&](const StepReport& rep) {
    if (rep.step > 0 || steps == 1) {
      later_seconds += rep.seconds, ++later_steps;
      if (fastest == 0 || rep.seconds < fastest) fastest = rep.seconds;
    }
  });
  if (!r.ok) return {};
  const double tokens = static_cast<double>(r.tokens_per_step);
  return {tokens * later_steps / later_seconds, tokens / fastest};
}

// bench/torch_eager.py's Speed on the same shapes; zeros and a message when it cannot run (no torch: exit 3).
Speed pytorch_speed(const ModelConfig& m, int microbatches, int steps, const std::string& python) {
  const std::string cmd = fmt::format(
      "OMP_NUM_THREADS=1 {} {}/bench/torch_eager.py --vocab {} --dim {} --heads {} --blocks {} --ffn {} --seq {} "
      "--batch {} --microbatches {} --steps {} 2>&1",
      python, TRAINSIM_SOURCE_DIR, m.vocab, m.dim, m.heads, m.blocks, m.ffn, m.seq, m.microbatch_size, microbatches,
      steps);
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return {};
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) out += buf;
  const int status = pclose(f);
  Speed speed;
  if (status == 0 && std::sscanf(out.c_str(), "tokens/s %lf best-step %lf", &speed.mean, &speed.best) == 2)
    return speed;
  fmt::print("  PyTorch eager skipped: {}", out.empty() ? "(no output)\n" : out);
  return {};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// `rounds` pairs of trainsim's replay (one rank) and PyTorch eager, each on one thread, the order alternating
// (trainsim first in odd rounds, PyTorch in even ones, so that a host speeding up or slowing down through a round
// favours neither); prints each pair, the median of the rounds' ratios and the ratio of the fastest steps.
int vs_pytorch(const ModelConfig& m, int microbatches, int steps, int rounds, const std::string& python) {
  fmt::print("\nvs PyTorch eager (bench/torch_eager.py, one thread), {} interleaved rounds, {} steps each:\n", rounds,
             steps);
  std::vector<double> ratios;
  double fastest_ours = 0, fastest_theirs = 0;  // tokens/s of the fastest step of all rounds
  for (int i = 0; i < rounds; ++i) {
    ReplayResult r;
    Speed ours, theirs;
    if (i % 2 == 0) {
      ours = replay_speed(m, 1, microbatches, steps, r);
      if (r.ok) theirs = pytorch_speed(m, microbatches, steps, python);
    } else {
      theirs = pytorch_speed(m, microbatches, steps, python);
      if (theirs.mean > 0) ours = replay_speed(m, 1, microbatches, steps, r);
    }
    if ((i % 2 == 0 || theirs.mean > 0) && !r.ok) {
      fmt::print(stderr, "replay failed: {}\n", r.error);
      return 1;
    }
    if (theirs.mean <= 0) return 0;  // (the skip is printed)
    ratios.push_back(ours.mean / theirs.mean);
    fastest_ours = std::max(fastest_ours, ours.best), fastest_theirs = std::max(fastest_theirs, theirs.best);
    fmt::print("  round {}: trainsim {:.0f} tokens/s, PyTorch eager {:.0f} tokens/s, ratio {:.2f} ({} first)\n", i + 1,
               ours.mean, theirs.mean, ours.mean / theirs.mean, i % 2 == 0 ? "trainsim" : "PyTorch");
  }
  fmt::print("  trainsim / PyTorch eager, median of {}: {:.2f}x (range {:.2f}-{:.2f})\n", rounds, median(ratios),
             *std::min_element(ratios.begin(), ratios.end()), *std::max_element(ratios.begin(), ratios.end()));
  fmt::print("  fastest step of all rounds: trainsim {:.0f} tokens/s, PyTorch eager {:.0f} tokens/s, ratio {:.2f}x\n",
             fastest_ours, fastest_theirs, fastest_ours / fastest_theirs);
  return 0;
}

constexpr const char* kUsage = R"(trainsim_bench_exec: the CPU backend's speed (bench/README.md)
  --model NAME        model preset (default small)
  --seq T             tokens per sequence (default: the preset's)
  --batch B           sequences per microbatch (default: the preset's)
  --steps N           replayed steps (default 4; the first is left out of tokens/s)
  --microbatches N    microbatches per rank per step (default 4)
  --ranks N           data-parallel ranks of the replay (default 1)
  --vs-pytorch ROUNDS then ROUNDS interleaved runs of the one-rank replay and of PyTorch eager (one thread each,
                      the order alternating): the median ratio and the ratio of the fastest steps
  --python PATH       the Python with torch for --vs-pytorch (default python3)
Environment: TRAINSIM_GEMM=onednn|openblas picks the fp32 GEMM library, TRAINSIM_SIMD=generic|avx2|avx512 the
element-wise kernels' instruction set.
)";

// The CPU's name as Linux gives it (/proc/cpuinfo's first "model name"), or "an unnamed CPU": readings differ from
// host to host (bench/README.md, issue 23's sixth round), so the report says which one it ran on.
std::string host_cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  return "an unnamed CPU";
}

// Every argument is a known option followed by its value; --help prints the usage.
bool arguments_ok(int argc, char** argv) {
  static const char* known[] = {"--model", "--seq", "--batch", "--steps", "--microbatches", "--ranks",
                                "--vs-pytorch", "--python"};
  for (int i = 1; i < argc; i += 2) {
    const bool ok = std::any_of(std::begin(known), std::end(known), [&](const char* k) { return std::strcmp(argv[i], k) == 0; });
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return fmt::print("{}", kUsage), false;
    if (!ok || i + 1 >= argc) {
      fmt::print(stderr, "trainsim_bench_exec: {} {}\n{}", argv[i], ok ? "needs a value" : "is not an option", kUsage);
      std::exit(2);
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (!arguments_ok(argc, argv)) return 0;
  trainsim::apps::tune_allocator();  // as the trainsim command runs: freed buffers are not faulted in again
  const std::string preset_name = sarg(argc, argv, "--model", "small");
  const int steps = arg(argc, argv, "--steps", 4), microbatches = arg(argc, argv, "--microbatches", 4),
            ranks = arg(argc, argv, "--ranks", 1);
  ModelConfig m = preset(preset_name);
  m.seq = arg(argc, argv, "--seq", m.seq), m.microbatch_size = arg(argc, argv, "--batch", m.microbatch_size);
  CpuKernels<float> init;  // reads TRAINSIM_GEMM (an unknown library fails here)
  const int n = static_cast<int>(m.tokens_per_microbatch()), d = m.dim, f = m.ffn, V = m.vocab;
  fmt::print("host {}, {} hardware threads; element-wise kernels {} (TRAINSIM_SIMD), fp32 GEMMs {} "
             "(TRAINSIM_GEMM)\n",
             host_cpu_name(), std::thread::hardware_concurrency(), simd::table().name,
             cpu_detail::gemm_library_name(cpu_detail::gemm_library()));
  fmt::print("model {}\n", m.describe());

  // 1. sgemm peak at the linears' shapes: for a linear of `in` -> `out` features over n tokens, the forward
  //    y = x·Wᵀ (n × out × in, B transposed), the input gradient dx = dy·W (n × in × out) and the weight gradient
  //    dW = dyᵀ·x (out × in × n, A transposed), as exec/model.cpp runs them; FLOP-weighted over all of them.
  struct Linear {
    const char* name;
    int in, out;
  };
  const std::vector<Linear> linears = {{"qkv", d, 3 * d}, {"wo", d, d}, {"gate/up", d, 2 * f}, {"down", f, d},
                                       {"head", d, V}};
  const cpu_detail::GemmLibrary used = cpu_detail::gemm_library();
  std::vector<cpu_detail::GemmLibrary> libs = {used};
  if (used != cpu_detail::GemmLibrary::openblas) libs.push_back(cpu_detail::GemmLibrary::openblas);
  std::map<cpu_detail::GemmLibrary, double> peak_of;
  fmt::print("\nsgemm, one thread, at the model's shapes (forward n x out x in; input grad n x in x out; weight grad "
             "out x in x n), GFLOP/s:\n");
  fmt::print("  {:9} {:>18} {:>18} {:>18}   library\n", "linear", "forward", "input grad", "weight grad");
  bool any_handed = false;
  for (cpu_detail::GemmLibrary lib : libs) {
    double flops = 0, secs = 0;
    for (const Linear& l : linears) {
      const double g[3] = {sgemm_gflops(lib, false, true, n, l.out, l.in), sgemm_gflops(lib, false, false, n, l.in, l.out),
                           sgemm_gflops(lib, true, false, l.out, l.in, n)};
      const double fl = 2.0 * n * l.in * l.out;
      for (double x : g) flops += fl, secs += fl / (x * 1e9);
      // (a weight gradient that runs_on hands to OpenBLAS is marked *)
      const bool handed = cpu_detail::runs_on(lib, true, l.out) != lib;
      any_handed = any_handed || handed;
      fmt::print("  {:9} {:>18.1f} {:>18.1f} {:>17.1f}{}   {}\n", l.name, g[0], g[1], g[2], handed ? "*" : " ",
                 cpu_detail::gemm_library_name(lib));
    }
    peak_of[lib] = flops / secs / 1e9;
  }
  if (any_handed)
    fmt::print("  (* run on OpenBLAS under onednn: a transposed A whose leading dimension is >= 1024 and a multiple "
               "of 512)\n");
  const double peak = peak_of[used];
  for (auto [lib, p] : peak_of)
    fmt::print("  FLOP-weighted peak, {}: {:.1f} GFLOP/s{}\n", cpu_detail::gemm_library_name(lib), p,
               lib == used ? " (the library the executor uses: TRAINSIM_GEMM)" : "");

  // 2. Kernel breakdown of one microbatch's forward + backward (one layer with every block), as a replay runs it:
  // weights, grads and logits in the device's 64-byte-aligned buffers (std::vector's 16-byte alignment put the
  // weights 48 bytes off a cache line, and oneDNN's GEMMs ran 10-20 % slower on them), one whole backward.
  {
    LayerLayout lay(m, partition(m, 1).front());
    HostAllocator buffers;
    const auto floats = [](long count) { return static_cast<std::size_t>(count) * sizeof(float); };
    const BufferPtr w_buf = buffers.allocate(floats(lay.size())), dw_buf = buffers.allocate(floats(lay.size())),
                    logits_buf = buffers.allocate(floats(static_cast<long>(n) * V));
    float *w = w_buf->as<float>(), *dw = dw_buf->as<float>(), *logits = logits_buf->as<float>();
    init_parameters(lay, 1, 0, lay.size(), w);
    std::vector<int> tokens(n), targets(n);
    for (int i = 0; i < n; ++i) tokens[i] = (i * 31) % V, targets[i] = (i * 17 + 3) % V;
    std::vector<float> cos, sin;
    rope_tables(m, cos, sin);
    HostAllocator alloc;
    TimedKernels k;
    ModelContext<float> c{.k = &k, .alloc = &alloc, .rope_cos = cos.data(), .rope_sin = sin.data()};
    auto once = [&] {
      LayerStash st;
      double sum = 0;
      layer_forward(c, lay, w, tokens.data(), m.microbatch_size, logits, &st);
      loss_forward_backward(c, m, logits, targets.data(), m.microbatch_size, 1.0f / n, logits, &sum);
      layer_backward(c, lay, w, tokens.data(), logits, static_cast<float*>(nullptr), dw, st);
    };
    once();
    k.seconds.clear();
    auto t = Clock::now();
    const int reps = 3;
    for (int i = 0; i < reps; ++i) once();
    double total = seconds_since(t) / reps, in_kernels = 0;
    fmt::print("\none microbatch ({} tokens), forward + backward: {:.1f} ms, {:.1f} GFLOP/s\n", n, total * 1e3,
               m.flops_per_token() * n / total / 1e9);
    std::vector<std::pair<double, std::string>> rows;
    for (auto& [name, s] : k.seconds) rows.push_back({s / reps, name}), in_kernels += s / reps;
    std::sort(rows.rbegin(), rows.rend());
    for (auto& [s, name] : rows) fmt::print("  {:26} {:7.2f} ms  {:5.1f}%\n", name, s * 1e3, 100 * s / total);
    fmt::print("  {:26} {:7.2f} ms  {:5.1f}%\n", "(outside kernels)", (total - in_kernels) * 1e3,
               100 * (total - in_kernels) / total);
  }

  // 3. The replay: a schedule of `ranks` data-parallel ranks (one rank: plain training through the replay).
  ReplayResult r;
  const double tokens_per_s = replay_speed(m, ranks, microbatches, steps, r).mean;
  if (!r.ok) {
    fmt::print(stderr, "replay failed: {}\n", r.error);
    return 1;
  }
  double achieved = tokens_per_s * m.flops_per_token() / 1e9;
  fmt::print("\nreplay: ddp over {} rank{}, {} microbatches x {} tokens per step, {} steps\n", ranks, ranks == 1 ? "" : "s",
             microbatches * ranks, n, steps);
  const double cores = std::min(ranks, 2);
  fmt::print("  {:.0f} tokens/s, {:.1f} GFLOP/s = {:.0f}% of the sgemm peak{} (steps 2..{})\n", tokens_per_s, achieved,
             100 * achieved / (peak * cores), ranks > 1 ? " (x2 cores)" : "", steps);
  if (used != cpu_detail::GemmLibrary::openblas)
    fmt::print("  = {:.0f}% of OpenBLAS's sgemm peak at these shapes\n",
               100 * achieved / (peak_of[cpu_detail::GemmLibrary::openblas] * cores));
  // Overhead: per rank, the step's span minus the time its ops' work ran (one stream: they do not overlap).
  double worst = 0;
  for (const auto& rank : r.trace.ranks) {
    if (rank.empty()) continue;
    double busy = 0;
    for (const OpRun& run : rank) busy += to_seconds(run.end - run.start);
    double span = to_seconds(rank.back().end - rank.front().start);
    worst = std::max(worst, 1 - busy / span);
  }
  fmt::print("  replay overhead (time between the ops' work, last step): {:.2f}% of the step\n", 100 * worst);

  // 4. PyTorch eager on the same model, one thread, interleaved with trainsim's one-rank replay.
  if (const int rounds = arg(argc, argv, "--vs-pytorch", 0); rounds > 0)
    return vs_pytorch(m, microbatches, steps, rounds, sarg(argc, argv, "--python", "python3"));
  return 0;
}
