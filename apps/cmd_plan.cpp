// `trainsim plan`: which configuration for a training run (issue 34; docs/planning.md). Parses the question,
// calls the planner (plan/planner.h), prints the ranking and writes its JSON, CSV and SVG, and the winner's launch
// configurations (interop/framework_emit.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/hardware_options.h"
#include "apps/number_check.h"
#include "apps/stage_line.h"
#include "apps/text_file.h"
#include "hardware/report.h"
#include "interop/framework_emit.h"
#include "interop/hf_config.h"
#include "plan/planner.h"
#include "schedules/generators.h"  // read_expert_loads
#include "visualize/plan_plot.h"
#include "visualize/timeline_stack.h"

namespace trainsim::apps {

namespace {

struct PlanArgs {
  std::string model, device = kDefaultDevice, network = kDefaultNetwork, framework = "any", tp_overlap;
  int gpus = 0, seq = 0, top = 10, emit = 1;
  unsigned threads = 0;
  long long global_batch = 0;
  double reserve_gib = -1;
  std::string tp, cp, pp, dp, chunks, microbatch_size, zero, schedules, recompute, sp, fp8, layout, ep, etp;
  double moe_imbalance = 0;
  std::string expert_load_file;
  bool a2a_overlap = false;
  std::string moe_dispatcher = "nccl";
  bool json = false;
  std::string csv, svg, timelines;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int> int_list(const std::string& s, const char* flag) {
  std::vector<int> out;
  for (const std::string& item : split_list(s)) {
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0 || (v == 0 && std::string(flag) != "--zero"))
      throw hw::SpecError(fmt::format("{}: '{}' is not a count (give N or N,M,...)", flag, item));
    out.push_back(v);
  }
  return out;
}

std::vector<bool> switch_list(const std::string& s, const char* flag) {
  std::vector<bool> out;
  for (const std::string& item : split_list(s)) {
    if (item == "on" || item == "yes") out.push_back(true);
    else if (item == "off" || item == "no") out.push_back(false);
    else throw hw::SpecError(fmt::format("{}: '{}' is on or off (or on,off for both)", flag, item));
  }
  return out;
}

plan::PlanRequest request_of(const PlanArgs& a) {
  plan::PlanRequest r;
  try {
    r.model = interop::load_model(a.model);
  } catch (const hw::SpecError& e) {
    throw hw::SpecError(fmt::format("--model: {}", e.what()));
  }
  try {
    r.device = hw::load_device(a.device);
  } catch (const hw::SpecError& e) {
    throw hw::SpecError(fmt::format("--device: {}", e.what()));
  }
  try {
    r.network = hw::load_network(a.network);
  } catch (const hw::SpecError& e) {
    throw hw::SpecError(fmt::format("--network: {}", e.what()));
  }
  if (a.reserve_gib >= 0) r.device.memory_reserve_bytes = a.reserve_gib * 1024.0 * 1024 * 1024;
  r.gpus = a.gpus;
  r.global_batch = a.global_batch;
  r.seq = a.seq;
  r.top = a.top;
  r.framework = plan::framework_from_name(a.framework, "--framework");
  if (!a.tp_overlap.empty()) r.tp_overlap = hw::tp_overlap_from_name(a.tp_overlap, "--tp-overlap");
  plan::SearchSpace& s = r.space;
  s.tp = int_list(a.tp, "--tp"), s.cp = int_list(a.cp, "--cp"), s.pp = int_list(a.pp, "--pp");
  s.dp = int_list(a.dp, "--dp");
  s.chunks = int_list(a.chunks, "--chunks"), s.microbatch_size = int_list(a.microbatch_size, "--microbatch-size");
  s.zero = int_list(a.zero, "--zero");
  s.ep = int_list(a.ep, "--ep");
  s.etp = int_list(a.etp, "--etp");
  r.moe_imbalance = a.moe_imbalance;
  if (!a.expert_load_file.empty()) {
    try {
      r.per_expert_load = read_expert_loads(a.expert_load_file);
    } catch (const std::invalid_argument& e) {
      throw hw::SpecError(fmt::format("--expert-load-file: {}", e.what()));
    }
  }
  r.a2a_overlap = a.a2a_overlap;
  r.moe_dispatcher = hw::moe_dispatcher_from_name(a.moe_dispatcher, "--moe-dispatcher");
  for (int z : s.zero)
    if (z != 0 && z != 1 && z != 3) throw hw::SpecError(fmt::format("--zero: {} is 0 (DDP), 1 (ZeRO-1) or 3 (FSDP)", z));
  static const std::vector<std::string> kSchedules = {"1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev", "interleaved-zb"};
  for (const std::string& name : split_list(a.schedules)) {
    if (name == "all") {
      s.schedules = kSchedules;
      continue;
    }
    if (std::find(kSchedules.begin(), kSchedules.end(), name) == kSchedules.end())
      throw hw::SpecError(fmt::format("--schedules: '{}' is not one of 1f1b, interleaved-1f1b, zb-h1, zbv, dualpipev, "
                                      "interleaved-zb (or all)", name));
    s.schedules.push_back(name);
  }
  for (const std::string& name : split_list(a.recompute)) {
    if (name == "op") throw hw::SpecError("--recompute: the planner searches none, selective and full");
    s.recompute.push_back(hw::recompute_from_name(name, "--recompute"));
  }
  s.sp = switch_list(a.sp, "--sp");
  s.fp8 = switch_list(a.fp8, "--fp8");
  for (const std::string& name : split_list(a.layout)) {
    if (name != "even" && name != "balanced") throw hw::SpecError(fmt::format("--layout: '{}' is even or balanced", name));
    s.layouts.push_back(name);
  }
  return r;
}

std::string gib(double bytes) { return fmt::format("{:.1f}", bytes / (1024.0 * 1024 * 1024)); }

// The launch configurations of a row: gen command, Megatron-LM line, torchtitan TOML.
struct Launch {
  std::string gen;
  FrameworkLaunch megatron, torchtitan;
};

Launch launch_of(const plan::PlanRow& row, const PlanArgs& a) {
  Launch l;
  l.gen = "trainsim " + gen_command(row.candidate.config);
  if (l.gen.find(" --model ") == std::string::npos) l.gen += " --model " + a.model;
  l.gen += fmt::format(" --device {} --network {} --sim", a.device, a.network);
  l.megatron = to_megatron(row.candidate.config);
  l.torchtitan = to_torchtitan_toml(row.candidate.config);
  return l;
}

// `moe`: the model has experts (the rows then say their EP degree).
nlohmann::ordered_json row_json(const plan::PlanRow& row, bool moe) {
  const plan::Knobs& k = row.candidate.knobs;
  const plan::Evaluation& e = row.eval;
  nlohmann::ordered_json j;
  j["tp"] = k.tp, j["cp"] = k.cp, j["pp"] = k.pp, j["chunks"] = k.chunks, j["dp"] = k.dp;
  if (moe) j["ep"] = k.ep, j["etp"] = k.etp;
  j["microbatch_size"] = k.microbatch_size, j["microbatches"] = k.microbatches;
  j["schedule"] = k.schedule, j["zero"] = k.zero, j["recompute"] = hw::recompute_name(k.recompute);
  j["sp"] = k.sp, j["fp8"] = k.fp8, j["layout"] = k.layout;
  j["fits"] = row.fits();
  j["step_time_s"] = e.step_time_s;
  j["tokens_per_s_per_gpu"] = e.tokens_per_s_per_gpu;
  j["mfu"] = e.mfu;
  j["peak_memory_bytes"] = e.peak_memory_bytes;
  j["peak_memory_rank"] = e.peak_memory_rank;
  j["peak_breakdown"] = hw::breakdown_json(e.peak_breakdown);
  j["bubble_fraction"] = e.bubble_fraction;
  j["exposed_comm_share"] = e.exposed_comm_share;
  j["stage_peak_memory_bytes"] = e.stage_peak_bytes;
  j["memory_bound_bytes"] = row.memory_bound_bytes;
  j["time_bound_s"] = row.time_bound_s;
  j["simulated_ranks"] = e.simulated_ranks;
  j["ops"] = e.ops;
  return j;
}

std::string csv_text(const plan::PlanResult& res, bool moe) {
  std::string s = std::string("rank,tp,cp,pp,chunks,dp,") + (moe ? "ep,etp," : "") +
      "microbatch_size,microbatches,schedule,zero,recompute,sp,fp8,layout,fits,step_time_s,"
      "tokens_per_s_per_gpu,mfu,peak_memory_bytes,weights_bytes,grads_bytes,optimizer_bytes,activations_bytes,"
      "workspace_bytes,bubble_fraction,exposed_comm_share\n";
  for (std::size_t i = 0; i < res.rows.size(); ++i) {
    const plan::Knobs& k = res.rows[i].candidate.knobs;
    const plan::Evaluation& e = res.rows[i].eval;
    s += fmt::format("{},{},{},{},{},{},{}{},{},{},{},{},{},{},{},{},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g},"
                     "{:.17g},{:.17g},{:.17g},{:.17g}\n",
                     i + 1, k.tp, k.cp, k.pp, k.chunks, k.dp, moe ? fmt::format("{},{},", k.ep, k.etp) : "", k.microbatch_size, k.microbatches, k.schedule, k.zero,
                     hw::recompute_name(k.recompute), k.sp ? 1 : 0, k.fp8 ? 1 : 0, k.layout, res.rows[i].fits() ? 1 : 0,
                     e.step_time_s, e.tokens_per_s_per_gpu, e.mfu, e.peak_memory_bytes, e.peak_breakdown.weights,
                     e.peak_breakdown.grads, e.peak_breakdown.optimizer, e.peak_breakdown.activations,
                     e.peak_breakdown.workspace, e.bubble_fraction, e.exposed_comm_share);
  }
  return s;
}

std::string stage_peaks(const plan::Evaluation& e) {
  std::string s;
  for (double b : e.stage_peak_bytes) s += (s.empty() ? "" : "/") + gib(b);
  return s;
}

// The best row that fits of each schedule, in ranking order (at most 6), as timelines of one pipeline replica on one
// time axis. Returns false after printing why it could not be written.
bool write_timelines(const plan::PlanResult& res, const plan::PlanRequest& r, const std::string& title, const std::string& path) {
  std::vector<visualize::StackedTimeline> parts;
  std::vector<std::unique_ptr<CostModel>> costs;
  std::vector<std::string> seen;
  for (std::size_t i = 0; i < res.rows.size() && parts.size() < 6; ++i) {
    const plan::PlanRow& row = res.rows[i];
    const plan::Knobs& k = row.candidate.knobs;
    if (!row.fits() || std::find(seen.begin(), seen.end(), k.schedule) != seen.end()) continue;
    seen.push_back(k.schedule);
    plan::ReplicaTrace t = plan::replica_trace(row.candidate, r);
    visualize::StackedTimeline part;
    part.title = fmt::format("#{} {}: TP {} CP {} PP {} VP {} DP {}{}, {} x {} microbatches, ZeRO {}, recompute {}, {} "
                             "layout; step {:.3f} s, bubble {:.1f} %, stage peaks {} GiB",
                             i + 1, k.schedule, k.tp, k.cp, k.pp, k.chunks, k.dp,
                             r.model.moe() ? fmt::format(" EP {}{}", k.ep, k.etp > 1 ? fmt::format(" ETP {}", k.etp) : "") : "", k.microbatches, k.microbatch_size,
                             k.zero, hw::recompute_name(k.recompute), k.layout, row.eval.step_time_s,
                             100 * row.eval.bubble_fraction, stage_peaks(row.eval));
    part.trace = std::move(t.trace);
    part.cost = t.cost.get();
    part.row_name = "stage";  // row s is stage s's representative rank
    parts.push_back(std::move(part));
    costs.push_back(std::move(t.cost));  // alive until drawn
  }
  if (parts.empty()) {
    fmt::print(stderr, "trainsim plan: --timelines: no candidate fits, {} not written\n", path);
    return true;
  }
  return write_output("trainsim plan", path,
                      visualize::timeline_stack_svg(parts, title + " - one pipeline replica (one rank per stage), TP collapsed"));
}

std::string rejected_text(const plan::PlanResult& res) {
  std::string s;
  for (const auto& [why, n] : res.rejected) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", why, n);
  return s.empty() ? "none" : s;
}

int run(const PlanArgs& a) {
  plan::PlanRequest r;
  try {
    r = request_of(a);
  } catch (const std::invalid_argument& e) {  // hw::SpecError
    fmt::print(stderr, "trainsim plan: {}\n", e.what());
    return 2;
  }
  const unsigned threads = a.threads > 0 ? a.threads : std::max(1u, std::thread::hardware_concurrency());
  StageLine stage("trainsim plan");
  stage.show("enumerating configurations");
  const auto started = std::chrono::steady_clock::now();
  plan::PlanResult res;
  try {
    res = plan::run_plan(r, threads, [&](std::size_t done, std::size_t total) {
      stage.show(fmt::format("simulated {} of {} candidates", done, total));
    });
  } catch (const std::invalid_argument& e) {
    stage.clear();
    fmt::print(stderr, "trainsim plan: {}\n", e.what());
    return 2;
  }
  stage.clear();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const std::size_t shown = std::min<std::size_t>(res.rows.size(), static_cast<std::size_t>(std::max(a.top, 0)));
  const std::size_t emitted = std::min<std::size_t>(res.rows.size(), static_cast<std::size_t>(std::max(a.emit, 0)));
  std::vector<Launch> launches;
  for (std::size_t i = 0; i < emitted; ++i)
    if (res.rows[i].fits()) launches.push_back(launch_of(res.rows[i], a));
  const std::string seq = fmt::format("{}", r.seq > 0 ? r.seq : r.model.seq);
  const bool moe = r.model.moe();
  const std::string title =
      fmt::format("{} on {} x {} ({}), global batch {} x {} tokens{}", r.model.preset, r.gpus, r.device.preset,
                  r.network.preset, r.global_batch, seq,
                  !moe ? std::string()
                  : r.moe_imbalance > 1 ? fmt::format(", busiest expert slice at {:g} x the mean load", r.moe_imbalance)
                  : !r.per_expert_load.empty() ? fmt::format(", the experts' loads of {}", a.expert_load_file)
                                               : std::string());
  if (!a.csv.empty() && !write_output("trainsim plan", a.csv, csv_text(res, moe))) return 2;
  if (!a.svg.empty()) {
    std::vector<visualize::PlanPoint> points;
    for (std::size_t i = 0; i < res.rows.size(); ++i)
      points.push_back({res.rows[i].eval.peak_memory_bytes, res.rows[i].eval.tokens_per_s_per_gpu, res.rows[i].fits(),
                        i < shown && res.rows[i].fits() ? static_cast<int>(i + 1) : 0});
    const std::string sub = fmt::format("{} of {} combinations simulated, {} fit; the top {} labelled", res.simulated,
                                        res.combinations, res.rows.size() - (res.rejected.count("out_of_memory") ? res.rejected.at("out_of_memory") : 0), shown);
    const std::string note = "not simulated or not ranked: " + rejected_text(res);
    if (!write_output("trainsim plan", a.svg,
                      visualize::plan_plot_svg(points, r.device.memory_bytes, r.device.usable_memory_bytes(), {title, sub, note})))
      return 2;
  }
  if (!a.timelines.empty() && !write_timelines(res, r, title, a.timelines)) return 2;
  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = r.model.preset, j["gpus"] = r.gpus, j["device"] = r.device.preset, j["network"] = r.network.preset;
    j["global_batch"] = r.global_batch, j["seq"] = r.seq > 0 ? r.seq : r.model.seq, j["framework"] = a.framework;
    if (moe) j["moe_imbalance"] = r.moe_imbalance > 1 ? r.moe_imbalance : 1.0;
    if (moe && !r.per_expert_load.empty()) j["expert_load_file"] = a.expert_load_file;
    if (moe) j["a2a_overlap"] = r.a2a_overlap;
    if (moe) j["moe_dispatcher"] = hw::moe_dispatcher_name(r.moe_dispatcher);
    j["device_fitted_to"] = r.device.fitted_to.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.device.fitted_to);
    j["memory_capacity_bytes"] = r.device.memory_bytes, j["memory_reserve_bytes"] = r.device.memory_reserve_bytes;
    j["combinations"] = res.combinations;
    j["simulated"] = res.simulated;
    j["rejected"] = res.rejected;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < res.rows.size(); ++i) {
      nlohmann::ordered_json row = row_json(res.rows[i], moe);
      if (i < launches.size()) {
        row["gen_command"] = launches[i].gen;
        auto put = [&](const char* key, const FrameworkLaunch& l) {
          row[key] = l.text.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(l.text);
          row[std::string(key) + "_exact"] = l.exact;
          row[std::string(key) + "_note"] = l.note.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(l.note);
        };
        put("megatron_args", launches[i].megatron);
        put("torchtitan_toml", launches[i].torchtitan);
      }
      rows.push_back(std::move(row));
    }
    j["candidates"] = std::move(rows);
    std::cout << j.dump(2) << "\n";
    return res.rows.empty() || !res.rows.front().fits() ? 1 : 0;
  }
  fmt::print("trainsim plan: {}\n", title);
  fmt::print("  {} combinations; {} simulated in {:.1f} s on {} threads (framework {})\n", res.combinations,
             res.simulated, seconds, threads, a.framework);
  fmt::print("  not simulated or not ranked: {}\n", rejected_text(res));
  if (r.device.fitted_to.empty())
    fmt::print("  note: device {} is fitted to no published run: its times are the kernel tables' and likely fast\n",
               r.device.preset);
  // With the degrees fixed (a comparison of schedules), each stage's peak too.
  bool one_shape = shown > 0;
  for (std::size_t i = 1; i < shown; ++i) {
    const plan::Knobs &k = res.rows[i].candidate.knobs, &k0 = res.rows[0].candidate.knobs;
    one_shape = one_shape && k.tp == k0.tp && k.cp == k0.cp && k.pp == k0.pp && k.dp == k0.dp && k.ep == k0.ep &&
                k.etp == k0.etp;
  }
  if (moe)
    fmt::print("  note: model {} is a Mixture of Experts ({} experts, top {}): EP is searched with TP beside it "
               "(the ETP column: expert TP 1, or with --etp 1,2 equal to TP too; without EP every expert is split over "
               "the TP group), CP as for a dense model, {}; {}; all-to-alls {}; each expert op at least the host's "
               "time to issue its experts' kernels, which favours more EP where a rank would hold many small experts "
               "(docs/planning.md, \"Mixture of Experts\")\n",
               r.model.preset, r.model.experts, r.model.top_k,
               r.framework == plan::Framework::Torchtitan ? "FSDP (torchtitan's, the experts sharded over their "
                                                            "expert-data-parallel group)"
                                                          : "DDP and ZeRO-1 (FSDP with --zero 3)",
               r.moe_imbalance > 1 ? fmt::format("every expert slice ranked with the busiest at {:g} x the mean load", r.moe_imbalance)
               : !r.per_expert_load.empty()
                   ? fmt::format("every expert slice ranked with the sum of its experts' loads in {} (the busiest "
                                 "expert at {:.3g} x the mean)",
                                 a.expert_load_file,
                                 *std::max_element(r.per_expert_load.begin(), r.per_expert_load.end()) /
                                     (std::accumulate(r.per_expert_load.begin(), r.per_expert_load.end(), 0.0) /
                                      static_cast<double>(r.per_expert_load.size())))
                   : std::string("routing balanced (--moe-imbalance 1.5 ranks them as a router before it balances; "
                                 "--expert-load-file FILE as measured)"),
               r.moe_dispatcher == hw::MoeDispatcher::DeepEP
                   ? "through DeepEP (once per destination node)"
                   : "through NCCL (--moe-dispatcher deepep for DeepEP's, once per destination node)");
  fmt::print("\n{:>3} {:>2} {:>2} {:>3} {:>2} {:>4}{} {:>3} {:>4} {:<16} {:>4} {:<9} {:>2} {:>3} {:<8} {:>8} {:>9} {:>5} "
             "{:>6} {:<23} {:>6} {:>7}{}\n",
             "#", "TP", "CP", "PP", "VP", "DP", moe ? fmt::format(" {:>3} {:>3}", "EP", "ETP") : "", "mbs", "mb", "schedule", "ZeRO", "recompute", "SP", "FP8", "layout",
             "step s", "tok/s/GPU", "MFU", "peak", "GiB: W/G/O/A", "bubble", "exposed", one_shape ? "  stage peaks GiB" : "");
  for (std::size_t i = 0; i < shown; ++i) {
    const plan::Knobs& k = res.rows[i].candidate.knobs;
    const plan::Evaluation& e = res.rows[i].eval;
    const MemoryByKind& m = e.peak_breakdown;
    fmt::print("{:>3} {:>2} {:>2} {:>3} {:>2} {:>4}{} {:>3} {:>4} {:<16} {:>4} {:<9} {:>2} {:>3} {:<8} {:>8.3f} {:>9.0f} "
               "{:>4.1f}% {:>6} {:<23} {:>5.1f}% {:>6.1f}%{}{}\n",
               i + 1, k.tp, k.cp, k.pp, k.chunks, k.dp, moe ? fmt::format(" {:>3} {:>3}", k.ep, k.etp) : "", k.microbatch_size, k.microbatches, k.schedule, k.zero,
               hw::recompute_name(k.recompute), k.sp ? "y" : "n", k.fp8 ? "y" : "n", k.layout, e.step_time_s,
               e.tokens_per_s_per_gpu, 100 * e.mfu, gib(e.peak_memory_bytes),
               fmt::format("{}/{}/{}/{}", gib(m.weights), gib(m.grads), gib(m.optimizer), gib(m.activations)),
               100 * e.bubble_fraction, 100 * e.exposed_comm_share, one_shape ? "  " + stage_peaks(e) : "",
               res.rows[i].fits() ? "" : "  out of memory");
  }
  if (res.rows.empty() && !res.first_invalid.empty()) {
    fmt::print(stderr, "trainsim plan: the generator refused every candidate, e.g.: {}\n", res.first_invalid);
    return 1;
  }
  if (res.rows.empty() || !res.rows.front().fits()) {
    fmt::print(stderr, "trainsim plan: no candidate fits in {} GiB usable of {} (give more GPUs, a smaller batch, or "
                       "widen the search)\n",
               gib(r.device.usable_memory_bytes()), r.device.preset);
    return 1;
  }
  for (std::size_t i = 0; i < launches.size(); ++i) {
    fmt::print("\n#{}: {}\n", i + 1, launches[i].gen);
    auto show = [](const char* name, const FrameworkLaunch& l) {
      if (l.text.empty()) fmt::print("  {}: not written: {}\n", name, l.note);
      else fmt::print("  {}{}:\n{}\n", name, l.exact ? " (read back to the same configuration)" : fmt::format(" ({})", l.note), l.text);
    };
    show("Megatron-LM", launches[i].megatron);
    show("torchtitan TOML", launches[i].torchtitan);
  }
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Which configuration for a training run: search TP, CP, PP, virtual stages, DP, microbatch size, pipeline "
      "schedule, ZeRO-1 or FSDP, recomputation, SP, FP8 and the stage layout, simulate every candidate that can fit "
      "as a real schedule (one representative rank per stage), rank them by tokens/s per GPU, and write the "
      "winner's gen command, Megatron-LM arguments and torchtitan TOML (docs/planning.md). Knob options take a "
      "value or a comma-separated list. Exit status: 0 a candidate fits; 1 none fits; 2 a bad option.");
  const CLI::Validator count = integer_in(1, std::numeric_limits<int>::max(), "", "N>=1");
  cmd->add_option("--model", a->model, "The model: a preset, a trainsim JSON file or a Hugging Face config.json")->required();
  cmd->add_option("--gpus", a->gpus, "GPUs of the run (the world size)")->required()->check(count);
  cmd->add_option("--global-batch", a->global_batch, "Sequences per step over every replica")
      ->required()
      ->check(integer_in(1, std::numeric_limits<int>::max(), "", "N>=1"));
  cmd->add_option("--seq", a->seq, "Tokens per sequence (default: the model's)")->check(integer_in(1, 16777216, "", "N>=1"));
  cmd->add_option("--device", a->device, "The device: a preset or a JSON file")->capture_default_str();
  cmd->add_option("--network", a->network, "The network: a preset or a JSON file (its GPUs per node bound TP)")
      ->capture_default_str();
  cmd->add_option("--memory-reserve", a->reserve_gib,
                  "GiB of each GPU a framework cannot use (default: the device's stated reserve)")
      ->check(finite_number(0, false, "GiB", "GIB>=0"));
  cmd->add_option("--framework", a->framework,
                  "any (default: every schedule, ZeRO-1 and FSDP, Megatron-LM's TP overlap), megatron (1F1B and "
                  "interleaved, distributed optimizer) or torchtitan (FSDP, its pipelining schedules, TP without "
                  "overlap)")
      ->capture_default_str();
  cmd->add_option("--tp", a->tp, "Tensor-parallel degrees (default: powers of 2 up to a node dividing the heads)");
  cmd->add_option("--cp", a->cp, "Context-parallel degrees (default 1; 1,2,4,8 from 32,768 tokens)");
  cmd->add_option("--pp", a->pp, "Pipeline stages (default: every divisor of the GPUs left, up to the blocks)");
  cmd->add_option("--dp", a->dp, "Data-parallel degrees to keep (DP is the GPUs the others leave: a constraint)");
  cmd->add_option("--chunks", a->chunks, "Virtual stages per rank of the interleaved schedules (default 2,4)");
  cmd->add_option("--microbatch-size", a->microbatch_size, "Sequences per microbatch (default 1,2,4)");
  cmd->add_option("--zero", a->zero, "0 (DDP), 1 (ZeRO-1), 3 (FSDP) (default: 1,3; megatron 1; torchtitan 3; MoE 1, or 3 with torchtitan)");
  cmd->add_option("--ep", a->ep,
                  "Expert-parallel degrees of an MoE model (default: every divisor of its experts; each must divide TP x DP "
                  "and, with TP above 1 and expert TP 1, be a multiple of TP)");
  cmd->add_option("--etp", a->etp,
                  "Expert tensor-parallel degrees of an MoE model: 1 (the experts whole beside TP) or each candidate's "
                  "TP degree (each expert split over its TP group, Megatron-LM's default; gen 3d --etp); other values "
                  "are refused (default 1, as Megatron-Bridge's MoE recipes run; 1,2 searches Megatron-LM's default "
                  "too; without EP every expert is split over the TP group whatever this says)");
  cmd->add_option("--moe-imbalance", a->moe_imbalance,
                  "An MoE model's busiest expert slice's tokens over the mean, for every candidate with expert "
                  "slices (default 1: balanced; 1.5: a router before it balances)")
      ->check(finite_number(1, false, "", "X>=1"));
  cmd->add_option("--expert-load-file", a->expert_load_file,
                  "An MoE model's measured routing: each expert's relative load (e.g. tokens per expert), one number "
                  "per expert separated by spaces, commas or lines, # comments; every candidate with expert slices is "
                  "ranked with each slice's load the sum of its experts' (gen 3d --expert-load-file)");
  cmd->add_flag("--a2a-overlap", a->a2a_overlap,
                "An MoE model: every candidate with expert slices overlaps its all-to-alls with another microbatch's "
                "compute (gen 3d --a2a-overlap: Megatron-LM's --overlap-moe-expert-parallel-comm, DualPipe's pairs)");
  cmd->add_option("--moe-dispatcher", a->moe_dispatcher,
                  "An MoE model: how its all-to-alls run, nccl (point-to-point sends, Megatron-LM's alltoall "
                  "dispatcher) or deepep (DeepEP's hierarchical dispatch: a token crosses the network once per "
                  "destination node; written as Megatron-LM's flex dispatcher, torchtitan's deepep backend)")
      ->capture_default_str();
  cmd->add_option("--schedules", a->schedules,
                  "Pipeline schedules: 1f1b, interleaved-1f1b, zb-h1, zbv, dualpipev, interleaved-zb, or all "
                  "(default: the framework's); with the degrees fixed, a comparison of schedules");
  cmd->add_option("--recompute", a->recompute, "none, selective, full (default: all three)");
  cmd->add_option("--sp", a->sp, "Sequence parallelism with TP: on, off or on,off (default on)");
  cmd->add_option("--fp8", a->fp8, "FP8 linear layers: off, on or off,on (default off)");
  cmd->add_option("--layout", a->layout, "Stage layouts: even, balanced or both (default both)");
  cmd->add_option("--tp-overlap", a->tp_overlap, "TP overlap: none, backward, full (default: the framework's)");
  cmd->add_option("--top", a->top, "Rows of the table (and labels of the SVG)")->capture_default_str()->check(count);
  cmd->add_option("--emit", a->emit, "Rows whose launch configurations are written (default 1: the winner)")
      ->capture_default_str()
      ->check(integer_in(0, 1000, "", "N>=0"));
  cmd->add_option("--threads", a->threads, "Threads (default: every core); the answer does not depend on it")
      ->check(integer_in(1, 4096, "", "N>=1"));
  cmd->add_flag("--json", a->json, "Print the plan as JSON (every simulated candidate, best first)");
  cmd->add_option("--csv", a->csv, "Write every simulated candidate to this CSV file");
  cmd->add_option("--svg", a->svg, "Draw throughput against peak memory for every candidate to this SVG file");
  cmd->add_option("--timelines", a->timelines,
                  "Draw the best candidate of each schedule (at most 6) as timelines of one pipeline replica, one "
                  "above another on a shared time axis, to this SVG file (with the degrees fixed: a comparison of "
                  "schedules)");
  cmd->callback([a, exit_code] {
    *exit_code = run(*a);
    // Output that was lost (a full disk, a closed pipe) is a failure, not a plan (issue 38).
    std::cout.flush();
    if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
      fmt::print(stderr, "trainsim plan: standard output could not be written\n");
      *exit_code = 2;
    }
  });
}

}  // namespace trainsim::apps
