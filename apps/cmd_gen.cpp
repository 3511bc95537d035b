// `trainsim gen KIND ... -o FILE`: write a generated schedule (schedules/generators.h) as .sched text, or as
// PyTorch pipelining CSV for a name ending in .csv (docs/pytorch-csv.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/hardware_options.h"
#include "apps/number_check.h"
#include "apps/output_names.h"
#include "apps/schedule_input.h"
#include "apps/stage_line.h"
#include "apps/text_file.h"
#include "hardware/memory.h"
#include "interop/framework_args.h"
#include "interop/framework_emit.h"
#include "interop/hf_config.h"
#include "schedules/generators.h"
#include "schedules/symmetry.h"
#include "schedules/hardware_sim.h"
#include "interop/pytorch_csv.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

namespace trainsim::apps {

namespace {

struct GenArgs {
  std::string kind;
  GenOptions options;
  bool no_reshard = false;
  std::string out = "-";
  HardwareOptions hardware;
  bool sim = false;
  bool json = false;
  std::string from_megatron, from_torchtitan;  // a framework's configuration (interop/framework_args.h)
  std::set<std::string> given;                 // the options given on the command line (by long name)
  bool allow_oom = false;  // --allow-oom: a step over the device's memory passes (a what-if)
  bool full = false;       // --full: simulate every rank, not one representative of each symmetric class
  long long global_batch = 0;  // --global-batch (0: not given)
  std::string expert_load_file;  // --expert-load-file (per-expert loads)
  int bucket_layers = 0;   // --bucket-layers (0: not given)
  double bucket_mb = 0;    // --bucket-mb (0: not given: DDP's 25)
};

// The options a framework's configuration sets, which may not be given beside it.
const char* const kFrameworkSets[] = {"--stages", "--microbatches", "--global-batch", "--chunks", "--layers", "--tp",
                                      "--pp", "--cp", "--sp", "--zero", "--schedule", "--layout", "--prefetch",
                                      "--no-reshard-after-forward", "--microbatch-size", "--seq", "--recompute",
                                      "--tp-overlap", "--fp8", "--fp8-all-gather", "--attention", "--elementwise"};

// Replaces the kind, the generator options and the hardware shape with what a framework's configuration asks
// for, printing what was assumed. Returns 0, or 2 after printing why not.
int apply_framework(GenArgs& a) {
  const bool megatron = !a.from_megatron.empty();
  const std::string framework = megatron ? "Megatron-LM" : "torchtitan";
  const std::string flag = megatron ? "--from-megatron" : "--from-torchtitan";
  if (!a.from_megatron.empty() && !a.from_torchtitan.empty()) {
    fmt::print(stderr, "trainsim gen: give --from-megatron or --from-torchtitan, not both\n");
    return 2;
  }
  if (!a.kind.empty()) {
    fmt::print(stderr, "trainsim gen: {} chooses the kind: leave KIND ('{}') out\n", flag, a.kind);
    return 2;
  }
  for (const char* o : kFrameworkSets)
    if (a.given.count(o)) {
      fmt::print(stderr, "trainsim gen: {} comes from the {} configuration with {}: leave it out\n", o, framework, flag);
      return 2;
    }
  FrameworkInputs in;
  in.dp = a.options.dp;
  in.dp_given = a.given.count("--dp") > 0;
  FrameworkPlan plan;
  try {
    if (!a.hardware.model.empty()) in.model = interop::load_model(a.hardware.model);
    plan = megatron ? from_megatron(a.from_megatron, in) : from_torchtitan(a.from_torchtitan, in);
  } catch (const std::invalid_argument& e) {  // hw::SpecError too
    fmt::print(stderr, "trainsim gen: {}\n", e.what());
    return 2;
  }
  a.kind = plan.kind;
  a.options = plan.options;
  a.no_reshard = !plan.options.reshard_after_forward;
  a.hardware.model.clear();
  a.hardware.model_spec = plan.model;
  a.hardware.microbatch_size = plan.microbatch_size;
  a.hardware.seq = plan.seq;
  a.hardware.recompute = hw::recompute_name(plan.recompute);
  a.hardware.tp_overlap = hw::tp_overlap_name(plan.tp_overlap);
  a.hardware.moe_dispatcher = hw::moe_dispatcher_name(plan.moe_dispatcher);
  a.hardware.expert_gemm = hw::expert_gemm_name(plan.expert_gemm);
  a.hardware.fp8 = plan.fp8;
  a.hardware.fp8_all_gather = plan.fp8_all_gather;
  a.hardware.attention = hw::attention_name(plan.attention);
  a.hardware.elementwise = hw::elementwise_name(plan.elementwise);
  for (const std::string& n : hardware_defaults(a.hardware, false)) plan.notes.push_back(n);
  fmt::print(stderr, "trainsim gen: from {}: {}\n  model {}\n", framework, gen_command(plan), hw::spec_text(plan.model));
  for (const std::string& n : plan.notes) fmt::print(stderr, "  note: {}\n", n);
  return 0;
}

// DDP's default bucket_cap_mb (torch.nn.parallel.DistributedDataParallel): 25 MiB.
constexpr double kDdpBucketMb = 25;

// Layers per DDP gradient bucket of `mb` MiB on `setting`: DDP fills a bucket with consecutive parameters' grads,
// last layer first, and closes it once it holds at least bucket_cap_mb (its _compute_bucket_assignment_by_size),
// so a bucket holds ceil(cap / one layer's grad bytes) layers, one when a layer is larger than the cap (the
// generator's unit is the schedule layer: a layer's grads are never split between buckets). A middle layer's
// grads are the measure (the first and last also hold the embedding and the LM head).
int ddp_bucket_layers(const hw::HardwareSetting& setting, int layers, double mb) {
  hw::TensorSizes sizes(setting, layers);
  for (int l = 0; l < layers; ++l) sizes.set_experts_inside(l);  // (an MoE model under DDP: every expert's grads, EP 1)
  const double layer_bytes = sizes.wire_bytes(weight_grad_tensor(layers / 2, IdSet::range(0, 1)));
  const double cap = mb * 1024 * 1024;
  if (layer_bytes <= 0 || layer_bytes >= cap) return 1;
  return static_cast<int>(std::min<double>(layers, std::ceil(cap / layer_bytes)));
}

// --bucket-layers and --bucket-mb into GenOptions::bucket_layers (ddp). Returns "" or the reason to refuse them.
std::string resolve_buckets(const GenArgs& a, GenOptions& opts) {
  if (a.bucket_layers > 0 && a.bucket_mb > 0) return "give --bucket-layers or --bucket-mb, not both";
  if ((a.bucket_layers > 0 || a.bucket_mb > 0) && a.kind != "ddp")
    return fmt::format("--bucket-layers and --bucket-mb are options of ddp, not of {}", a.kind);
  if (a.bucket_layers > 0) {
    opts.bucket_layers = a.bucket_layers;
    return "";
  }
  if (a.kind != "ddp") return "";
  if (!a.hardware.any()) {
    if (a.bucket_mb > 0)
      return "--bucket-mb needs the model (--model, --device, --network): the generator counts buckets in layers; "
             "without a model give --bucket-layers";
    return "";  // one layer per bucket
  }
  try {
    const int layers = opts.layers == 0 ? 4 : opts.layers;
    opts.bucket_layers = ddp_bucket_layers(hardware_setting(a.hardware), layers, a.bucket_mb > 0 ? a.bucket_mb : kDdpBucketMb);
  } catch (const hw::SpecError& e) {
    return e.what();
  }
  return "";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The fields `gen --sim --json` prints for every cost model: the kind, the outcome (`error`: why the step
// fails, "" when it passes), the shape, the timings.
nlohmann::ordered_json run_json(const GenArgs& a, const ScheduleHeader& h, const SimResult& r, const std::string& error,
                                double generate_seconds, double sim_seconds) {
  nlohmann::ordered_json j;
  j["kind"] = a.kind;
  j["ok"] = error.empty();
  j["error"] = error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(error);
  j["world_size"] = h.world_size;
  j["layers"] = h.layers;
  j["microbatches"] = h.microbatches;
  j["cost_model"] = h.cost_model;
  j["ops"] = r.op_count;
  j["generate_seconds"] = generate_seconds;
  j["sim_seconds"] = sim_seconds;
  return j;
}

// `gen --sim`: simulate the generated schedule in memory and print what `trainsim sim` would. A source that makes
// each rank's ops when asked (the pipeline kinds) is simulated one rank at a time: its ops are made while it is
// simulated, and generate_seconds is the work done for all ranks at once.
int simulate_generated(const GenArgs& a, const GenOptions& opts, const RankSource& src, double generate_seconds,
                       StageLine& stage) {
  const ScheduleHeader& h = src.header();
  // A symmetric schedule (3d, tp) on the hardware model: one representative rank of each stage, exactly the full
  // simulation's figures (schedules/symmetry.h), unless --full.
  std::vector<int> mirror;
  if (h.cost_model == "hardware" && !a.full)
    if (const auto grid = rank_grid(a.kind, opts)) mirror = symmetric_mirror(h, *grid);
  const int simulated = simulated_ranks(mirror, h.world_size);
  std::function<void(int, int)> progress;
  if (src.holds_all()) {
    stage.show(fmt::format("simulating {} ops on {} ranks", src.op_estimate(), h.world_size));
  } else {
    stage.show(fmt::format("generating and simulating {} ranks", h.world_size));
    progress = [&stage](int issued, int ranks) {
      stage.show(fmt::format("generating and simulating rank {} of {}", issued, ranks));
    };
  }
  if (h.cost_model == "hardware") {
    const auto started = std::chrono::steady_clock::now();
    HardwareRun run = simulate_hardware(src, false, progress, mirror);
    stage.clear();
    // Out of device memory fails the step (unless --allow-oom), its figures still reported.
    const std::string failure = step_failure(run, a.allow_oom);
    if (a.json) {
      nlohmann::ordered_json j = run_json(a, h, run.result, failure, generate_seconds, seconds_since(started));
      j["simulated_ranks"] = simulated;
      if (run.report) j.update(hw::to_json(*run.report));
      std::cout << j.dump(2) << "\n";
    } else if (run.report) {
      const std::string symmetric =
          mirror.empty() ? "" : fmt::format("; {} representative ranks simulated, --full for all", simulated);
      fmt::print("{}: {} ops on {} ranks, {} layers, {} microbatches (hardware cost model{})\n{}", a.kind,
                 run.result.op_count, h.world_size, h.layers, h.microbatches, symmetric,
                 hw::format_report(*run.report, *h.hardware));
      if (!failure.empty()) fmt::print(stderr, "trainsim gen: {}\n", failure);
    } else {
      fmt::print(stderr, "trainsim gen: the generated schedule is invalid: {}\n", run.result.error);
    }
    return failure.empty() ? 0 : 1;
  }
  // Only the figures are printed: no per-op records (at 16,384 ranks they would double the memory).
  SimOptions options;
  options.record_trace = false;
  options.progress = progress;
  const auto started = std::chrono::steady_clock::now();
  SimResult r = simulate(src, options);
  const double sim_seconds = seconds_since(started);
  stage.clear();
  const RunSummary& sum = r.summary;
  if (a.json) {
    nlohmann::ordered_json j = run_json(a, h, r, r.ok ? "" : r.error, generate_seconds, sim_seconds);
    j["timesteps"] = to_seconds(sum.timesteps);
    j["makespan"] = to_seconds(sum.makespan);
    j["bubble_fraction"] = sum.bubble_fraction;
    j["max_memory"] = sum.peak.memory;
    j["max_memory_rank"] = sum.peak.rank;
    j["max_memory_time"] = to_seconds(sum.peak.time);
    j["memory_unit"] = r.trace.memory_unit;
    std::cout << j.dump(2) << "\n";
  } else if (r.ok) {
    fmt::print("{}: {} ops on {} ranks: makespan {}  bubble {:.1f}%  peak memory {} {} at rank {} ({} cost model; "
               "generated in {:.2f} s, simulated in {:.2f} s)\n",
               a.kind, r.op_count, h.world_size, format_time(sum.makespan), 100 * sum.bubble_fraction,
               format_memory(sum.peak.memory), r.trace.memory_unit, sum.peak.rank, h.cost_model,
               generate_seconds, sim_seconds);
  } else {
    fmt::print(stderr, "trainsim gen: the generated schedule is invalid: {}\n", r.error);
  }
  return r.ok ? 0 : 1;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& k : names) s += (s.empty() ? "" : ", ") + k;
  return s;
}

std::string kind_list() { return joined(generator_kinds()); }

// The kinds of the registry by family, for --help: every kind that is not data parallel, pp-fsdp, tp or 3d is a
// pipeline, so a kind added to the registry is listed without editing this.
std::string kinds_summary() {
  const std::set<std::string> data_parallel = {"ddp", "zero1", "zero2", "fsdp", "zero3-owner"};
  std::vector<std::string> pipelines, data, hybrid, tensor, three_d, expert;
  for (const auto& k : generator_kinds())
    (data_parallel.count(k) ? data : k == "pp-fsdp" ? hybrid : k == "tp" ? tensor : k == "3d" ? three_d
                                     : k == "ep" ? expert : pipelines)
        .push_back(k);
  std::string s = "Kinds: pipelines " + joined(pipelines) +
                  " (--stages, --microbatches per step, --chunks per rank for the interleaved and looped ones)";
  if (!data.empty())
    s += "; data parallel " + joined(data) +
         " (--dp ranks, --layers, --microbatches per rank, --prefetch, --no-reshard-after-forward, --bucket-mb or "
         "--bucket-layers; their collectives overlap the compute on communication streams)";
  if (!hybrid.empty()) s += "; pipeline + FSDP " + joined(hybrid) + " (--stages, --dp replicas, --microbatches per replica)";
  if (!tensor.empty())
    s += "; tensor parallel " + joined(tensor) + " (--tp ranks in one TP group, --layers, --microbatches, --sp)";
  if (!three_d.empty())
    s += "; 3D parallel " + joined(three_d) +
         " (--tp x --pp x --dp ranks, rank = tp + T * (dp + D * pp), TP fastest as in Megatron-LM and torchtitan's "
         "mesh [\"pp\", \"dp\", \"tp\"]; --schedule 1f1b|interleaved-1f1b|zb-h1|zbv|dualpipev|interleaved-zb, --chunks, "
         "--layers, --microbatches per replica, --sp, --zero 1|3, --cp for context parallelism)";
  if (!expert.empty())
    s += "; expert parallel (Mixture of Experts) " + joined(expert) +
         " (--dp ranks in EP groups of --ep; 3d --ep: of each stage's --tp x --cp x --dp ranks; --layers, --dense-layers "
         "first layers without experts, --microbatches per rank; .sched version 3; on the hardware model with an MoE "
         "--model: mixtral-8x7b, qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3)";
  return s + ".";
}

int run(GenArgs& a) {
  if (!a.from_megatron.empty() || !a.from_torchtitan.empty()) {
    if (int code = apply_framework(a); code != 0) return code;
  } else if (a.kind.empty()) {
    fmt::print(stderr,
               "trainsim gen: KIND is required (one of {}), or --from-megatron / --from-torchtitan\nRun `trainsim gen "
               "--help` for the options.\n",
               kind_list());
    return 2;
  }
  bool known = false;
  for (const auto& k : generator_kinds()) known = known || k == a.kind;
  if (!known) {
    fmt::print(stderr, "trainsim gen: unknown kind '{}' (the kinds are: {})\n", a.kind, kind_list());
    return 2;
  }
  if (a.json && !a.sim) {
    fmt::print(stderr, "trainsim gen: --json goes with --sim\n");
    return 2;
  }
  GenOptions opts = a.options;
  opts.reshard_after_forward = !a.no_reshard;
  if (a.global_batch > 0) {
    // The global batch in sequences, as users think of it: the microbatches per replica it means.
    if (a.given.count("--microbatches")) {
      fmt::print(stderr, "trainsim gen: give --global-batch or --microbatches, not both\n");
      return 2;
    }
    try {
      opts.microbatches = microbatches_for_global_batch(a.kind, opts, a.global_batch, a.hardware.microbatch_size);
    } catch (const std::invalid_argument& e) {
      fmt::print(stderr, "trainsim gen: {}\n", e.what());
      return 2;
    }
  }
  const bool expert_slices = a.kind == "ep" || (a.kind == "3d" && opts.ep > 1);
  if (!expert_slices && (!opts.expert_load.empty() || !a.expert_load_file.empty() || opts.moe_imbalance != 0)) {
    fmt::print(stderr, "trainsim gen: {}: the schedule has no expert slices to load (gen ep, or gen 3d --ep)\n",
               !opts.expert_load.empty() ? "--expert-load" : !a.expert_load_file.empty() ? "--expert-load-file"
                                                                                          : "--moe-imbalance");
    return 2;
  }
  if (!a.expert_load_file.empty()) {
    try {
      opts.per_expert_load = read_expert_loads(a.expert_load_file);
    } catch (const std::invalid_argument& e) {
      fmt::print(stderr, "trainsim gen: --expert-load-file: {}\n", e.what());
      return 2;
    }
  }
  if (a.hardware.any()) {
    // With a model, one schedule layer per transformer block unless --layers says otherwise (the physical default:
    // docs/hardware-model.md §5); the device and network every command assumes when left out.
    try {
      const hw::HardwareSetting hs = hardware_setting(a.hardware);
      if (!a.given.count("--layers")) opts = per_block_layers(a.kind, opts, hs.model.blocks);
      if ((a.kind == "ep" || (a.kind == "3d" && opts.ep > 1)) && !hs.model.moe())
        throw std::invalid_argument(fmt::format("{}: the model '{}' has no experts (model.experts=0): expert "
                                                "parallelism needs a Mixture-of-Experts model (mixtral-8x7b, "
                                                "qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3, or experts=... in a JSON model)",
                                                a.kind, hs.model.preset));
      if (!a.given.count("--dense-layers"))
        opts = model_dense_layers(a.kind, opts, hs.model.blocks, hs.model.dense_blocks);
      check_expert_load_count(opts.per_expert_load, hs.model.experts, hs.model.preset,
                              "--expert-load-file: " + a.expert_load_file);
    } catch (const std::invalid_argument& e) {  // hw::SpecError too
      fmt::print(stderr, "trainsim gen: {}\n", e.what());
      return 2;
    }
    if (a.from_megatron.empty() && a.from_torchtitan.empty())
      for (const std::string& n : hardware_defaults(a.hardware, false)) fmt::print(stderr, "trainsim gen: note: {}\n", n);
  }
  if (std::string why = resolve_buckets(a, opts); !why.empty()) {
    fmt::print(stderr, "trainsim gen: {}\n", why);
    return 2;
  }
  std::unique_ptr<RankSource> src;
  StageLine stage("trainsim gen");
  stage.show(fmt::format("generating {}", a.kind));
  const auto started = std::chrono::steady_clock::now();
  try {
    src = generate_ranks(a.kind, opts);
  } catch (const std::invalid_argument& e) {
    stage.clear();
    fmt::print(stderr, "trainsim gen: {}\n", e.what());
    return 2;
  }
  double generate_seconds = seconds_since(started);
  stage.clear();
  if (a.hardware.any()) {
    try {
      apply_hardware(src->header(), a.hardware);
      // 3d --cp: the CP groups are in the header; the cost model splits each sequence over them.
      if (a.kind == "3d" && opts.cp > 1) {
        src->header().hardware->context_parallel = opts.cp;
        src->header().hardware->validate("--cp");
      }
    } catch (const hw::SpecError& e) {
      fmt::print(stderr, "trainsim gen: {}\n", e.what());
      return 2;
    }
  }
  // A CSV that cannot hold the schedule is refused before any simulation; .sched text is printed after it (the
  // text of 10 M ops and the simulation need not be in memory at once). Only what is written needs every rank's
  // ops at once: `gen --sim` alone simulates the source rank by rank.
  const bool write = !a.sim || a.out != "-";
  const bool csv = a.out != "-" && extension(a.out) == ".csv";
  Schedule s;
  if (write) {
    stage.show(fmt::format("generating {}", a.kind));
    const auto again = std::chrono::steady_clock::now();
    s = src->take();
    src = std::make_unique<ScheduleView>(s);
    generate_seconds += seconds_since(again);
    stage.clear();
  }
  std::string text;
  if (write && csv) {
    try {
      text = export_pytorch_csv(s, CsvForm::ComputeOnly);
    } catch (const std::invalid_argument& e) {
      fmt::print(stderr, "trainsim gen: cannot write {}: a PyTorch pipelining CSV cannot hold this {} schedule: {}\n",
                 a.out, a.kind, e.what());
      return 2;
    }
  }
  const int code = a.sim ? simulate_generated(a, opts, *src, generate_seconds, stage) : 0;
  if (!write) return code;
  if (!csv) {
    stage.show(fmt::format("writing {} ops", s.op_count()));
    text = print_schedule(s);
    stage.clear();
  }
  if (a.out == "-") {
    std::cout << text;
    std::cout.flush();
    return std::cout ? code : 2;
  }
  if (!write_output("trainsim gen", a.out, text)) return 2;
  return code;
}

}  // namespace

void add_gen_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GenArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gen",
      "Generate a schedule (unit cost model, per-pair channels) and write it to -o FILE: a PyTorch pipelining CSV "
      "for a name ending in .csv (compute-only, as trainsim convert writes it; pipelines only), else .sched text "
      "(NAME.sched, a name without an extension, or - for standard output). " +
          kinds_summary() +
          " --layout gives each stage its blocks (Megatron-LM's layout grammar). --from-megatron \"ARGS\" and "
          "--from-torchtitan \"FLAGS\" take the kind, options and model from a framework's own configuration "
          "(docs/frameworks.md). --model/--device/--network (with --microbatch-size, --seq, --recompute, --set) put "
          "the hardware cost model in the header; --sim simulates instead of writing. Exit status: 0 written (with "
          "--sim: valid, and on the hardware model within the device's memory); 1 with --sim, the generated "
          "schedule is invalid or runs out of device memory (the figures are still printed; --allow-oom passes it); "
          "2 a bad option, a schedule the output's format cannot hold, or an output that cannot be written.");
  cmd->add_option("KIND", args->kind,
                  "What to generate: one of " + kind_list() + " (left out with --from-megatron or --from-torchtitan)");
  // Counts of 0 or less (or that wrap an int) are refused whatever the kind, even where the kind ignores the option.
  const CLI::Validator count = integer_in(1, std::numeric_limits<int>::max(), "", "N>=1");
  const CLI::Validator count0 = integer_in(0, std::numeric_limits<int>::max(), "", "N>=0");
  cmd->add_option("--stages", args->options.stages, "Pipeline stages (pipeline kinds, pp-fsdp)")
      ->check(count)
      ->capture_default_str();
  cmd->add_option("--microbatches", args->options.microbatches,
                  "Microbatches of the step (pipelines, tp); per rank (ddp, zero1, zero2, fsdp, zero3-owner, ep); per "
                  "replica (pp-fsdp, 3d)")
      ->check(count)
      ->capture_default_str();
  cmd->add_option("--global-batch", args->global_batch,
                  "Sequences per step over every replica, instead of --microbatches: the microbatches per replica are "
                  "it / (data-parallel degree x --microbatch-size); refused when it does not divide")
      ->check(integer_in(1, std::numeric_limits<int>::max(), "", "N>=1"));
  cmd->add_option("--chunks", args->options.chunks,
                  "Model chunks per rank (interleaved-1f1b, looped-bfs, interleaved-zb; zbv and dualpipev hold 2)")
      ->check(count)
      ->capture_default_str();
  cmd->add_option("--layers", args->options.layers,
                  "Schedule layers of the data-parallel kinds, tp and 3d. Default: with --model one per transformer "
                  "block (3d: each stage chunk's blocks, evenly split or as --layout gives them); without a model 4 "
                  "(3d: one per stage chunk, --pp x --chunks, or 4 when that is 1). A schedule layer is a modelling "
                  "unit (docs/hardware-model.md §5)")
      ->check(count0)
      ->capture_default_str();
  cmd->add_option("--dp", args->options.dp,
                  "Data-parallel degree: ranks (ddp, zero1, zero2, fsdp, zero3-owner, ep), replicas (pp-fsdp, 3d)")
      ->check(count)
      ->capture_default_str();
  cmd->add_option("--tp", args->options.tp,
                  "Tensor-parallel degree (tp, 3d): ranks splitting every layer, 1 to 64 (Megatron-LM's tensor "
                  "parallelism; docs/design.md, Tensor parallelism)")
      ->check(count)
      ->capture_default_str();
  cmd->add_option("--pp", args->options.pp, "Pipeline stages (3d)")->check(count)->capture_default_str();
  cmd->add_option("--ep", args->options.ep,
                  "Expert-parallel degree (ep, 3d): ranks per EP group; each holds 1/ep of every MoE layer's experts "
                  "and reaches the others with all-to-alls (docs/design.md, Mixture of Experts). ep: dividing --dp. "
                  "3d: every --schedule, DDP, --zero 1 or 3, --cp; the EP groups are consecutive ranks of a stage's "
                  "--tp x --cp x --dp ranks (Megatron-Core's folded layout, expert TP 1): ep divides --tp x --cp x --dp "
                  "and, with --tp above 1, is a multiple of it, with --sp (see --etp)")
      ->check(count)
      ->capture_default_str();
  cmd->add_option("--etp", args->options.etp,
                  "3d --ep: expert tensor parallelism, 1 (default: each expert slice whole beside TP, as "
                  "Megatron-Bridge's MoE recipes run) or --tp (each expert slice split over its TP group, "
                  "Megatron-LM's default --expert-tensor-parallel-size; the tokens all-gathered and the experts' output "
                  "reduce-scattered over it). With --etp --tp an EP group holds one TP index of --ep TP groups: --ep "
                  "divides --cp x --dp")
      ->check(count)
      ->capture_default_str();
  cmd->add_option("--dense-layers", args->options.dense_layers,
                  "ep, 3d --ep: the first layers without experts (DeepSeek-V3 has 3); the others are MoE layers. With --model: "
                  "by default the layers that hold only the model's dense blocks (its dense_blocks)")
      ->check(count0)
      ->capture_default_str();
  cmd->add_option("--expert-load", args->options.expert_load,
                  "ep, 3d --ep: the relative token load of each expert slice, one per slice (--ep of them), e.g. measured router "
                  "statistics: 1.5,0.5 gives slice 0 three times slice 1's tokens; its compute and its tokens' memory "
                  "scale so (the header's expert_load line). Default: balanced")
      ->delimiter(',');
  cmd->add_option("--expert-load-file", args->expert_load_file,
                  "ep, 3d --ep: the relative token load of each expert, from a file (e.g. a router's measured tokens "
                  "per expert: numbers separated by spaces, commas or lines, # comments), as many as the model has "
                  "experts; each expert slice's load is the sum of its experts' (slice j holding experts j·E/ep to "
                  "(j+1)·E/ep - 1)");
  cmd->add_option("--moe-imbalance", args->options.moe_imbalance,
                  "ep, 3d --ep: the busiest expert slice's load over the mean (dropless routing's max/mean, at least 1 and below "
                  "--ep): slice 0 gets it, the others share the rest evenly");
  cmd->add_flag("--a2a-overlap", args->options.a2a_overlap,
                "3d --ep: run a forward and the backward after it (both of MoE layers, of different microbatches: "
                "1F1B's steady state, DualPipeV's pairs) interleaved, each one's all-to-alls on a communication stream "
                "under the other's compute, as DeepSeek-V3's DualPipe and Megatron-LM's "
                "--overlap-moe-expert-parallel-comm do");
  cmd->add_option("--cp", args->options.cp,
                  "Context parallelism (3d): ranks splitting each sequence, ring attention over the CP group; rank = "
                  "tp + T * (cp + C * (dp + D * pp)), CP next to TP as in Megatron-LM and torchtitan")
      ->check(count)
      ->capture_default_str();
  cmd->add_flag("--sp", args->options.sequence_parallel,
                "Sequence parallelism (tp, 3d): partial sums reduce-scattered into sequence shards over the TP group, "
                "all-gathered before the next pass (Korthikanti et al. 2022); a no-op with --tp 1");
  cmd->add_option("--zero", args->options.zero,
                  "Data parallelism of 3d: 1 = ZeRO-1 (optimizer state sharded, as zero1), 3 = FSDP of each TP "
                  "slice; without it, DDP (grads all-reduced)")
      ->check(integer_in(0, 3, "", "1|3"));
  cmd->add_option("--schedule", args->options.schedule,
                  "Pipeline order of 3d: 1f1b, interleaved-1f1b or interleaved-zb (with --chunks), zb-h1, zbv or "
                  "dualpipev (two chunks per stage in V placement)")
      ->capture_default_str();
  cmd->add_option("--layout", args->options.layout,
                  "Stage layout, Megatron-LM's --pipeline-model-parallel-layout: the blocks of each schedule layer "
                  "(stage or stage chunk, in order), E the embedding (first), t a block, L the LM head and loss "
                  "(last), | between stages, X*N and (...)*N repeats, e.g. Et*3|t*4|t*4|t*3L (docs/"
                  "schedule-format.md, Stage layouts); written to the header's layout line. Without it: the blocks "
                  "split evenly");
  cmd->add_option("--prefetch", args->options.prefetch,
                  "fsdp: how many layers' all-gathers are prefetched on the all-gather stream (FSDP2's default 1: "
                  "the next layer's; its forward runs one layer further ahead, as FSDP2 frees an all-gather's output "
                  "a layer late); 0: none overlaps compute. More prefetch hides more communication and holds more "
                  "gathered weights")
      ->check(count0)
      ->capture_default_str();
  cmd->add_flag("--no-reshard-after-forward", args->no_reshard,
                "fsdp: keep each gathered weight from its forward until its backward (by default only the last "
                "layer's is kept, as torchtitan does)");
  cmd->add_option("--bucket-layers", args->bucket_layers,
                  "ddp: layers per gradient bucket, all-reduced on the communication stream during the backward once "
                  "its last grad is ready (default: from --bucket-mb with --model, else 1)")
      ->check(count);
  cmd->add_option("--bucket-mb", args->bucket_mb,
                  "ddp: DDP's bucket_cap_mb, in MiB (default 25, PyTorch's), turned into layers per bucket from the "
                  "model's grad bytes (needs --model/--device/--network)")
      ->check(finite_number(0, true, "MiB", "MB>0"));
  cmd->add_option("-o,--output", args->out,
                  "Output file: NAME.csv (PyTorch pipelining CSV), NAME.sched or a name without an extension (.sched "
                  "text), or - for standard output (.sched text; with --sim: written only when given)")
      ->capture_default_str()
      ->check(output_named({".sched", ".csv"}, ".sched text or PyTorch pipelining CSV", "NAME.sched|NAME.csv"));
  add_hardware_options(cmd, args->hardware);
  cmd->add_flag("--sim", args->sim,
                "Simulate the generated schedule in memory and print its report (with --model/--device/--network: "
                "step time, tokens/s, MFU, bubble, exposed communication, memory); exits 1 when it is invalid");
  cmd->add_flag("--json", args->json, "With --sim: print the report as JSON");
  cmd->add_option("--from-megatron", args->from_megatron,
                  "A Megatron-LM argument line, quoted (\"--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 "
                  "--micro-batch-size 1 --global-batch-size 512 --num-layers 80 ... --bf16\"): generates gen 3d with the "
                  "model, microbatch size, sequence length, recomputation and stage layout it describes (docs/"
                  "frameworks.md lists the flags read; others are refused by name). --dp gives the data-parallel degree "
                  "(default 1), --model a base model, --device and --network the machine (default " +
                      std::string(kDefaultDevice) + ", " + kDefaultNetwork + ")");
  cmd->add_option("--from-torchtitan", args->from_torchtitan,
                  "A torchtitan command line, quoted (\"--model.flavor 8B --parallelism.tensor_parallel_degree 8 "
                  "--training.local_batch_size 2 ...\"): generates gen 3d, fsdp, ddp or a pipeline kind with the model "
                  "and shape it describes (docs/frameworks.md); --dp gives the data-parallel degree where "
                  "data_parallel_shard_degree is -1 (torchtitan's default: the rest of the world)");
  cmd->add_flag("--allow-oom", args->allow_oom,
                "With --sim on the hardware model: a step that runs out of device memory passes (exit 0, ok, the oom "
                "object still reported), for a what-if");
  cmd->add_flag("--full", args->full,
                "With --sim on the hardware model: simulate every rank. By default a 3d or tp schedule whose ranks of a "
                "stage sit alike on the network is simulated on one representative rank per stage, which gives the "
                "same figures to the last bit (docs/planning.md, \"Symmetry\")");
  cmd->callback([args, exit_code, cmd] {
    for (const CLI::Option* o : cmd->get_options())
      if (o->count() > 0 && !o->get_lnames().empty()) args->given.insert("--" + o->get_lnames().front());
    *exit_code = run(*args);
  });
}

}  // namespace trainsim::apps
