// Benchmark (not a test): generate large schedules, simulate, print and parse them back, reporting wall
// time (the simulation's: median and fastest of five, with records and summary only), peak resident memory,
// simulated ops per second and the parser's rate. Results and the command that made them: bench/README.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/resource.h>
#include <vector>

#include <fmt/format.h>

#include "apps/tune_allocator.h"
#include "schedules/generators.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"
#include "visualize/perfetto.h"
#include "visualize/timeline_svg.h"

using namespace trainsim;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

long peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;  // ru_maxrss is in KiB on Linux
}

void run(const std::string& label, const std::string& kind, const GenOptions& o) {
  fmt::print(stderr, "{}: generating...\n", label);
  auto t0 = std::chrono::steady_clock::now();
  Schedule s = generate(kind, o);
  double gen = seconds_since(t0);
  fmt::print(stderr, "{}: {} ops on {} ranks generated in {:.2f} s; simulating...\n", label, s.op_count(),
             s.header.world_size, gen);
  // The simulation, five times each way: with every op's record kept (what drawing needs), and summary only
  // (what `gen --sim` runs). One run of a few hundredths of a second is noisy on a shared VM, so both the
  // median and the fastest run (the least disturbed) are reported.
  SimResult r;
  struct Times {
    double median, best;
  };
  auto five_runs = [&](const SimOptions& options) {
    std::vector<double> t;
    for (int k = 0; k < 5; ++k) {
      auto t1 = std::chrono::steady_clock::now();
      r = simulate(s, options);
      t.push_back(seconds_since(t1));
    }
    std::sort(t.begin(), t.end());
    return Times{t[2], t[0]};
  };
  SimOptions summary_only;
  summary_only.record_trace = false;
  const Times core = five_runs(summary_only);
  const Times sim = five_runs(SimOptions{});
  t0 = std::chrono::steady_clock::now();
  std::string text = print_schedule(s);
  double print = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  Schedule parsed = parse_schedule(text, "bench.sched");
  double parse = seconds_since(t0);
  if (parsed.op_count() != s.op_count()) fmt::print(stderr, "{}: the parsed schedule has {} ops\n", label, parsed.op_count());
  t0 = std::chrono::steady_clock::now();
  std::string svg = visualize::timeline_svg(r.trace);
  double draw = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  std::string json = visualize::perfetto_trace_json(r.trace);
  double trace = seconds_since(t0);
  const double n = static_cast<double>(s.op_count());
  fmt::print("| {} | {} | {} | {:.2f} | {:.3f} | {:.0f} (best {:.0f}) | {:.3f} | {:.0f} (best {:.0f}) | {:.2f} | {:.2f} ({:.1f} MB/s) | {:.2f} ({} KiB) | {:.2f} ({} KiB) | {} | {} |\n",
             label, s.header.world_size, s.op_count(), gen, sim.median, n / sim.median, n / sim.best, core.median,
             n / core.median, n / core.best, print, parse,
             text.size() / parse / 1e6, draw, svg.size() / 1024, trace, json.size() / 1024, peak_rss_mib(),
             r.ok ? "valid" : "INVALID: " + r.error);
  std::fflush(stdout);
}

// `trainsim_bench KIND --profile N`: only N summary-only simulations of the schedule, for a profiler to sample
// (`perf record -e cpu-clock ./trainsim_bench fsdp --profile 200`); prints the mean rate.
int profile(const std::string& kind, const GenOptions& o, int n) {
  Schedule s = generate(kind, o);
  SimOptions summary_only;
  summary_only.record_trace = false;
  auto t0 = std::chrono::steady_clock::now();
  bool ok = true;
  for (int k = 0; k < n; ++k) ok = simulate(s, summary_only).ok && ok;
  fmt::print("{}: {} simulations of {} ops, {:.0f} simulated ops/s{}\n", kind, n, s.op_count(),
             static_cast<double>(s.op_count()) * n / seconds_since(t0), ok ? "" : " (INVALID)");
  return ok ? 0 : 1;
}

// The two schedules.
GenOptions options_of(const std::string& kind) {
  GenOptions o;
  if (kind == "1f1b") {
    o.stages = 64;
    o.microbatches = 256;
  } else {
    o.dp = 1024;
    o.layers = 8;
    o.microbatches = 1;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  trainsim::apps::tune_allocator();  // as the trainsim command runs
  std::string only = argc > 1 ? argv[1] : "";
  if (argc > 3 && std::string(argv[2]) == "--profile" && (only == "1f1b" || only == "fsdp"))
    return profile(only, options_of(only), std::max(1, std::atoi(argv[3])));
  fmt::print("| schedule | ranks | ops | generate s | simulate s (median) | simulated ops/s | summary-only s (median) | summary-only ops/s "
             "| print .sched s | parse .sched s | timeline SVG s | Perfetto JSON s | peak RSS MiB | result |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  if (only.empty() || only == "1f1b") run("1f1b, 64 stages x 256 microbatches", "1f1b", options_of("1f1b"));
  if (only.empty() || only == "fsdp") run("fsdp (ZeRO-3), 1,024 ranks x 8 layers", "fsdp", options_of("fsdp"));
  return 0;
}
