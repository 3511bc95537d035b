#include "exec/training.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <map>
#include <functional>
#include <set>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <unistd.h>

#include "exec/backend.h"
#include "exec/checkpoint.h"
#include "exec/job_wire.h"
#include "exec/reference.h"
#include "exec/rank_executor.h"
#include "exec/sha256.h"
#include "exec/whole_model.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

namespace trainsim::exec {

namespace {

using Clock = std::chrono::steady_clock;

CheckpointInfo describe_run(const Schedule& s, const ReplayOptions& o, const TokenData& data) {
  CheckpointInfo info;
  info.total_steps = o.steps;
  info.schedule_hash = sha256_hex(print_schedule(s));
  info.schedule_name = o.schedule_name;
  info.world_size = s.header.world_size;
  info.model = to_json(o.model);
  info.optimizer = to_json(o.optimizer);
  info.data = data.identity();  // paths, sizes and SHA-256 of the bytes
  info.seed = o.seed;
  info.layers = s.header.layers;
  info.stage_layout = s.header.layout ? s.header.layout->str() : "";
  info.expert_parallel = expert_parallel_layers(s);
  return info;
}

// When a step started: the earliest start of any of its work on any rank (ns since the job's epoch).
std::int64_t step_start(const std::vector<std::vector<WorkTiming>>& timings) {
  std::int64_t t0 = std::numeric_limits<std::int64_t>::max();
  for (const auto& rank : timings)
    for (const WorkTiming& w : rank) t0 = std::min(t0, w.start_ns);
  return t0 == std::numeric_limits<std::int64_t>::max() ? 0 : t0;
}

// The measured timeline of one step: each rank's timed ops in program order, time zero at the step's start.
Trace measured_trace(const Schedule& s, const std::vector<std::vector<WorkTiming>>& timings, const std::string& backend) {
  Trace t;
  t.world_size = s.header.world_size;
  t.layers = s.header.layers;
  t.batches = s.header.microbatches;
  t.cost_model = "measured (" + backend + ")";
  t.memory_unit = "bytes";
  const std::int64_t t0 = step_start(timings);
  t.ranks.resize(s.ranks.size());
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    std::vector<WorkTiming> ws = timings[r];
    std::sort(ws.begin(), ws.end(), [](const WorkTiming& a, const WorkTiming& b) {
      return a.tag != b.tag ? a.tag < b.tag : a.start_ns < b.start_ns;
    });
    for (const WorkTiming& w : ws) {
      if (w.tag < 0 || w.tag >= static_cast<int>(s.ranks[r].size())) continue;
      const Op& op = s.ranks[r][w.tag];
      if (!is_timed(op.kind)) continue;
      t.ranks[r].push_back(OpRun{op, w.start_ns - t0, w.end_ns - t0, static_cast<double>(w.bytes_at_start)});
    }
  }
  return t;
}

// Squared distance and squared norm of the reference, in fp64: ‖a − b‖² and ‖b‖².
std::pair<double, double> squared_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double d = static_cast<double>(a[i]) - b[i];
    num += d * d, den += static_cast<double>(b[i]) * b[i];
  }
  return {num, den};
}

// A float as the double its shortest decimal text reads as (0.001f: 0.001, not 0.0010000000474974513), for
// reports and logs.
double shortest(float f) {
  const std::string text = fmt::format("{}", f);
  double v = f;
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v;
}

double relative(double num, double den) { return den == 0 ? std::sqrt(num) : std::sqrt(num / den); }

// The message of an allocation that failed on rank r outside an op (an op's own failures name the op).
std::string out_of_memory(int r, const std::bad_alloc& e) {
  if (dynamic_cast<const OutOfMemory*>(&e)) return fmt::format("rank {}: {}", r, e.what());
  return fmt::format("rank {}: cannot allocate host memory for the rank's step ({})", r, e.what());
}

struct Job {
  const Schedule& s;
  const ReplayOptions& o;
  const ReplayContext& ctx;
  LocalBackend& backend;
  ProcessGroup* pg;  // null: every rank runs here
  int world;
  std::vector<int> local;  // the ranks this process runs
  bool collects;           // this process sees every rank's output (the threaded form, or rank 0 of many)
  std::unique_ptr<CommHub> hub;
  std::vector<std::unique_ptr<Device>> devices;  // by rank; null where another process runs it
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<RankState> states;

  std::mutex mu;
  std::condition_variable cv;
  bool failed = false;
  std::string error;
  // By step - first: every rank's output, on the process that collects. A row goes once the step is reported,
  // unless its timings are kept for the measured trace: the memory does not grow with the steps.
  std::map<int, std::vector<std::optional<StepOutput>>> outputs;
  int complete = 0;  // steps (from first) whose every rank's output has arrived; the ranks end steps in order
  int processed = 0;  // steps (from first) the collector has reported (and evaluated)
  std::vector<std::size_t> peaks;  // by rank: the allocator's peak over the run (from the other processes, too)
  // MoE with --check: per step run (from first), (MoE block, microbatch) -> its routing's hash (StepOutput::routing)
  std::vector<std::map<std::pair<int, int>, RoutingDigest>> routing;

  Job(const Schedule& sched, const ReplayOptions& opts, const ReplayContext& c, LocalBackend& b, ProcessGroup* processes)
      : s(sched), o(opts), ctx(c), backend(b), pg(processes), world(sched.header.world_size),
        collects(!processes || processes->rank() == 0) {
    auto epoch = Clock::now();
    if (pg) {
      local = {pg->rank()};
      hub = backend.make_process_hub(*pg, ctx.plan->groups, o.timeout_seconds);
    } else {
      for (int r = 0; r < world; ++r) local.push_back(r);
      hub = backend.make_hub(world, ctx.plan->groups, o.timeout_seconds);
    }
    devices.resize(world);
    comms.resize(world);
    peaks.assign(world, 0);
    for (int r : local) {
      devices[r] = backend.make_device(r, epoch);
      comms[r] = hub->communicator(r);
      devices[r]->set_error_handler([this](const std::string& e) { fail(e); });
    }
    states.resize(world);
    // A failure on another process (or its death) stops this one's ranks.
    if (pg) pg->set_failure_handler([this](const std::string& e) { fail(e); });
  }

  ~Job() {
    if (pg) pg->set_failure_handler(nullptr);
    // The buffers of the carried state belong to the devices' memory: release them first. Then the devices
    // (a worker may sit in a communication call: the hub is aborted so that it returns).
    states.clear();
    outputs.clear();
    hub->abort("the job ended");
    devices.clear();
  }

  // Fails the job once: the first error is the result's, and every device, the hub and the process group stop,
  // so that no rank waits on. Never throws: the ranks' threads call it from their last handlers, near a memory
  // limit too, where building a message may throw std::bad_alloc (the stops happen all the same).
  void fail(const std::string& what) noexcept {
    {
      std::lock_guard lock(mu);
      if (failed) return;
      failed = true;
      try {
        error = what;
      } catch (...) {
        error.clear();  // (the result's error then says the host memory ran out: Job::message)
      }
    }
    std::string why;
    try {
      why = "stopped because " + what;
    } catch (...) {
    }
    try {
      hub->abort(why);
    } catch (...) {
    }
    for (auto& d : devices)
      if (d) try {
          d->abort(why);
        } catch (...) {
        }
    if (pg) try {
        pg->fail(what);
      } catch (...) {
      }
    cv.notify_all();
  }
  // The job's error for its result: fail()'s, or what it could not record.
  std::string message() const { return error.empty() ? "out of host memory (no room left for the error's message)" : error; }
  // fail() with the message `make` builds, or without one when building it throws (near a memory limit).
  void fail_with(const std::function<std::string()>& make) noexcept {
    try {
      fail(make());
    } catch (...) {
      fail(std::string());
    }
  }

  void load_state(const std::vector<HostState>& saved) {
    for (int r : local) {
      RankState& st = states[r];
      st.initialized = true;
      for (const Tensor& t : ctx.plan->ranks[r].state) {
        auto it = saved[r].find(t);
        if (it == saved[r].end())
          throw CheckpointError(fmt::format("the checkpoint's rank {} has no {}", r, t.str()));
        if (it->second.size() * sizeof(float) != ctx.shapes->bytes(t))
          throw CheckpointError(fmt::format("the checkpoint's {} on rank {} has the wrong size", t.str(), r));
        BufferPtr b = devices[r]->memory().allocate(ctx.shapes->bytes(t));
        const std::vector<float>* host = &it->second;
        devices[r]->submit(0, {}, [b, host](StreamContext& sc) { sc.upload(b->data(), host->data(), b->bytes()); }, -1);
        st.tensors[t] = b;
      }
      devices[r]->synchronize();
      devices[r]->take_timings();
    }
  }

  // Every rank's carried state, on the process that collects (the others get what they hold themselves).
  std::vector<HostState> host_states() {
    std::vector<HostState> out(world);
    for (int r : local) out[r] = host_state(r);
    if (pg) {
      auto blobs = pg->gather(encode_state(out[pg->rank()]), o.timeout_seconds);
      for (std::size_t r = 0; r < blobs.size(); ++r)
        if (static_cast<int>(r) != pg->rank()) out[r] = decode_state(blobs[r]);
    }
    return out;
  }

  // After rank r's step: note its output (with one process per rank, rank 0 collects every rank's), then
  // wait until every rank has ended the step, so that the next step starts on every rank at once. Without
  // the wait a rank that ends early starts the next step while another still runs this one, and the
  // measured step (first start to last end over the ranks) holds the other rank's tail of the step before
  // (docs/executor.md §3, "Between steps").
  // After a step the model is evaluated on (`evaluated`), the ranks also wait until the collector has evaluated
  // it: the evaluation's work stays out of the next step's time.
  void report(int step_index, int r, StepOutput out, bool evaluated) {
    if (!pg) {
      std::unique_lock lock(mu);
      store(step_index, r, std::move(out));
      cv.wait(lock, [&] { return failed || (evaluated ? processed : complete) > step_index; });
      return;
    }
    auto blobs = pg->gather(encode_step(out, peaks[r]), o.timeout_seconds);
    if (collects) {
      std::lock_guard lock(mu);
      for (std::size_t q = 0; q < blobs.size(); ++q)
        if (static_cast<int>(q) != r) {
          StepOutput theirs = decode_step(blobs[q], peaks[q]);
          // (another process's word: the loss is read for every microbatch)
          if (theirs.loss_sums.size() != static_cast<std::size_t>(s.header.microbatches))
            throw std::runtime_error(fmt::format("rank {} reported {} microbatch losses, not {}", q,
                                                 theirs.loss_sums.size(), s.header.microbatches));
          store(step_index, static_cast<int>(q), std::move(theirs));
        }
      store(step_index, r, std::move(out));
      if (evaluated) {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return failed || processed > step_index; });
      }
    }
    pg->broadcast(std::string(), o.timeout_seconds);  // rank 0 answers once it has every rank's output
  }

  // Notes rank r's output of a step (under mu); the step is complete when every rank's is there.
  void store(int step_index, int r, StepOutput out) {
    auto& row = outputs.try_emplace(step_index, world).first->second;
    row[r] = std::move(out);
    if (std::all_of(row.begin(), row.end(), [](const auto& x) { return x.has_value(); })) {
      complete = step_index + 1;
      cv.notify_all();
    }
  }

  // Starts one thread per local rank. A thread that cannot be created (std::system_error: the process is out
  // of threads or memory) fails the job with a message, and the ones already started are joined.
  std::vector<std::thread> start_ranks(int first, int last) {
    std::vector<std::thread> threads;
    for (int r : local) {
      try {
        if (o.fault.thread_fail_rank == r)
          throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again), "injected fault");
        threads.emplace_back([this, r, first, last] { run_rank(r, first, last); });
      } catch (const std::exception& e) {  // std::system_error, or std::bad_alloc growing the vector
        fail_with([&] { return fmt::format("rank {}: cannot start the rank's thread: {}", r, e.what()); });
        break;
      }
    }
    return threads;
  }

  // Whether the model is evaluated after 0-based step `step` of a run that stops at `last`.
  bool eval_due(int step, int last) const {
    return o.eval_every > 0 && ((step + 1) % o.eval_every == 0 || step + 1 == last);
  }

  // Rank r's carried state on the host.
  HostState host_state(int r) {
    HostState out;
    for (const auto& [t, b] : states[r].tensors) {
      std::vector<float> v(b->bytes() / sizeof(float));
      devices[r]->download(v.data(), b->data(), b->bytes());
      out[t] = std::move(v);
    }
    return out;
  }

  void run_rank(int r, int first, int last) noexcept {
    std::unique_ptr<RankExecutor> ex;
    try {
      ex = std::make_unique<RankExecutor>(ctx, r, *devices[r], *comms[r]);
      Allocator& memory = devices[r]->memory();
      for (int step = first; step < last; ++step) {
        // The step's own peak: the allocator's count starts from what the rank holds between steps.
        peaks[r] = std::max(peaks[r], memory.peak_bytes());
        memory.reset_peak();
        StepOutput out = ex->run_step(step, states[r]);
        out.peak_bytes = memory.peak_bytes();
        peaks[r] = std::max(peaks[r], out.peak_bytes);
        if (eval_due(step, last)) out.state = host_state(r);
        report(step - first, r, std::move(out), eval_due(step, last));
      }
    } catch (const std::bad_alloc& e) {
      // (aborts every device and the hub: the executor's work in flight can finish)
      fail_with([&] { return out_of_memory(r, e); });
    } catch (const std::exception& e) {
      fail_with([&] { return std::string(e.what()); });
    } catch (...) {
      fail_with([&] { return fmt::format("rank {}: an unknown exception", r); });
    }
  }

  // Which rank's loss op reports each microbatch's loss (the plan's), -1 for none.
  std::vector<int> loss_reporters() const {
    std::vector<int> by(s.header.microbatches, -1);
    for (int r = 0; r < world; ++r)
      for (const IdSet& ids : ctx.plan->ranks[r].reported_batches)
        for (int b : ids.ids())
          if (b >= 0 && b < s.header.microbatches) by[b] = r;
    return by;
  }

  // Runs steps [first, last); fills the result's losses and timings. Returns false on failure.
  bool run(int first, int last, ReplayResult& res, const std::function<void(const StepReport&)>& progress) {
    outputs.clear(), complete = 0;
    const int ran = last - first;
    // The measured steps: the last trace_steps, without the first step when there are more.
    const int kept = std::clamp(o.trace_steps, 1, ran > 1 ? ran - 1 : 1);
    const std::vector<int> reporter = loss_reporters();
    std::vector<std::thread> threads = start_ranks(first, last);
    const double tokens = static_cast<double>(s.header.microbatches) * ctx.shapes->model.tokens_per_microbatch();
    auto start = Clock::now(), prev = start;
    double eval_seconds = 0;
    for (int step = first; step < last && collects; ++step) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return failed || complete > step - first; });
      if (failed) break;
      auto& row = outputs.at(step - first);  // (map nodes stay put while the ranks add the next step's)
      lock.unlock();
      double sum = 0;
      std::string problem;
      for (int b = 0; b < s.header.microbatches && problem.empty(); ++b) {
        const int q = reporter[b];
        const double v = q < 0 ? std::numeric_limits<double>::quiet_NaN() : row[q]->loss_sums[b];
        if (q < 0)
          problem = fmt::format("no rank computed the loss of microbatch {} in step {}", b, step + 1);
        else if (!std::isfinite(v))
          problem = fmt::format(
              "the loss is not finite ({}) in step {} of {}, microbatch {} (rank {}'s loss op): the training diverged "
              "(a smaller --lr or --grad-clip may help)",
              std::isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf", step + 1, o.steps, b, q);
        sum += v;
      }
      if (!problem.empty()) {
        fail(problem);
        break;
      }
      auto now = Clock::now();
      StepReport rep;
      rep.step = step, rep.steps = o.steps, rep.loss = sum / tokens;
      rep.seconds = std::chrono::duration<double>(now - prev).count();
      rep.tokens_per_s = tokens / std::max(rep.seconds, 1e-9);
      rep.learning_rate = shortest(learning_rate(o.optimizer, step, o.steps));
      double norm_sq = 0;  // (in rank order, as the norm's all-reduce sums)
      for (int r = 0; r < world; ++r) norm_sq += row[r]->grad_norm_sq, rep.peak_bytes.push_back(row[r]->peak_bytes);
      rep.grad_norm = std::sqrt(norm_sq);
      for (int r = 0; r < world; ++r) rep.aux_loss += row[r]->aux_loss_sum;  // (in rank order)
      rep.aux_loss /= s.header.microbatches;
      if (!std::isfinite(rep.grad_norm)) {  // (PyTorch's clip_grad_norm_(error_if_nonfinite=True), torchtitan's stop)
        fail(fmt::format("the gradient norm is not finite ({}) in step {} of {}: the training diverged (a smaller --lr "
                         "or --grad-clip may help)",
                         std::isnan(rep.grad_norm) ? "NaN" : "inf", step + 1, o.steps));
        break;
      }
      if (ctx.plan->clip)  // (the coefficient the AdamW kernels apply: exec/kernels.h)
        rep.clip_coefficient = shortest(static_cast<float>(std::min(1.0, o.optimizer.grad_clip / (rep.grad_norm + 1e-6))));
      prev = now;
      res.losses.push_back(rep.loss);
      if (o.model.aux_loss_coeff > 0) res.aux_losses.push_back(rep.aux_loss);
      if (ctx.record_routing) {  // (each (block, microbatch) once; under TP its sequence shards' digests summed)
        auto& step_routes = routing.emplace_back();
        std::map<std::pair<int, int>, std::set<int>> shards_seen;
        for (int r = 0; r < world; ++r)
          for (const StepOutput::Route& x : row[r]->routing) {
            const std::pair<int, int> key{x.block, x.microbatch};
            if (!shards_seen[key].insert(x.shard).second) continue;
            const RoutingDigest part{x.hash, x.counts, 0, x.shard, x.shards};
            auto [it, fresh] = step_routes.try_emplace(key, part);
            if (!fresh) add_shard(it->second, part);
          }
      }
      res.learning_rates.push_back(rep.learning_rate);
      res.grad_norms.push_back(rep.grad_norm);
      res.clip_coefficients.push_back(rep.clip_coefficient);
      res.step_seconds.push_back(rep.seconds);
      res.step_tokens_per_s.push_back(rep.tokens_per_s);
      res.step_peak_bytes.push_back(rep.peak_bytes);
      if (row[0]->state) {
        try {
          const Evaluation ev = evaluate(row, step + 1);
          rep.evaluated = true, rep.validation_loss = ev.loss;
          res.evaluations.push_back(ev);
          eval_seconds += ev.seconds;
        } catch (const std::exception& e) {
          fail(fmt::format("evaluating the model after step {}: {}", step + 1, e.what()));
          break;
        }
        prev = Clock::now();
      }
      try {
        if (progress) progress(rep);
      } catch (const std::exception& e) {  // (e.g. writing the progress failed: the ranks must still be joined)
        fail(fmt::format("reporting step {}: {}", step + 1, e.what()));
        break;
      }
      lock.lock();
      processed = step - first + 1;
      if (step - first < ran - kept) outputs.erase(step - first);
      lock.unlock();
      cv.notify_all();
    }
    for (auto& t : threads) t.join();
    res.seconds = std::chrono::duration<double>(Clock::now() - start).count() - eval_seconds;
    if (failed) return false;
    if (!collects) return true;
    res.tokens_per_s = tokens * ran / std::max(res.seconds, 1e-9);
    std::int64_t origin = 0;
    for (int i = ran - kept; i < ran; ++i) {
      std::vector<std::vector<WorkTiming>> timings;
      for (int r = 0; r < world; ++r) timings.push_back(outputs.at(i)[r]->timings);
      const std::int64_t t0 = step_start(timings);
      if (i == ran - kept) origin = t0;
      res.steps.push_back(StepTrace{first + i, t0 - origin, measured_trace(s, timings, backend.name())});
    }
    res.trace = res.steps.back().trace;
    for (int r = 0; r < world; ++r) res.peak_bytes.push_back(peaks[r]);
    return true;
  }

  // Evaluates the model of a step's row (every rank's state) on the validation split; frees the states.
  Evaluation evaluate(std::vector<std::optional<StepOutput>>& row, int steps_done) {
    const auto t0 = Clock::now();
    std::vector<HostState> ranks(world);
    for (int r = 0; r < world; ++r) {
      if (!row[r]->state) throw std::runtime_error(fmt::format("rank {} sent no weights", r));
      ranks[r] = std::move(*row[r]->state);
      row[r]->state.reset();
    }
    bool identical = true;
    const std::vector<float> flat =
        flatten_parameters(ctx.shapes->model, assemble_parameters(*ctx.shapes, ranks, identical));
    Evaluation ev;
    ev.step = steps_done;
    ev.loss = validation_loss(ctx.shapes->model, flat, *ctx.data, o.eval_sequences);
    ev.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return ev;
  }
};

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024)); }

// A model too large for this machine fails before any rank allocates: the schedule's tensors alone, at their
// peak on the ranks this process runs (one with `one_rank`, every rank otherwise), need more than its memory.
void check_fits_in_memory(const ReplayPlan& plan, bool one_rank) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return;
  const double machine = static_cast<double>(pages) * static_cast<double>(page);
  double need = 0, most = 0;
  int at = 0;
  for (std::size_t r = 0; r < plan.ranks.size(); ++r) {
    const double b = static_cast<double>(plan.ranks[r].peak_bytes);
    need = one_rank ? std::max(need, b) : need + b;
    if (b > most) most = b, at = static_cast<int>(r);
  }
  if (need > machine)
    throw std::invalid_argument(fmt::format(
        "the replay does not fit in this machine's memory: the schedule's tensors need {} at their peak{} (rank {} "
        "the most: {}), and the machine has {} (a smaller --dim, --ffn, --blocks, --seq or --microbatch-size fits)",
        gib(need), one_rank ? " on one rank" : " over the ranks, which this process runs as threads", at, gib(most),
        gib(machine)));
}

// What every process of a multi-process job must agree on, beyond the schedule and the model.
std::string settings_text(const ReplayOptions& o, const CheckpointInfo& info, int first) {
  nlohmann::json j{{"backend", o.backend},     {"steps", o.steps},          {"stop_after", o.stop_after},
                   {"seed", o.seed},           {"optimizer", info.optimizer}, {"data", info.data},
                   {"check", o.check},         {"tolerance", o.tolerance},  {"save", !o.save_dir.empty()},
                   {"first_step", first},      {"timeout", o.timeout_seconds}, {"clip_required", o.clip_required},
                   {"eval_every", o.eval_every}, {"eval_sequences", o.eval_sequences},
                   {"recompute", hw::recompute_name(o.recompute)}};
  return j.dump();
}

void compare(const ReplayContext& ctx, const ReplayOptions& o, int first, int last, const std::vector<HostState>& finals,
             const std::vector<std::map<std::pair<int, int>, RoutingDigest>>& routing, ReplayResult& res) {
  res.checked = true;
  ReferenceTrainer ref(ctx.shapes->model, o.optimizer, o.steps, o.seed, *ctx.data, ctx.schedule->header.microbatches,
                       ctx.plan->clip);
  ref.record_routing(ctx.record_routing);
  for (int step = 0; step < last; ++step) {
    double l = ref.step(step);
    if (step < first) continue;
    // MoE: the first step whose routing differs ends the comparison (exec/training.h): where, by how many
    // (token, slot) pairs the experts' counts differ in each microbatch's first MoE block that differs (a token
    // sent elsewhere changes what the later blocks of its microbatch see), and how near a tie the tokens were.
    if (ctx.record_routing) {
      const auto& mine = routing.at(step - first);
      std::set<int> seen;  // microbatches counted
      for (const auto& [key, digest] : ref.routing()) {  // (in block order)
        auto it = mine.find(key);
        if (it == mine.end() || it->second.hash == digest.hash || !seen.insert(key.second).second) continue;
        if (!res.routing_diverged_step) {
          res.routing_diverged_step = step + 1;
          res.routing_block = key.first, res.routing_microbatch = key.second, res.routing_margin = digest.min_margin;
        }
        ++res.routing_microbatches;
        long moved = 0;
        for (std::size_t e = 0; e < digest.counts.size(); ++e)
          moved += std::abs(digest.counts[e] - (e < it->second.counts.size() ? it->second.counts[e] : 0));
        res.routing_moved += moved / 2 + moved % 2;
      }
    }
    if (res.routing_diverged_step) break;
    res.reference_losses.push_back(l);
    if (o.model.aux_loss_coeff > 0) res.reference_aux_losses.push_back(ref.aux_loss());
  }
  auto rel = [](double a, double b) { return std::abs(a - b) / std::abs(b); };
  for (std::size_t i = 0; i < res.reference_losses.size(); ++i)
    res.max_rel_diff_loss = std::max(res.max_rel_diff_loss, rel(res.losses[i], res.reference_losses[i]));
  for (std::size_t i = 0; i < res.reference_aux_losses.size(); ++i)  // (the load-balancing loss: a loss too)
    res.max_rel_diff_loss = std::max(res.max_rel_diff_loss, rel(res.aux_losses.at(i), res.reference_aux_losses[i]));
  if (res.routing_diverged_step) return;  // (another trajectory from there: the final weights are not comparable)
  // The weights are compared as one vector (every parameter of the model), and each parameter tensor is
  // reported on its own to say where the difference sits. The model-wide norm is the criterion: AdamW divides
  // each gradient element by its own magnitude (plus eps = 1e-8), so an element whose gradient is within fp32
  // rounding of zero moves by a step that depends on that rounding; summing the same gradients in another
  // order (the schedule's grouping of microbatches) can move one such element by a good fraction of the
  // learning rate, which is 1e-5 of a small tensor but far below 1e-5 of the model (docs/executor.md §4).
  auto mine = assemble_parameters(*ctx.shapes, finals, res.replicas_identical);
  double num = 0, den = 0;
  for (const auto& [name, want] : ref.parameters()) {
    auto [n, d] = squared_diff(mine.at(name), want);
    num += n, den += d;
    double rel = relative(n, d);
    if (res.worst_parameter.empty() || rel > res.worst_parameter_rel_diff)
      res.worst_parameter = name, res.worst_parameter_rel_diff = rel;
  }
  res.max_rel_diff_weights = relative(num, den);
}

// After the steps ran: saves the checkpoint and runs the check, on the process that collects. Sets res.error
// when the check fails; throws for a checkpoint that cannot be written.
void finish(const ReplayContext& ctx, const ReplayOptions& o, CheckpointInfo info, int first, int last, Job& job,
            ReplayResult& res) {
  if (!o.check && o.save_dir.empty()) return;
  std::vector<HostState> finals = job.host_states();
  // Weights the last step's update made NaN or infinite (its loss and gradients were still finite): the run
  // diverged; nothing is saved, so the last good checkpoint stays the latest (issue 38).
  if (std::string where = first_non_finite(finals); !where.empty()) {
    res.error = fmt::format("the state after step {} is not finite ({}): the training diverged (a smaller --lr or "
                            "--grad-clip may help){}",
                            last, where, o.save_dir.empty() ? "" : "; no checkpoint was written");
    return;
  }
  if (!o.save_dir.empty()) {
    info.step = last;
    save_checkpoint(o.save_dir, info, finals);
  }
  if (o.check) {
    compare(ctx, o, first, last, finals, job.routing, res);
    if (res.routing_diverged_step && res.routing_moved > kRoutingFlipsPerMicrobatch * res.routing_microbatches) {
      res.error = fmt::format(
          "the replay routes step {} otherwise than single-device training does: {} (token, expert) pair{} moved in {} "
          "microbatch{} (the first: MoE block {}, microbatch {}), more than the {} per microbatch a near-tie's rounding "
          "flips: a wrong result",
          res.routing_diverged_step, res.routing_moved, res.routing_moved == 1 ? "" : "s", res.routing_microbatches,
          res.routing_microbatches == 1 ? "" : "es", res.routing_block, res.routing_microbatch, kRoutingFlipsPerMicrobatch);
      return;
    }
    if (res.routing_diverged_step && res.routing_margin > kRoutingRoundingMargin * o.tolerance) {
      res.error = fmt::format(
          "the replay routes step {} otherwise than single-device training does (the first: MoE block {}, microbatch "
          "{}), but no token of that microbatch was within {:g} of a tie (the closest router logits {:.3g} apart, "
          "relative; {:g} times the tolerance): more than rounding moves, a wrong result",
          res.routing_diverged_step, res.routing_block, res.routing_microbatch, kRoutingRoundingMargin * o.tolerance,
          res.routing_margin, kRoutingRoundingMargin);
      return;
    }
    // A NaN difference fails too (NaN > tolerance is false): a diverged run is never "within tolerance" (issue 38).
    if (!(res.max_rel_diff_loss <= o.tolerance) || (!res.routing_diverged_step && !(res.max_rel_diff_weights <= o.tolerance)))
      res.error = fmt::format(
          "the replay differs from single-device training: largest relative difference {:.3g} in the losses, {:.3g} "
          "in the weights (the most in {}: {:.3g}); the tolerance is {:g}",
          res.max_rel_diff_loss, res.max_rel_diff_weights, res.worst_parameter, res.worst_parameter_rel_diff,
          o.tolerance);
  }
}

}  // namespace

ReplayResult replay(const Schedule& schedule, const ReplayOptions& o, const std::function<void(const StepReport&)>& progress) {
  ReplayResult res;
  try {
    SimResult sim = simulate(schedule);
    if (!sim.ok) {
      res.error = "the schedule does not validate: " + sim.error;
      return res;
    }
    o.model.validate();
    o.optimizer.validate();
    if (o.steps < 1) throw std::invalid_argument(fmt::format("--steps must be at least 1, got {}", o.steps));
    if (o.trace_steps < 1)
      throw std::invalid_argument(fmt::format("--trace-steps must be at least 1, got {}", o.trace_steps));
    if (o.eval_every < 0) throw std::invalid_argument(fmt::format("--eval-every must be at least 0, got {}", o.eval_every));
    if (o.eval_sequences < 1)
      throw std::invalid_argument(fmt::format("--eval-sequences must be at least 1, got {}", o.eval_sequences));
    if (!(o.timeout_seconds > 0))
      throw std::invalid_argument(fmt::format("--timeout must be positive, got {}", o.timeout_seconds));
    if (o.recompute == hw::Recompute::Op)  // (the hardware model's torchtitan op checkpointing: not the executor's)
      throw std::invalid_argument("--recompute op is the hardware cost model's (torchtitan's selective op "
                                  "checkpointing); the executor recomputes none, selective or full");
    ModelShapes shapes(o.model, schedule.header.layers, tp_degrees(schedule),
                       schedule.header.layout ? &*schedule.header.layout : nullptr, expert_parallel_layers(schedule));
    TokenData data(o.data_files.empty() ? TokenData::default_files() : o.data_files);
    data.check_fits(o.model);
    res.model_description = o.model.describe();
    res.data_description = data.describe();
    res.tokens_per_step = static_cast<long>(schedule.header.microbatches) * o.model.tokens_per_microbatch();
    ReplayPlan plan = make_plan(schedule, shapes, o.optimizer.grad_clip, o.clip_required);
    res.clip = plan.clip;
    res.clip_note = plan.clip_note;
    for (const RankPlan& rp : plan.ranks) res.schedule_tensor_bytes.push_back(rp.peak_bytes);
    check_fits_in_memory(plan, static_cast<bool>(o.join));

    int first = 0, last = o.stop_after > 0 ? std::min(o.stop_after, o.steps) : o.steps;
    CheckpointInfo info = describe_run(schedule, o, data);
    std::vector<HostState> saved;
    if (!o.resume_dir.empty()) {
      CheckpointInfo was = read_checkpoint_info(o.resume_dir);
      if (std::string why = checkpoint_mismatch(was, info); !why.empty())
        throw CheckpointError(fmt::format("cannot resume from '{}': {}", o.resume_dir, why));
      first = was.step;
      std::vector<StateLayout> layouts(plan.ranks.size());  // what each rank's file must hold
      for (std::size_t r = 0; r < plan.ranks.size(); ++r)
        for (const Tensor& t : plan.ranks[r].state) layouts[r][t] = shapes.bytes(t);
      saved = read_checkpoint_states(o.resume_dir, was, layouts);
    }
    res.first_step = first;
    if (last <= first)
      throw std::invalid_argument(fmt::format("nothing to run: the run would stop at step {} and starts at step {}", last, first));
    if (!plan.repeatable && (last - first > 1 || first > 0 || !o.save_dir.empty()))
      throw PlanError(plan.repeat_note + " (replay it with --steps 1)");

    ReplayContext ctx{&schedule, &plan, &shapes, &data, o.optimizer, o.steps, o.seed, o.fault, o.recompute,
                      o.check && o.model.moe()};
    std::unique_ptr<ProcessGroup> processes;  // outlives the job, whose communicator uses it
    if (o.join) {
      processes = o.join(JobIdentity{info.schedule_hash, to_json(o.model).dump(), settings_text(o, info, first)});
      if (processes->world_size() != schedule.header.world_size)
        throw std::invalid_argument(fmt::format("the schedule has {} ranks but the job has {} processes (WORLD_SIZE or "
                                                "its equivalent): start one process per rank",
                                                schedule.header.world_size, processes->world_size()));
      res.reporting = processes->rank() == 0;
    }
    auto backend = make_backend(o.backend);
    if (!tp_degrees(schedule).empty() && !backend->supports_tensor_parallel())
      throw std::invalid_argument(fmt::format(
          "the {} backend does not run tensor parallelism yet (its kernels lack the vocabulary-parallel embedding and "
          "cross-entropy): replay this TP schedule with --backend cpu",
          backend->name()));
    if (o.model.moe() && !backend->supports_moe())
      throw std::invalid_argument(fmt::format(
          "the {} backend does not run Mixture-of-Experts models yet (its kernels lack the router, the token "
          "permutations and the combine, and its communicator the all-to-all): replay {} with --backend cpu",
          backend->name(), o.model.preset));
    Job job(schedule, o, ctx, *backend, processes.get());
    if (!saved.empty()) job.load_state(saved);
    if (!job.run(first, last, res, progress)) {
      res.error = job.message();
      return res;
    }
    if (processes) {
      // Rank 0 decides the job's outcome (the check, the checkpoint) and tells the others, so that every
      // process ends with the same status.
      std::string outcome;
      if (res.reporting) {
        try {
          finish(ctx, o, info, first, last, job, res);
        } catch (const std::exception& e) {
          res.error = e.what();
        }
        outcome = res.error.empty() ? std::string("ok") : "error:" + res.error;
      } else {
        if (o.check || !o.save_dir.empty()) job.host_states();
      }
      outcome = processes->broadcast(outcome, o.timeout_seconds);
      processes->close();
      if (!res.reporting) res.error = outcome == "ok" ? "" : outcome.substr(6);
      res.ok = res.error.empty();
      return res;
    }
    finish(ctx, o, info, first, last, job, res);
    res.ok = res.error.empty();
  } catch (const OutOfMemory& e) {
    res.error = e.what();
  } catch (const std::bad_alloc& e) {
    res.error = fmt::format("cannot allocate host memory for the replay ({}): the model or the schedule is too large "
                            "for this machine",
                            e.what());
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  return res;
}

}  // namespace trainsim::exec
