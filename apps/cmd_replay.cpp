// `trainsim replay FILE`: train the executor's model by replaying a schedule with real tensors (exec/).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <iostream>
#include <memory>
#include <new>
#include <string>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/json_text.h"
#include "apps/number_check.h"
#include "apps/output_names.h"
#include "apps/schedule_input.h"
#include "apps/text_file.h"
#include "apps/training_log.h"
#include "apps/replay_prediction.h"
#include "exec/backend.h"
#include "exec/checkpoint.h"
#include "exec/dist/env.h"
#include "exec/dist/rendezvous.h"
#include "exec/training.h"
#include "hardware/model.h"  // hw::ModelSpec::kMaxCapacityFactor
#include "schedules/limits.h"
#include "schedules/memory_breakdown.h"
#include "schedules/text_format.h"
#include "visualize/perfetto.h"
#include "visualize/timeline_svg.h"
#include "visualize/trace_compare.h"
#include "visualize/training_plot.h"

namespace trainsim::apps {

namespace {

struct ReplayArgs {
  std::string file;
  std::string backend = "cpu";
  std::string preset = "small";
  // Not given: the preset's (every option below that is a std::optional: not given = the default).
  std::optional<int> blocks, dim, heads, ffn, seq, microbatch_size, experts, top_k, dense_blocks;
  std::optional<double> capacity_factor, aux_loss_coeff;
  int steps = 20;
  std::optional<int> stop_after;
  std::uint64_t seed = 1;
  std::optional<float> lr, min_lr, weight_decay, grad_clip;
  std::optional<int> warmup;
  bool check = false;
  double tolerance = 1e-5;
  std::string data;
  std::string save, resume, trace, svg;
  int trace_steps = 1;
  int eval_every = 0;
  int eval_sequences = 32;
  std::string log, plot, compare_svg;
  std::string recompute = "none";
  std::string predict_device = "cpu";
  bool json = false;
  double timeout = 300;
  int microbatches = 0;  // 0: not given (a CSV's own count)
  std::string stage_map;
  // One process per rank (exec/dist/): where rank 0 listens when Slurm or Open MPI started us, how long the
  // rendezvous may take, and (the tests' build only) a rank that kills itself at an op.
  std::string master_addr;
  int master_port = 0;
  double rendezvous_timeout = 300;
  bool insecure = false;  // a job of several processes without TRAINSIM_TOKEN
  std::string test_kill_at;
};

constexpr const char* kCmd = "trainsim replay";
// Bounds of the numeric options (docs/executor.md, "Options and their ranges").
constexpr int kMaxSteps = 10'000'000;  // the losses of every step are kept (and printed by --json)
constexpr double kMinTimeout = 0.001, kMaxTimeout = 7 * 24 * 3600.0;  // seconds: a millisecond to a week

std::string mib(double bytes) { return fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024.0)); }

// The hardware cost model's prediction of the replay (apps/replay_prediction.h), when it could be made.
struct Prediction {
  double step_seconds = 0;
  std::vector<MemoryBreakdown> memory;  // per rank
};

nlohmann::ordered_json result_json(const ReplayArgs& a, const exec::ReplayResult& r,
                                   const std::optional<Prediction>& predicted = {}) {
  nlohmann::ordered_json j;
  j["ok"] = r.ok;
  j["error"] = r.ok ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.error);
  j["file"] = a.file;
  j["backend"] = a.backend;
  j["model"] = r.model_description;
  j["data"] = r.data_description;
  j["first_step"] = r.first_step;
  j["losses"] = r.losses;
  if (!r.aux_losses.empty()) j["aux_losses"] = r.aux_losses;  // (an MoE model with the load-balancing loss)
  j["learning_rates"] = r.learning_rates;
  j["grad_norms"] = r.grad_norms;
  j["clip_coefficients"] = r.clip_coefficients;
  j["step_seconds"] = r.step_seconds;
  j["step_tokens_per_s"] = r.step_tokens_per_s;
  j["step_peak_bytes"] = r.step_peak_bytes;
  nlohmann::ordered_json evals = nlohmann::ordered_json::array();
  for (const exec::Evaluation& e : r.evaluations)
    evals.push_back(nlohmann::ordered_json{{"step", e.step}, {"loss", e.loss}, {"seconds", e.seconds}});
  j["evaluations"] = evals;
  j["tokens_per_step"] = r.tokens_per_step;
  j["seconds"] = r.seconds;
  j["tokens_per_s"] = r.tokens_per_s;
  j["peak_bytes"] = r.peak_bytes;
  j["schedule_tensor_bytes"] = r.schedule_tensor_bytes;
  j["recompute"] = a.recompute;
  if (predicted) {
    std::vector<double> peaks;
    nlohmann::ordered_json parts = nlohmann::ordered_json::array();
    for (const MemoryBreakdown& b : predicted->memory) {
      peaks.push_back(b.total());
      parts.push_back({{"weights", b.weights}, {"grads", b.grads}, {"optimizer", b.optimizer},
                       {"activations", b.activations}, {"working", b.working}, {"op", b.op}});
    }
    j["predicted_peak_bytes"] = peaks;
    j["predicted_memory"] = parts;
    j["predicted_step_seconds"] = predicted->step_seconds;
    j["predicted_device"] = a.predict_device;
  } else {
    j["predicted_peak_bytes"] = nullptr;
  }
  if (!r.steps.empty()) j["measured_step_seconds"] = static_cast<double>(r.trace.makespan()) * 1e-9;
  j["grad_clip"] = r.clip;
  j["grad_clip_note"] = r.clip_note;
  if (r.checked) {
    j["reference_losses"] = r.reference_losses;
    if (!r.reference_aux_losses.empty()) j["reference_aux_losses"] = r.reference_aux_losses;
    j["max_rel_diff_loss"] = r.max_rel_diff_loss;
    j["max_rel_diff_weights"] = r.max_rel_diff_weights;
    j["worst_parameter"] = r.worst_parameter;
    j["worst_parameter_rel_diff"] = r.worst_parameter_rel_diff;
    j["replicas_identical"] = r.replicas_identical;
    if (r.routing_diverged_step) {  // (MoE: the steps compared end there; the weights are not compared)
      j["routing_diverged_step"] = r.routing_diverged_step;
      j["routing_margin"] = r.routing_margin;
      j["routing_moved"] = r.routing_moved;
      j.erase("max_rel_diff_weights");
      j.erase("worst_parameter");
      j.erase("worst_parameter_rel_diff");
    }
  }
  return j;
}

// The progress line of a step: "step     5/20  loss 4.1234  val 4.3012  lr 1.00e-03  grad norm 0.912  clip 1.000
// 0.512 s  16000 tokens/s  peak 9.61 MiB (rank 3)".
std::string step_line(const exec::StepReport& rep) {
  std::string line = fmt::format("step {:>5}/{}  loss {:.4f}", rep.step + 1, rep.steps, rep.loss);
  if (rep.aux_loss > 0) line += fmt::format("  aux {:.4f}", rep.aux_loss);  // (the MoE load-balancing loss)
  if (rep.evaluated) line += fmt::format("  val {:.4f}", rep.validation_loss);
  // (a gradient that is no longer finite: the step's update spoilt the weights, and the next loss says so)
  const std::string norm = std::isfinite(rep.grad_norm) ? fmt::format("{:.3f}", rep.grad_norm)
                                                        : std::isnan(rep.grad_norm) ? "not finite (NaN)" : "not finite (inf)";
  line += fmt::format("  lr {:.2e}  grad norm {}  clip {:.3f}  {:.3f} s  {:.0f} tokens/s", rep.learning_rate, norm,
                      rep.clip_coefficient, rep.seconds, rep.tokens_per_s);
  if (!rep.peak_bytes.empty()) {
    const auto most = std::max_element(rep.peak_bytes.begin(), rep.peak_bytes.end());
    line += fmt::format("  peak {} (rank {})", mib(static_cast<double>(*most)), most - rep.peak_bytes.begin());
  }
  return line;
}

int usage(const std::string& what) {
  fmt::print(stderr, "{}: {}\n", kCmd, what);
  return 2;
}

int run(const ReplayArgs& a) {
  exec::ReplayOptions o;
  o.backend = a.backend;
  try {
    o.model = exec::preset(a.preset);
    exec::make_backend(a.backend);
  } catch (const std::invalid_argument& e) {
    return usage(e.what());
  }
  bool modified = false;
  for (auto [given, field] : {std::pair{&a.blocks, &o.model.blocks}, {&a.dim, &o.model.dim}, {&a.heads, &o.model.heads},
                              {&a.ffn, &o.model.ffn}, {&a.seq, &o.model.seq},
                              {&a.microbatch_size, &o.model.microbatch_size}, {&a.experts, &o.model.experts},
                              {&a.top_k, &o.model.top_k}, {&a.dense_blocks, &o.model.dense_blocks}})
    if (*given) *field = **given, modified = true;
  if (a.capacity_factor) o.model.capacity_factor = *a.capacity_factor, modified = true;
  if (a.aux_loss_coeff) o.model.aux_loss_coeff = *a.aux_loss_coeff, modified = true;
  if (modified) o.model.preset += " (modified)";
  if (a.lr) o.optimizer.lr = *a.lr, o.optimizer.min_lr = *a.lr / 10;
  if (a.min_lr) {
    if (*a.min_lr > o.optimizer.lr)
      return usage(fmt::format("--min-lr ({:g}) must be at most the peak learning rate --lr ({:g}{})", *a.min_lr,
                               o.optimizer.lr, a.lr ? "" : ", the default"));
    o.optimizer.min_lr = *a.min_lr;
  }
  if (a.weight_decay) o.optimizer.weight_decay = *a.weight_decay;
  if (a.warmup) {
    if (*a.warmup > a.steps)
      return usage(fmt::format("--warmup ({}) must be at most --steps ({})", *a.warmup, a.steps));
    o.optimizer.warmup = *a.warmup;
  }
  if (a.grad_clip) {
    o.optimizer.grad_clip = *a.grad_clip;
    o.clip_required = o.optimizer.grad_clip > 0;
  }
  try {
    o.model.validate();
    o.optimizer.validate();
  } catch (const std::invalid_argument& e) {
    return usage(e.what());
  }
  o.steps = a.steps;
  if (a.stop_after && *a.stop_after > a.steps)
    return usage(fmt::format("--stop-after ({}) must be at most --steps ({}): --steps is the whole run's length",
                             *a.stop_after, a.steps));
  o.stop_after = a.stop_after.value_or(0);
  o.seed = a.seed;
  o.check = a.check;
  o.tolerance = a.tolerance;
  o.save_dir = a.save;
  o.resume_dir = a.resume;
  o.timeout_seconds = a.timeout;
  o.trace_steps = a.trace_steps;
  o.eval_every = a.eval_every;
  o.eval_sequences = a.eval_sequences;
  try {
    o.recompute = hw::recompute_from_name(a.recompute, "--recompute");
    hw::load_device(a.predict_device);
  } catch (const hw::SpecError& e) {
    return usage(e.what());
  }
  if (!a.data.empty()) o.data_files = {a.data};
  o.schedule_name = a.file;
#ifdef TRAINSIM_TEST_FAULTS
  if (!a.test_kill_at.empty() && std::sscanf(a.test_kill_at.c_str(), "%d:%d", &o.fault.kill_rank, &o.fault.kill_op) != 2)
    return usage("--test-kill-at takes RANK:OP");
#endif

  // One process per rank when a launcher set the rank variables for a world of more than one process.
  std::optional<exec::dist::RankEnv> env;
  try {
    env = exec::dist::read_rank_env(exec::dist::process_env(), {a.master_addr, a.master_port});
  } catch (const exec::dist::RankEnvError& e) {
    return usage(e.what());
  }
  if (env && env->world_size < 2) env.reset();  // a world of one process runs every rank itself
  const bool reporter = !env || env->rank == 0;
  if (env) {
    exec::dist::RendezvousOptions ro;
    ro.timeout_seconds = a.rendezvous_timeout;
    // The token comes from the environment only: a command line is visible to every user of the machine (ps).
    ro.token = exec::dist::process_env()("TRAINSIM_TOKEN").value_or("");
    ro.insecure = a.insecure;
    if (std::string why = exec::dist::token_problem(ro.token, ro.insecure); !why.empty()) return usage(why);
    ro.log = [](const std::string& m) { fmt::print(stderr, "{}: {}\n", kCmd, m); };
    if (env->rank == 0 && ro.token.empty())
      fmt::print(stderr, "{}: --insecure and no TRAINSIM_TOKEN: any process that reaches {}:{} may join this job\n",
                 kCmd, env->master_addr, env->master_port);
    o.join = [env = *env, ro](const exec::JobIdentity& id) { return exec::dist::rendezvous(env, id, ro); };
  }

  Schedule s;
  try {
    ScheduleInputOptions in;
    in.microbatches = a.microbatches;
    in.stage_map = a.stage_map;
    s = load_schedule_input(a.file, in);
  } catch (const std::exception& e) {
    if (a.json && reporter) {
      exec::ReplayResult r;
      r.error = e.what();
      std::cout << json_text(result_json(a, r)) << "\n";
    } else {
      fmt::print(stderr, "{}: {}\n", kCmd, e.what());
    }
    // 2: no such file or puzzle, a directory, no permission; 1: a schedule that is wrong.
    return dynamic_cast<const UnreadableInput*>(&e) ? 2 : 1;
  }
  const ScheduleHeader& h = s.header;
  const bool tty = isatty(STDERR_FILENO);
  const int every = std::max(1, a.steps / 20);
  if (!a.json && reporter)
    fmt::print("replaying {}: {} rank{}, {} layer{}, {} microbatch{} on the {} backend{}\n", a.file, h.world_size,
               h.world_size == 1 ? "" : "s", h.layers, h.layers == 1 ? "" : "s", h.microbatches,
               h.microbatches == 1 ? "" : "es", a.backend,
               env ? fmt::format(", one process per rank ({} variables; rank 0 at {}:{})", env->source, env->master_addr,
                                 env->master_port)
                   : std::string());
  std::unique_ptr<TrainingLog> log;
  if (!a.log.empty() && reporter) {
    try {
      // A resumed run continues its log from the checkpoint's step (a checkpoint that cannot be read: the replay
      // says why, and the log starts afresh).
      int resumed_after = 0;
      if (!a.resume.empty()) try {
          resumed_after = exec::read_checkpoint_info(a.resume).step;
        } catch (const std::exception&) {
        }
      log = std::make_unique<TrainingLog>(a.log, h.world_size, resumed_after);
    } catch (const std::exception& e) {
      return usage(e.what());
    }
  }
  exec::ReplayResult r = exec::replay(s, o, [&](const exec::StepReport& rep) {
    if (log) log->step(rep);  // (throws when the file cannot be written: the replay stops, saying so)
    if (a.json) return;
    const bool line = rep.step == 0 || (rep.step + 1) % every == 0 || rep.step + 1 == rep.steps || rep.evaluated;
    if (tty) fmt::print(stderr, "\r\033[K");
    if (line) fmt::print("{}\n", step_line(rep));
    else if (tty) fmt::print(stderr, "step {}/{}  loss {:.4f}", rep.step + 1, rep.steps, rep.loss);
    std::fflush(stdout);
  });
  if (tty && !a.json) fmt::print(stderr, "\r\033[K");
  if (log) {
    if (!r.ok) log->error(r.error);
    try {
      log->close();
    } catch (const std::exception& e) {
      fmt::print(stderr, "{}: {}\n", kCmd, e.what());
      return 2;
    }
  }
  if (!reporter) {  // another rank of a multi-process job: rank 0 reports; say why this one failed
    if (!r.ok) fmt::print(stderr, "{}: rank {}: {}\n", kCmd, env->rank, r.error);
    return r.ok ? 0 : 1;
  }

  // The hardware cost model's view of the same run (apps/replay_prediction.h): what the report lays next to the
  // measurements.
  std::optional<Prediction> predicted;
  std::optional<HardwareRun> simulated;
  std::string prediction_problem;
  if (!r.trace.ranks.empty()) {
    try {
      simulated = predict_replay(s, replay_setting(o.model, a.predict_device, "cpu", o.recompute));
      const auto* cost = dynamic_cast<const hw::HardwareCostModel*>(simulated->cost.get());
      if (!simulated->report || !cost) throw std::runtime_error(simulated->result.error);
      predicted = Prediction{simulated->report->step_time_s, predicted_peak_memory(s, *cost)};
    } catch (const std::exception& e) {
      prediction_problem = e.what();
      simulated.reset();
    }
  }

  bool wrote = true;
  if (!r.trace.ranks.empty()) {
    if (!a.trace.empty() && !write_output(kCmd, a.trace, visualize::perfetto_steps_json(r.steps, {{"model", exec::to_json(o.model)}}))) {
      wrote = false;
    }
    if (!a.svg.empty()) {
      visualize::TimelineOptions t;
      t.title = fmt::format("{} - measured on the {} backend (last step)", a.file, a.backend);
      for (std::size_t b : r.peak_bytes) t.allocator_peak.push_back(static_cast<double>(b));
      if (!write_output(kCmd, a.svg, visualize::timeline_svg(r.trace, t))) {
        wrote = false;
      }
    }
    if (!a.compare_svg.empty()) {
      if (!simulated) {
        fmt::print(stderr, "{}: --compare-svg: the hardware cost model cannot simulate this replay: {}\n", kCmd,
                   prediction_problem);
        wrote = false;
      } else {
        visualize::ComparisonOptions c;
        c.title = fmt::format("{} - measured against simulated, {}", a.file, r.model_description);
        c.measured_title = fmt::format("measured on the {} backend (the last step of {})", a.backend, r.losses.size());
        c.simulated_title = fmt::format("simulated: the hardware cost model, device {}, network cpu, recompute {}",
                                        a.predict_device, a.recompute);
        for (std::size_t b : r.peak_bytes) c.allocator_peak.push_back(static_cast<double>(b));
        c.simulated_cost = simulated->cost.get();
        if (!write_output(kCmd, a.compare_svg, visualize::comparison_svg(r.trace, simulated->result.trace, c)))
          wrote = false;
      }
    }
  }
  if (!a.plot.empty() && !r.losses.empty()) {
    visualize::TrainingCurves c;
    // A resumed run with --log draws the steps before it too (the log's kept rows), so the plot continues the run.
    const std::vector<LoggedStep> before = log ? log->earlier() : std::vector<LoggedStep>{};
    const std::size_t steps = before.size() + r.losses.size();
    c.title = fmt::format("{} - {} step{} on {} rank{}", a.file, steps, steps == 1 ? "" : "s", h.world_size,
                          h.world_size == 1 ? "" : "s");
    c.note = fmt::format("model {}; data {}", r.model_description, r.data_description);
    for (const LoggedStep& e : before) {
      c.train_loss.push_back({static_cast<double>(e.step), e.loss});
      c.learning_rate.push_back({static_cast<double>(e.step), e.learning_rate});
      if (e.evaluated) c.val_loss.push_back({static_cast<double>(e.step), e.validation_loss});
    }
    for (std::size_t i = 0; i < r.losses.size(); ++i) {
      const double step = r.first_step + static_cast<double>(i) + 1;
      c.train_loss.push_back({step, r.losses[i]});
      c.learning_rate.push_back({step, r.learning_rates[i]});
    }
    for (const exec::Evaluation& e : r.evaluations) c.val_loss.push_back({static_cast<double>(e.step), e.loss});
    if (!write_output(kCmd, a.plot, visualize::training_plot_svg(c))) wrote = false;
  }
  if (a.json) {
    std::cout << json_text(result_json(a, r, predicted)) << "\n";
  } else {
    if (!r.model_description.empty()) {
      fmt::print("model {}\ndata {}; {} tokens per step\n", r.model_description, r.data_description, r.tokens_per_step);
      // (unknown when the replay stopped before its plan was made: a schedule the executor refuses)
      if (r.clip || !r.clip_note.empty())
        fmt::print("gradient clipping {}\n", r.clip ? fmt::format("at norm {:g}", o.optimizer.grad_clip) : r.clip_note);
    }
    if (!r.losses.empty() && r.tokens_per_s > 0)
      fmt::print("{} step{} in {:.2f} s, {:.0f} tokens/s\n", r.losses.size(), r.losses.size() == 1 ? "" : "s", r.seconds,
                 r.tokens_per_s);
    else if (!r.losses.empty())  // (a run that failed: no throughput)
      fmt::print("{} step{} ran\n", r.losses.size(), r.losses.size() == 1 ? "" : "s");
    if (!r.peak_bytes.empty()) {
      // Two different things (docs/executor.md §4): what the device allocator held at most, every buffer
      // counted, and the schedule's own tensors at their peak (no saved activations, no temporaries).
      fmt::print("memory per rank: measured = the device allocator's peak over the run (every buffer: tensors, saved "
                 "activations, temporaries); schedule tensors = the most the schedule's W, O, A, dA, dW hold at "
                 "once\n");
      for (std::size_t i = 0; i < r.peak_bytes.size(); ++i)
        fmt::print("  rank {:>3}  measured {}  schedule tensors {}\n", i, mib(static_cast<double>(r.peak_bytes[i])),
                   mib(static_cast<double>(r.schedule_tensor_bytes[i])));
    }
    if (predicted && !r.peak_bytes.empty()) {
      const double measured_step = static_cast<double>(r.trace.makespan()) * 1e-9;
      fmt::print("predicted by the hardware cost model (the same model, device {}, network cpu, recompute {}): step "
                 "time {:.3f} s, measured {:.3f} s (the last step); peak memory per rank, predicted = parameters + "
                 "gradients + optimizer state + activations (with what each forward saves) + working memory inside the "
                 "op at the peak\n",
                 a.predict_device, a.recompute, predicted->step_seconds, measured_step);
      for (std::size_t i = 0; i < r.peak_bytes.size() && i < predicted->memory.size(); ++i) {
        const MemoryBreakdown& b = predicted->memory[i];
        const double measured = static_cast<double>(r.peak_bytes[i]);
        fmt::print("  rank {:>3}  predicted {}  measured {} ({:+.1f} %)  = weights {} + grads {} + optimizer {} + "
                   "activations {} + working {}\n",
                   i, mib(b.total()), mib(measured), measured > 0 ? (b.total() - measured) / measured * 100 : 0.0,
                   mib(b.weights), mib(b.grads), mib(b.optimizer), mib(b.activations), mib(b.working));
      }
      const std::string miss = prediction_miss_note(predicted->step_seconds, measured_step, a.predict_device);
      if (!miss.empty()) fmt::print("{}\n", miss);
    } else if (!prediction_problem.empty() && !r.peak_bytes.empty()) {
      fmt::print("no prediction by the hardware cost model: {}\n", prediction_problem);
    }
    if (r.checked && !r.routing_diverged_step)
      fmt::print("check against single-device training: largest relative difference {:.3g} in the losses, {:.3g} in the "
                 "weights (the most in {}: {:.3g}); replicas {}identical\n",
                 r.max_rel_diff_loss, r.max_rel_diff_weights, r.worst_parameter, r.worst_parameter_rel_diff,
                 r.replicas_identical ? "" : "not ");
    else if (r.checked)
      fmt::print("check against single-device training: {}; largest relative difference {:.3g} in those losses. Step {} "
                 "routes {} token{} to another expert than one device does, or orders a token's experts otherwise ({} "
                 "microbatch{}; the first: microbatch {} through MoE block {}, whose closest router logits were {:.3g} "
                 "apart, relative): a near-tie within the "
                 "replay's rounding (its sums run in another order), so from there the runs are different, equally "
                 "valid trajectories and the final weights are not compared (docs/executor.md, Mixture of Experts)\n",
                 r.reference_losses.empty() ? std::string("no step compared")
                                            : fmt::format("the losses of the {} step{} before step {} compared",
                                                          r.reference_losses.size(), r.reference_losses.size() == 1 ? "" : "s",
                                                          r.routing_diverged_step),
                 r.max_rel_diff_loss, r.routing_diverged_step, r.routing_moved, r.routing_moved == 1 ? "" : "s",
                 r.routing_microbatches, r.routing_microbatches == 1 ? "" : "es", r.routing_microbatch, r.routing_block,
                 r.routing_margin);
    if (!o.save_dir.empty() && r.ok) fmt::print("saved a checkpoint in {}\n", o.save_dir);
    if (!r.ok) fmt::print(stderr, "{}: {}\n", kCmd, r.error);
  }
  if (!wrote) return 2;
  return r.ok ? 0 : 1;
}

}  // namespace

void add_replay_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ReplayArgs>();
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "Train a small Llama-style model by replaying a schedule with real tensors: every rank runs its ops on real "
      "weights, activations and gradients and exchanges real data. FILE is a .sched file, a PyTorch pipelining CSV or a "
      "puzzle name. The schedule must pass the simulator first. Prints the loss of every step; --check also trains the "
      "same model on one device (plain gradient accumulation) and compares losses and final weights. Exit status: 0 "
      "the replay (and the check) passed; 1 the schedule is wrong or the replay or its check failed; 2 a bad option, "
      "an input that cannot be read (no such file or puzzle) or an output that cannot be written.");
  cmd->add_option("FILE", a->file, "Schedule: .sched, .csv (PyTorch pipelining) or a puzzle name (basic, ddp, ...)")
      ->required();
  cmd->add_option("--backend", a->backend,
                  "Backend: cpu (oneDNN GEMMs, a few weight gradients on OpenBLAS: docs/executor.md; one thread per rank; ranks are threads, or one process per rank when RANK/WORLD_SIZE, "
                  "SLURM_PROCID/SLURM_NTASKS or OMPI_COMM_WORLD_RANK/SIZE say so, as `trainsim launch` does), or "
                  "cuda where built with it (logical ranks on one GPU; not yet run on a GPU)")
      ->capture_default_str();
  cmd->add_option("--model", a->preset,
                  "Model preset: tiny (tests) or small (trains visibly in about a minute), or their Mixture-of-Experts "
                  "variants tiny-moe (4 experts, top-2, in every block) and small-moe (8 experts of ffn 384, top-2); an "
                  "expert-parallel schedule (gen ep, gen 3d --ep) needs one (docs/executor.md, Mixture of Experts)")
      ->capture_default_str();
  const CLI::Validator size = integer_in(1, std::numeric_limits<int>::max(), "", "N>=1");
  cmd->add_option("--blocks", a->blocks, "Transformer blocks (a multiple of the schedule's layers)")->check(size);
  cmd->add_option("--dim", a->dim, "Hidden size")->check(size);
  cmd->add_option("--heads", a->heads, "Attention heads")->check(size);
  cmd->add_option("--ffn", a->ffn, "SwiGLU hidden size")->check(size);
  cmd->add_option("--seq", a->seq, "Tokens per sequence")->check(size);
  cmd->add_option("--experts", a->experts, "Routed experts of each MoE block (0: a dense model)")
      ->check(integer_in(0, 1024, "", "N"));
  cmd->add_option("--top-k", a->top_k, "Experts each token is routed to (MoE models)")->check(integer_in(0, 1024, "", "K"));
  cmd->add_option("--dense-blocks", a->dense_blocks, "MoE models: the first blocks, which keep a dense FFN")
      ->check(integer_in(0, std::numeric_limits<int>::max(), "", "N"));
  cmd->add_option("--capacity-factor", a->capacity_factor,
                  "MoE models: token dropping, each expert keeping at most C times its balanced share of a "
                  "microbatch's (token, expert) pairs, those of the largest gates (Megatron-LM's "
                  "--moe-expert-capacity-factor); 0 (default): dropless")
      ->check(number_in(0, hw::ModelSpec::kMaxCapacityFactor, "", "C"));
  cmd->add_option("--aux-loss-coeff", a->aux_loss_coeff,
                  "MoE models: the load-balancing auxiliary loss's coefficient: each MoE block adds ALPHA·E/k·Σ_e "
                  "f_e·P_e to each microbatch's loss (Switch Transformer's, as Megatron-LM's --moe-aux-loss-coeff; "
                  "ALPHA at perfect balance; reported as 'aux' beside the loss); 0 (default): none")
      ->check(number_in(0, exec::ModelConfig::kMaxAuxLossCoeff, "", "ALPHA"));
  cmd->add_option("--microbatch-size", a->microbatch_size, "Sequences per microbatch")->check(size);
  const CLI::Validator steps = integer_in(1, kMaxSteps, "", "STEPS");
  cmd->add_option("--steps", a->steps,
                  fmt::format("Training steps (the learning-rate schedule's length; at most {})", kMaxSteps))
      ->check(steps)
      ->capture_default_str();
  cmd->add_option("--stop-after", a->stop_after, "Stop after this many steps in all (to --save half-way)")->check(steps);
  cmd->add_option("--seed", a->seed, "Initialisation seed, 0 to 2^64-1")
      ->check(integer_in(0, std::numeric_limits<std::uint64_t>::max(), "", "SEED"))
      ->capture_default_str();
  // A float holds the rates; 1e-37 to 1e37 keeps them normal, finite numbers (1e-50 would be 0).
  cmd->add_option("--lr", a->lr, "Peak learning rate, 1e-37 to 1e37 (default 1e-3; the minimum is a tenth of it)")
      ->check(float_in(0, 1e37, false, "", "LR"));
  cmd->add_option("--min-lr", a->min_lr, "Learning rate at the end of the cosine decay (0, or 1e-37 up to --lr)")
      ->check(float_in(0, 1e37, true, "", "LR"));
  cmd->add_option("--warmup", a->warmup, "Warmup steps, 0 to --steps (default steps/20)")
      ->check(integer_in(0, kMaxSteps, "", "STEPS"));
  cmd->add_option("--weight-decay", a->weight_decay, "AdamW weight decay on matrices (default 0.1; 0, or 1e-37 to 1e37)")
      ->check(float_in(0, 1e37, true, "", "WD"));
  cmd->add_option("--grad-clip", a->grad_clip,
                  "Clip gradients to this global norm (1e-37 to 1e37); 0 turns it off. Default 1, turned off with a "
                  "note when the schedule updates a layer before every gradient exists (given explicitly, that is an "
                  "error)")
      ->check(float_in(0, 1e37, true, "0 turns clipping off", "NORM"));
  cmd->add_flag("--check", a->check, "Also train on one device and compare losses and final weights");
  cmd->add_option("--tolerance", a->tolerance, "Largest relative difference --check accepts")
      ->check(finite_number(0, true, "", "TOL>0"))
      ->capture_default_str();
  cmd->add_option("--data", a->data, "Training text (bytes are tokens); default: the fortunes package's files")
      ->check(CLI::Validator(
          [](std::string& v) {
            // An empty path names no file: refused rather than read as "the default corpus" (issue 38).
            return v.empty() ? std::string("an empty path names no file (leave --data out for the default corpus)")
                             : std::string();
          },
          "FILE"));
  cmd->add_option("--save", a->save, "Write a checkpoint here at the end (each rank's state and a manifest)");
  cmd->add_option("--resume", a->resume, "Continue from this checkpoint (same schedule, model, settings and data)");
  cmd->add_option("--trace", a->trace,
                  "Write the measured Chrome/Perfetto trace JSON of the last step (or of the last --trace-steps "
                  "steps) here (NAME.json)")
      ->check(output_named({".json"}, "JSON", "NAME.json"));
  cmd->add_option("--trace-steps", a->trace_steps,
                  "Steps --trace records: the last K (1 to 10000000; more than the run has: all but its first), never "
                  "the first of a run of several (it warms up); otherData.steps has each one's makespan, for trainsim "
                  "calibrate's medians")
      ->check(steps)
      ->capture_default_str();
  cmd->add_option("--eval-every", a->eval_every,
                  "Evaluate the model on the validation split (the held-out last 10% of the corpus) after every N steps "
                  "and after the last: the mean loss over --eval-sequences fixed sequences, the same on every rank "
                  "layout (0, the default: never)")
      ->check(integer_in(0, kMaxSteps, "", "N"))
      ->capture_default_str();
  cmd->add_option("--eval-sequences", a->eval_sequences, "Validation sequences per evaluation (1 to 1000000)")
      ->check(integer_in(1, 1'000'000, "", "N"))
      ->capture_default_str();
  cmd->add_option("--log", a->log,
                  "Write one row per step here as the run goes: loss, learning rate, gradient norm before clipping, clip "
                  "coefficient, step time, tokens/s, validation loss, peak memory per rank (NAME.csv, or NAME.jsonl "
                  "for JSON lines); a resumed run continues the log it finds there")
      ->check(output_named({".csv", ".jsonl"}, "a CSV or JSON-lines log", "NAME.csv|NAME.jsonl"));
  cmd->add_option("--recompute", a->recompute,
                  "Activation recomputation: none (every saved activation kept), selective (the attention "
                  "probabilities recomputed in the backward) or full (only each block's input kept; its forward "
                  "recomputed in the backward). Less memory, more time, the same results bit for bit")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->capture_default_str();
  cmd->add_option("--plot", a->plot,
                  "Write the training curves here (NAME.svg): training and validation loss and the learning rate "
                  "against steps (a resumed run with --log draws the steps before it too, from the log)")
      ->check(output_named({".svg"}, "SVG", "NAME.svg"));
  cmd->add_option("--compare-svg", a->compare_svg,
                  "Write the last step's measured timeline above the hardware cost model's simulation of the same "
                  "schedule and model, on one time scale, with the ops whose durations differ most (NAME.svg)")
      ->check(output_named({".svg"}, "SVG", "NAME.svg"));
  cmd->add_option("--predict-device", a->predict_device,
                  "The device the hardware cost model predicts the replay's step time and memory on: a preset or a "
                  "JSON file (trainsim calibrate's, fitted to this machine)")
      ->capture_default_str();
  cmd->add_option("--svg", a->svg, "Write the last step's measured timeline SVG here (NAME.svg)")
      ->check(output_named({".svg"}, "SVG", "NAME.svg"));
  const CLI::Validator seconds = number_in(kMinTimeout, kMaxTimeout, "seconds: at most a week", "SECONDS");
  cmd->add_option("--timeout", a->timeout,
                  "Seconds any rank may wait in a communication before the job fails (0.001 to 604800, a week)")
      ->check(seconds)
      ->capture_default_str();
  cmd->add_option("--microbatches", a->microbatches, "Reading a CSV: the number of microbatches")
      ->check(integer_in(1, kMaxCount, "", "N>=1"));
  cmd->add_option("--stage-map", a->stage_map, "Reading a CSV: the rank of each stage (0,1,2,3 | loop | v)")
      ->check(stage_map_check());
  cmd->add_flag("--json", a->json, "Print the result as JSON");
  cmd->add_option("--master-addr", a->master_addr,
                  "One process per rank under Slurm or mpirun: where rank 0 listens (MASTER_ADDR wins when set)");
  cmd->add_option("--master-port", a->master_port,
                  "One process per rank under Slurm or mpirun: rank 0's port, 1 to 65535 (MASTER_PORT wins when set)")
      ->check(integer_in(1, 65535, "", "PORT"));
  cmd->add_option("--rendezvous-timeout", a->rendezvous_timeout,
                  "One process per rank: seconds for every rank to join rank 0 before the job fails (0.001 to "
                  "604800, a week)")
      ->check(seconds)
      ->capture_default_str();
  cmd->add_flag("--insecure", a->insecure,
                "One process per rank: run without TRAINSIM_TOKEN, accepting any process that reaches rank 0's port "
                "(without it, a job of several processes refuses to start when TRAINSIM_TOKEN is not set)");
#ifdef TRAINSIM_TEST_FAULTS  // the tests' copy of trainsim only (CMakeLists.txt: trainsim_fault_test)
  cmd->add_option("--test-kill-at", a->test_kill_at, "Tests only: RANK:OP kills that rank's process at that op")
      ->group("");
#endif
  cmd->callback([a, exit_code] {
    // exec::replay() reports its own failures; this is for what fails around it (reading a large schedule, the
    // output) when memory runs out: a message, not std::terminate.
    try {
      *exit_code = run(*a);
    } catch (const std::bad_alloc& e) {
      fmt::print(stderr, "{}: out of memory ({})\n", kCmd, e.what());
      *exit_code = 2;  // it could not finish (README, "Exit status")
    }
  });
}

}  // namespace trainsim::apps
