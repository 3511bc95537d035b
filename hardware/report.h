// The report of a schedule simulated with the hardware cost model: step time, throughput, MFU, bubble,
// exposed communication and memory, overall and per rank.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware/cost_model.h"
#include "hardware/setting.h"
#include "sim/run_observer.h"
#include "sim/trace.h"

namespace trainsim::hw {

/// Where a run first went over the device's memory.
struct OutOfMemory {
  int rank = 0;
  double time_s = 0;
  std::string op;        ///< the op about to start ("forward layer 3 batches {0}", with its file:line)
  double bytes = 0;      ///< resident when it starts
  double workspace_bytes = 0;  ///< what the op allocates inside itself (CostModel::workspace), on top of `bytes`
  std::string resident;  ///< what is resident (tensor names)
  std::string message;   ///< the simulator's full message
};

/// One rank's figures.
struct RankReport {
  int rank = 0;
  double compute_s = 0;         ///< time its compute ops (stream 0 work: forward, backward, loss, update) ran
  /// time its passes ran: compute_s and its explicit TP collectives (part of the passes, on the compute stream)
  double busy_s = 0;
  double bubble_fraction = 0;   ///< 1 - busy_s / step time: pipeline bubble, waiting for other stages
  double comm_s = 0;            ///< time during which at least one of its communication ops ran
  /// the time during which a communication op ran and no compute op did (sim/exposed_comm.h), plus the TP
  /// communication inside compute ops (tp_comm_inside_s), which runs synchronously and is never hidden
  double exposed_comm_s = 0;
  /// Tensor parallelism: the TP communication its compute ops leave exposed inside them
  /// (HardwareCostModel::tp_comm_seconds: what the setting's TP overlap does not hide), part of compute_s
  double tp_comm_inside_s = 0;
  /// ... plus the time its explicit TP collectives (over its TP group) ran while none of its compute ops did
  double tp_comm_exposed_s = 0;
  double peak_memory_bytes = 0;
  /// The split of that peak by kind (what is resident as the first op at it starts, and that op's workspace)
  MemoryByKind peak_breakdown;
};

/// One pipeline stage's heaviest rank (the ranks from one stage's first rank in the schedule's stage map to the
/// next's; the whole world without a stage map).
struct StageMemory {
  int stage = 0;
  int first_rank = 0, last_rank = 0;  ///< its ranks
  int peak_rank = 0;                  ///< the first of them at the stage's highest peak
  MemoryByKind peak;                  ///< that rank's peak, by kind
};

/// A simulated training step.
struct StepReport {
  double step_time_s = 0;        ///< makespan of the step
  double tokens_per_step = 0;    ///< microbatches x microbatch_size x seq
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  /// tokens x ModelSpec::flops_per_token (6·N + attention): the model's FLOPs, however the ranks split them
  /// (data, pipeline and tensor parallelism: the t ranks of a TP group share one microbatch's FLOPs)
  double model_flops_per_step = 0;
  double mfu = 0;                ///< model FLOPs / (step time x ranks x peak FLOP/s), every rank counted
  double bubble_fraction = 0;    ///< 1 - sum of busy time (RankReport::busy_s) / (ranks x step time)
  double exposed_comm_s = 0;     ///< mean over ranks of RankReport::exposed_comm_s (TP communication included)
  double exposed_comm_share = 0; ///< exposed_comm_s / step_time_s
  bool tensor_parallel = false;  ///< some rank has a TP group (the TP lines below are printed)
  double tp_comm_inside_s = 0;   ///< mean over ranks of RankReport::tp_comm_inside_s
  double tp_comm_exposed_s = 0;  ///< mean over ranks of RankReport::tp_comm_exposed_s
  double tp_comm_exposed_share = 0;  ///< tp_comm_exposed_s / step_time_s
  double peak_memory_bytes = 0;  ///< highest sample over ranks
  int peak_memory_rank = 0;
  double peak_memory_time_s = 0;
  /// What the device's efficiencies were fitted to (DeviceSpec::fitted_to); "" when nothing: its times are the
  /// kernel tables' and likely too short
  std::string device_fitted_to;
  double memory_capacity_bytes = 0;  ///< the device's memory as the tools show it (DeviceSpec::memory_bytes)
  double memory_reserve_bytes = 0;   ///< of it, what a framework cannot use (DeviceSpec::memory_reserve_bytes)
  double headroom_bytes = 0;     ///< capacity - reserve - peak (negative: out of memory)
  std::optional<OutOfMemory> oom;
  std::vector<RankReport> ranks;
  /// Per pipeline stage, its heaviest rank's peak by kind (empty for a report made from a trace)
  std::vector<StageMemory> stages;
};

/// The per-rank figures of a StepReport, built while the simulator runs the schedule (sim/run_observer.h:
/// SimOptions::observer), so that a report needs no trace: at 16,384 ranks a trace would hold every op. The TP
/// figures come from the hardware model that times the run (none under another model): each compute op's TP
/// collectives inside it (tp_comm_seconds), summed in program order, and which collectives are over the rank's
/// TP group.
class ReportBuilder final : public RunObserver {
 public:
  void begin(int world_size, const CostModel& cost) override;
  /// The same, with the model given directly (nullptr: no TP figures).
  void begin(int world_size, const HardwareCostModel* cost);
  void issued(int rank, const Op& op) override;
  void ran(int rank, std::span<const RanOp> ops) override;
  void peak(int rank, const MemoryByKind& at_peak) override;
  /// Rank `rank` ran as rank `representative` (symmetric simulation): its figures are copied.
  void mirrored(int rank, int representative) override;
  /// The report of the run seen, with its `summary` (makespan, peak memory: SimResult::summary) on `setting`,
  /// `microbatches` microbatches. `oom_message`: the simulator's memory-limit message when the run went over
  /// the device's capacity (SimResult::over_capacity), parsed into StepReport::oom. `stage_map`: the schedule
  /// header's (the rank of each layer's stage), whose distinct ranks begin the stages of StepReport::stages.
  StepReport report(const RunSummary& summary, const HardwareSetting& setting, int microbatches,
                    const std::string& oom_message = "", const std::vector<int>& stage_map = {}) const;

 private:
  const HardwareCostModel* cost_ = nullptr;
  bool tensor_parallel_ = false;  // some rank has a TP group (HardwareCostModel::tensor_parallel)
  std::vector<RankReport> ranks_;
  std::vector<int> issued_;                       // per rank: its ops issued so far
  std::vector<std::vector<int>> tp_collectives_;  // per rank: the program places of its explicit TP collectives
};

/// The report of `trace` (a run of a schedule with `microbatches` microbatches over `world_size` ranks on
/// `setting`), as ReportBuilder builds it from the trace's ops. `oom_message`: the simulator's memory-limit
/// message when the run went over the device's capacity, parsed into StepReport::oom. `cost`: the cost model
/// that timed it, for the TP communication figures (none without it).
StepReport make_report(const Trace& trace, const HardwareSetting& setting, int microbatches,
                       const std::string& oom_message = "", const HardwareCostModel* cost = nullptr);

/// The JSON form: step_time_s, tokens_per_s, tokens_per_s_per_gpu, mfu, bubble_fraction, exposed_comm_s,
/// exposed_comm_share, tp_comm_inside_s, tp_comm_exposed_s, tp_comm_exposed_share, peak_memory_bytes, peak_memory_rank,
/// peak_memory_time_s, device_fitted_to (null when fitted to nothing), memory_capacity_bytes, memory_reserve_bytes,
/// headroom_bytes, oom (null, or {rank, time_s, op, bytes, resident, message}), model_flops_per_step,
/// tokens_per_step, peak_breakdown (the peak rank's: weights_bytes, grads_bytes, optimizer_bytes,
/// activations_bytes, workspace_bytes), stages (per stage: stage, first_rank, last_rank, peak_rank,
/// peak_memory_bytes and its split as peak_breakdown's), and ranks (one object per rank, with its peak_breakdown).
nlohmann::ordered_json to_json(const StepReport& r);
/// A memory split as to_json writes it (peak_breakdown): weights_bytes, grads_bytes, optimizer_bytes,
/// activations_bytes, workspace_bytes.
nlohmann::ordered_json breakdown_json(const MemoryByKind& b);
/// Human-readable lines (per-rank lines for at most `rank_lines` ranks; the TP communication line when
/// StepReport::tensor_parallel).
std::string format_report(const StepReport& r, const HardwareSetting& setting, std::size_t rank_lines = 16);

}  // namespace trainsim::hw
