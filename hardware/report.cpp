#include "hardware/report.h"

#include <algorithm>
#include <regex>

#include <fmt/format.h>

#include "sim/exposed_comm.h"

namespace trainsim::hw {

namespace {

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

std::string breakdown_text(const MemoryByKind& b) {
  return fmt::format("weights {}, grads {}, optimizer {}, activations {}, inside the op {}", gib(b.weights), gib(b.grads),
                     gib(b.optimizer), gib(b.activations), gib(b.workspace));
}

}  // namespace

void ReportBuilder::begin(int world_size, const CostModel& cost) {
  begin(world_size, dynamic_cast<const HardwareCostModel*>(&cost));
}

void ReportBuilder::begin(int world_size, const HardwareCostModel* cost) {
  cost_ = cost;
  tensor_parallel_ = cost && cost->tensor_parallel();
  ranks_.assign(world_size, RankReport{});
  for (int r = 0; r < world_size; ++r) ranks_[r].rank = r;
  issued_.assign(world_size, 0);
  tp_collectives_.assign(world_size, {});
}

void ReportBuilder::issued(int rank, const Op& op) {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  const int index = issued_[rank]++;
  if (!tensor_parallel_) return;
  // TP collectives inside compute ops are exposed by rule; explicit ones where no compute op runs (ran()).
  if (is_compute(op.kind)) ranks_[rank].tp_comm_inside_s += cost_->tp_comm_seconds(op);
  else if (cost_->is_tp_collective(op)) tp_collectives_[rank].push_back(index);
}

void ReportBuilder::ran(int rank, std::span<const RanOp> ops) {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  RankReport& rr = ranks_[rank];
  for (const RanOp& o : ops)
    if (is_timed(o.kind)) rr.peak_memory_bytes = std::max(rr.peak_memory_bytes, o.memory);
  // The same intervals as the timeline's exposed-communication marks (sim/exposed_comm.h).
  const auto c = compute_intervals(ops), m = comm_intervals(ops);
  rr.compute_s = to_seconds(total_length(c));
  rr.comm_s = to_seconds(total_length(m));
  // The TP communication inside compute ops is exposed communication too: a schedule layer of k blocks runs
  // 2k - 1 of its forward's TP reductions inside its compute op and one as an explicit op, and the figures must
  // not depend on k (a schedule layer is a modelling unit: docs/hardware-model.md §5).
  rr.exposed_comm_s = to_seconds(total_length(subtract_intervals(m, c))) + rr.tp_comm_inside_s;
  rr.busy_s = rr.compute_s;
  if (tensor_parallel_) {
    std::vector<TimeInterval> explicit_tp;
    const std::vector<int>& places = tp_collectives_[rank];
    std::size_t next = 0;  // both in program order
    for (const RanOp& o : ops) {
      while (next < places.size() && places[next] < o.index) ++next;
      if (next < places.size() && places[next] == o.index) explicit_tp.push_back({o.start, o.end});
    }
    auto tp = merge_intervals(std::move(explicit_tp));
    rr.tp_comm_exposed_s = rr.tp_comm_inside_s + to_seconds(total_length(subtract_intervals(tp, c)));
    // The explicit TP collectives are part of the passes (Megatron-LM runs them on the compute stream between
    // the layers' kernels, as it runs the others inside them): not pipeline bubble.
    tp.insert(tp.end(), c.begin(), c.end());
    rr.busy_s = to_seconds(total_length(merge_intervals(std::move(tp))));
  }
}

void ReportBuilder::peak(int rank, const MemoryByKind& at_peak) {
  if (rank >= 0 && rank < static_cast<int>(ranks_.size())) ranks_[rank].peak_breakdown = at_peak;
}

void ReportBuilder::mirrored(int rank, int representative) {
  const int world = static_cast<int>(ranks_.size());
  if (rank < 0 || rank >= world || representative < 0 || representative >= world) return;
  ranks_[rank] = ranks_[representative];
  ranks_[rank].rank = rank;
}

StepReport ReportBuilder::report(const RunSummary& summary, const HardwareSetting& s, int microbatches,
                                 const std::string& oom_message, const std::vector<int>& stage_map) const {
  StepReport r;
  r.tensor_parallel = tensor_parallel_;
  const int world = static_cast<int>(ranks_.size());
  const Time span = summary.makespan;
  r.step_time_s = to_seconds(span);
  r.tokens_per_step = static_cast<double>(microbatches) * s.tokens_per_microbatch();
  r.model_flops_per_step = r.tokens_per_step * s.model.flops_per_token(s.seq_len());
  if (span > 0) {
    r.tokens_per_s = r.tokens_per_step / r.step_time_s;
    r.tokens_per_s_per_gpu = r.tokens_per_s / std::max(world, 1);
    r.mfu = r.model_flops_per_step / (r.step_time_s * std::max(world, 1) * s.device.peak_flops);
  }
  double busy = 0, exposed = 0, tp_inside = 0, tp_exposed = 0;
  r.ranks = ranks_;
  for (RankReport& rr : r.ranks) {
    rr.bubble_fraction = span > 0 ? 1.0 - rr.busy_s / r.step_time_s : 0;
    busy += rr.busy_s;
    exposed += rr.exposed_comm_s;
    tp_inside += rr.tp_comm_inside_s;
    tp_exposed += rr.tp_comm_exposed_s;
  }
  if (span > 0 && world > 0) r.bubble_fraction = 1.0 - busy / (world * r.step_time_s);
  r.exposed_comm_s = world > 0 ? exposed / world : 0;
  r.exposed_comm_share = r.step_time_s > 0 ? r.exposed_comm_s / r.step_time_s : 0;
  r.tp_comm_inside_s = world > 0 ? tp_inside / world : 0;
  r.tp_comm_exposed_s = world > 0 ? tp_exposed / world : 0;
  r.tp_comm_exposed_share = r.step_time_s > 0 ? r.tp_comm_exposed_s / r.step_time_s : 0;
  const MemoryPeak& p = summary.peak;
  r.peak_memory_bytes = p.memory, r.peak_memory_rank = p.rank, r.peak_memory_time_s = to_seconds(p.time);
  r.device_fitted_to = s.device.fitted_to;
  // Per stage: the ranks from one stage's first rank (a distinct value of the stage map) to the next's.
  std::vector<int> firsts(stage_map.begin(), stage_map.end());
  std::sort(firsts.begin(), firsts.end());
  firsts.erase(std::unique(firsts.begin(), firsts.end()), firsts.end());
  if (firsts.empty() || firsts.front() != 0) firsts.insert(firsts.begin(), 0);
  for (std::size_t k = 0; k < firsts.size() && firsts[k] < world; ++k) {
    StageMemory sm;
    sm.stage = static_cast<int>(k);
    sm.first_rank = firsts[k];
    sm.last_rank = k + 1 < firsts.size() ? std::min(firsts[k + 1], world) - 1 : world - 1;
    sm.peak_rank = sm.first_rank;
    for (int q = sm.first_rank; q <= sm.last_rank; ++q)
      if (r.ranks[q].peak_memory_bytes > r.ranks[sm.peak_rank].peak_memory_bytes) sm.peak_rank = q;
    sm.peak = r.ranks[sm.peak_rank].peak_breakdown;
    r.stages.push_back(sm);
  }
  r.memory_capacity_bytes = s.device.memory_bytes;
  r.memory_reserve_bytes = s.device.memory_reserve_bytes;
  r.headroom_bytes = s.device.usable_memory_bytes() - p.memory;
  if (!oom_message.empty()) {
    // "rank R: memory limit exceeded at t=T: OP starts with M bytes resident[ and W bytes inside it] (limit L);
    // resident: ..."
    OutOfMemory o;
    o.message = oom_message;
    std::smatch m;
    static const std::regex re(
        R"(^rank (\d+): memory limit exceeded at t=(\S+): (.*) starts with (\S+) bytes resident(?: and (\S+) bytes inside it)? \(limit [^)]*\); resident: (.*)$)");
    if (std::regex_match(oom_message, m, re)) {
      o.rank = std::stoi(m[1]);
      o.time_s = std::strtod(m[2].str().c_str(), nullptr);
      o.op = m[3];
      o.bytes = std::strtod(m[4].str().c_str(), nullptr);
      if (m[5].matched) o.workspace_bytes = std::strtod(m[5].str().c_str(), nullptr);
      o.resident = m[6];
    } else {
      o.rank = p.rank, o.time_s = to_seconds(p.time), o.bytes = p.memory;
    }
    r.oom = o;
  }
  return r;
}

StepReport make_report(const Trace& trace, const HardwareSetting& s, int microbatches, const std::string& oom_message,
                       const HardwareCostModel* cost) {
  ReportBuilder b;
  const int world = static_cast<int>(trace.ranks.size());
  b.begin(world, cost);
  std::vector<RanOp> ran;
  for (int rank = 0; rank < world; ++rank) {
    ran.clear();
    for (const OpRun& run : trace.ranks[rank]) {
      b.issued(rank, run.op);
      ran.push_back({static_cast<int>(ran.size()), run.op.kind, run.start, run.end, run.memory});
    }
    b.ran(rank, ran);
  }
  return b.report(trace.summary(), s, microbatches, oom_message);
}

nlohmann::ordered_json breakdown_json(const MemoryByKind& b) {
  return {{"weights_bytes", b.weights},
          {"grads_bytes", b.grads},
          {"optimizer_bytes", b.optimizer},
          {"activations_bytes", b.activations},
          {"workspace_bytes", b.workspace}};
}

nlohmann::ordered_json to_json(const StepReport& r) {
  nlohmann::ordered_json j;
  j["step_time_s"] = r.step_time_s;
  j["tokens_per_s"] = r.tokens_per_s;
  j["tokens_per_s_per_gpu"] = r.tokens_per_s_per_gpu;
  j["mfu"] = r.mfu;
  j["bubble_fraction"] = r.bubble_fraction;
  j["exposed_comm_s"] = r.exposed_comm_s;
  j["exposed_comm_share"] = r.exposed_comm_share;
  j["tp_comm_inside_s"] = r.tp_comm_inside_s;
  j["tp_comm_exposed_s"] = r.tp_comm_exposed_s;
  j["tp_comm_exposed_share"] = r.tp_comm_exposed_share;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["peak_memory_rank"] = r.peak_memory_rank;
  j["peak_memory_time_s"] = r.peak_memory_time_s;
  j["device_fitted_to"] =
      r.device_fitted_to.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.device_fitted_to);
  j["memory_capacity_bytes"] = r.memory_capacity_bytes;
  j["memory_reserve_bytes"] = r.memory_reserve_bytes;
  j["headroom_bytes"] = r.headroom_bytes;
  if (r.oom) {
    j["oom"] = {{"rank", r.oom->rank},   {"time_s", r.oom->time_s},         {"op", r.oom->op},
                {"bytes", r.oom->bytes}, {"workspace_bytes", r.oom->workspace_bytes},
                {"resident", r.oom->resident}, {"message", r.oom->message}};
  } else {
    j["oom"] = nullptr;
  }
  j["tokens_per_step"] = r.tokens_per_step;
  j["model_flops_per_step"] = r.model_flops_per_step;
  j["peak_breakdown"] = breakdown_json(
      r.peak_memory_rank >= 0 && r.peak_memory_rank < static_cast<int>(r.ranks.size()) ? r.ranks[r.peak_memory_rank].peak_breakdown
                                                                                       : MemoryByKind{});
  auto& stages = j["stages"] = nlohmann::ordered_json::array();
  for (const StageMemory& sm : r.stages) {
    nlohmann::ordered_json o = {{"stage", sm.stage},
                                {"first_rank", sm.first_rank},
                                {"last_rank", sm.last_rank},
                                {"peak_rank", sm.peak_rank},
                                {"peak_memory_bytes", sm.peak.total()}};
    o.update(breakdown_json(sm.peak));
    stages.push_back(std::move(o));
  }
  auto& ranks = j["ranks"] = nlohmann::ordered_json::array();
  for (const auto& rr : r.ranks)
    ranks.push_back({{"rank", rr.rank},
                     {"compute_s", rr.compute_s},
                     {"busy_s", rr.busy_s},
                     {"bubble_fraction", rr.bubble_fraction},
                     {"comm_s", rr.comm_s},
                     {"exposed_comm_s", rr.exposed_comm_s},
                     {"tp_comm_inside_s", rr.tp_comm_inside_s},
                     {"tp_comm_exposed_s", rr.tp_comm_exposed_s},
                     {"peak_memory_bytes", rr.peak_memory_bytes},
                     {"peak_breakdown", breakdown_json(rr.peak_breakdown)}});
  return j;
}

std::string format_report(const StepReport& r, const HardwareSetting& s, std::size_t rank_lines) {
  std::string out;
  // The attention, FP8 and context-parallel settings only when not the defaults (the line as before otherwise).
  std::string extra;
  if (s.attention != Attention::Flash) extra += fmt::format(", attention {}", attention_name(s.attention));
  if (s.elementwise != Elementwise::Fused) extra += fmt::format(", elementwise {}", elementwise_name(s.elementwise));
  if (s.fp8) extra += s.fp8_all_gather ? ", FP8 linear layers and all-gathers" : ", FP8 linear layers";
  if (s.context_parallel > 1) extra += fmt::format(", context parallel {}", s.context_parallel);
  if (r.tensor_parallel) extra += fmt::format(", TP overlap {}", tp_overlap_name(s.tp_overlap));
  out += fmt::format("model {} ({:.3g} B parameters), device {}, network {}; microbatch {} x {} tokens, recompute {}{}; "
                     "weights {} B, grads {} B, optimizer {} B per parameter\n",
                     s.model.preset, s.model.parameters() / 1e9, s.device.preset, s.network.preset, s.microbatch_size,
                     s.seq_len(), recompute_name(s.recompute), extra, s.model.weight_bytes, s.model.grad_bytes,
                     s.model.master_bytes + s.model.optimizer_bytes);
  out += s.device.fitted_to.empty()
             ? fmt::format("note: device {} is fitted to no published run: its times are the kernel tables' and likely "
                           "too short (docs/hardware-model.md §5)\n",
                           s.device.preset)
             : fmt::format("device {} fitted to {} (docs/hardware-model.md §5)\n", s.device.preset, s.device.fitted_to);
  if (s.model.moe())
    out += fmt::format("note: model {} is a Mixture of Experts ({} experts, top {}, {:.3g} B parameters active per "
                       "token): seven published MoE runs checked it, within a median 6 % with the host's time to issue "
                       "each expert's kernels fitted to three of them, from 11 % slow (Mixtral 8x7B) to 89 % fast "
                       "(Qwen3-30B-A3B on 16 H100s) (docs/hardware-model.md §4b)\n",
                       s.model.preset, s.model.experts, s.model.top_k,
                       s.model.active_parameters() / 1e9);
  out += fmt::format("step time {:.6g} s   tokens/s {:.6g}   tokens/s per GPU {:.6g}   MFU {:.1f}%\n", r.step_time_s,
                     r.tokens_per_s, r.tokens_per_s_per_gpu, 100 * r.mfu);
  out += fmt::format("bubble {:.1f}%   exposed communication {:.6g} s ({:.1f}% of the step)\n", 100 * r.bubble_fraction,
                     r.exposed_comm_s, 100 * r.exposed_comm_share);
  if (r.tensor_parallel)
    out += fmt::format("exposed TP communication {:.6g} s ({:.1f}% of the step): {:.6g} s inside compute ops, {:.6g} s "
                       "of TP collectives outside compute\n",
                       r.tp_comm_exposed_s, 100 * r.tp_comm_exposed_share, r.tp_comm_inside_s,
                       r.tp_comm_exposed_s - r.tp_comm_inside_s);
  out += fmt::format("peak memory {} at rank {} t={:.6g} s of {} usable ({} less a {} reserve; {} headroom)\n",
                     gib(r.peak_memory_bytes), r.peak_memory_rank, r.peak_memory_time_s,
                     gib(r.memory_capacity_bytes - r.memory_reserve_bytes), gib(r.memory_capacity_bytes),
                     gib(r.memory_reserve_bytes), gib(r.headroom_bytes));
  if (r.peak_memory_rank >= 0 && r.peak_memory_rank < static_cast<int>(r.ranks.size()) && r.stages.size() <= 1)
    out += fmt::format("  at the peak: {}\n", breakdown_text(r.ranks[r.peak_memory_rank].peak_breakdown));
  if (r.stages.size() > 1)
    for (const StageMemory& sm : r.stages)
      out += fmt::format("  stage {:>3} (ranks {}-{}): peak {} at rank {}: {}\n", sm.stage, sm.first_rank, sm.last_rank,
                         gib(sm.peak.total()), sm.peak_rank, breakdown_text(sm.peak));
  if (r.oom)
    out += fmt::format("OUT OF MEMORY: rank {} at t={:.6g} s: {} starts with {} resident{}; resident: {}\n", r.oom->rank,
                       r.oom->time_s, r.oom->op, gib(r.oom->bytes),
                       r.oom->workspace_bytes > 0 ? " and needs " + gib(r.oom->workspace_bytes) + " inside it" : "",
                       r.oom->resident);
  for (std::size_t i = 0; i < r.ranks.size() && i < rank_lines; ++i) {
    const RankReport& rr = r.ranks[i];
    out += fmt::format("  rank {:>4}: compute {:.6g} s  bubble {:.1f}%  comm {:.6g} s (exposed {:.6g} s)  peak {}\n",
                       rr.rank, rr.compute_s, 100 * rr.bubble_fraction, rr.comm_s, rr.exposed_comm_s,
                       gib(rr.peak_memory_bytes));
  }
  if (r.ranks.size() > rank_lines) out += fmt::format("  ... and {} more ranks (--json lists every rank)\n", r.ranks.size() - rank_lines);
  return out;
}

}  // namespace trainsim::hw
