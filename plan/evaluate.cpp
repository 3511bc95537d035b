#include "plan/evaluate.h"

#include <algorithm>
#include <stdexcept>

#include "hardware/memory.h"
#include "hardware/stage_layout.h"
#include "schedules/generators.h"
#include "schedules/generators/builder.h"
#include "schedules/hardware_sim.h"
#include "schedules/symmetry.h"
#include "sim/tensor.h"

namespace trainsim::plan {

namespace {

// The candidate's gen 3d source on the hardware model, and its symmetric map. Throws std::invalid_argument
// (hw::SpecError too) when the setting or the generator refuses the configuration.
struct Prepared {
  std::unique_ptr<RankSource> source;
  std::vector<int> mirror;
};
Prepared prepare(const Candidate& c, const PlanRequest& r) {
  Prepared p;
  hw::HardwareSetting setting = setting_of(c.config, r.device, r.network);
  p.source = generate_ranks("3d", c.config.options);
  ScheduleHeader& h = p.source->header();
  h.cost_model = "hardware";
  h.hardware = std::move(setting);
  const GenOptions& o = c.config.options;
  p.mirror = symmetric_mirror(h, *rank_grid("3d", o));
  return p;
}

}  // namespace

Evaluation evaluate(const Candidate& c, const PlanRequest& r) {
  Evaluation e;
  Prepared p;
  try {
    p = prepare(c, r);
  } catch (const std::invalid_argument& err) {  // hw::SpecError too
    e.outcome = "invalid";
    e.error = err.what();
    return e;
  }
  e.simulated_ranks = simulated_ranks(p.mirror, p.source->world_size());
  const HardwareRun run = simulate_hardware(*p.source, false, {}, p.mirror);
  if (!run.report) {
    e.outcome = "invalid";
    e.error = run.result.error;
    return e;
  }
  const hw::StepReport& rep = *run.report;
  e.outcome = rep.oom ? "out_of_memory" : "";
  e.step_time_s = rep.step_time_s;
  e.tokens_per_s_per_gpu = rep.tokens_per_s_per_gpu;
  e.mfu = rep.mfu;
  e.bubble_fraction = rep.bubble_fraction;
  e.exposed_comm_share = rep.exposed_comm_share;
  e.peak_memory_bytes = rep.peak_memory_bytes;
  e.peak_memory_rank = rep.peak_memory_rank;
  if (rep.peak_memory_rank >= 0 && rep.peak_memory_rank < static_cast<int>(rep.ranks.size()))
    e.peak_breakdown = rep.ranks[rep.peak_memory_rank].peak_breakdown;
  for (const hw::StageMemory& st : rep.stages) e.stage_peak_bytes.push_back(st.peak.total());
  e.ops = static_cast<long long>(run.result.op_count);
  return e;
}

ReplicaTrace replica_trace(const Candidate& c, const PlanRequest& r) {
  Prepared p = prepare(c, r);
  const GenOptions& o = c.config.options;
  HardwareRun run = simulate_hardware(*p.source, true, {}, p.mirror);
  if (!run.report) throw std::invalid_argument(run.result.error);
  ReplicaTrace out;
  Trace& all = run.result.trace;
  out.trace.layers = all.layers, out.trace.batches = all.batches;
  out.trace.cost_model = all.cost_model, out.trace.memory_unit = all.memory_unit;
  const int stride = o.tp * o.cp * o.dp;  // ranks per stage
  for (int s = 0; s < o.pp; ++s) out.trace.ranks.push_back(std::move(all.ranks.at(static_cast<std::size_t>(s) * stride)));
  out.trace.world_size = o.pp;
  out.cost = std::move(run.cost);
  return out;
}

double memory_lower_bound(const Candidate& c, const PlanRequest& r) {
  const hw::HardwareSetting s = setting_of(c.config, r.device, r.network);
  const Knobs& k = c.knobs;
  const std::vector<int>& chunk_blocks = c.config.options.chunk_blocks;
  // One schedule layer per block, a chunk without blocks one layer (gen 3d's refine_layers).
  std::vector<int> per_layer;
  std::vector<int> layer_rank;
  for (int chunk = 0; chunk < static_cast<int>(chunk_blocks.size()); ++chunk) {
    const int n = chunk_blocks[chunk];
    for (int i = 0; i < std::max(n, 1); ++i) {
      per_layer.push_back(n == 0 ? 0 : 1);
      layer_rank.push_back(rank_of_chunk(k.schedule, k.pp, chunk));
    }
  }
  const hw::StageLayout layout(per_layer);
  const int layers = static_cast<int>(per_layer.size());
  hw::TensorSizes sizes(s, layers, &layout);
  const int replicas = k.dp * k.cp;  // gen 3d's data-parallel groups hold dp x cp ranks
  const int weight_shards = k.zero == 3 && replicas > 1 ? replicas : 1;
  const int opt_shards = k.zero != 0 && replicas > 1 ? replicas : 1;
  // An MoE model: with EP 1 every layer holds its experts (as the cost model learns from the ops); with EP e a
  // rank holds 1/e of them, their optimizer state sharded with ZeRO-1 over the ranks of the stage holding the same
  // slice (gen 3d --ep's expert-data-parallel groups).
  if (s.model.moe() && k.ep == 1)
    for (int l = 0; l < layers; ++l) sizes.set_experts_inside(l);
  // The expert-data-parallel degree (EP, and expert TP, carved out of TP x DP).
  const int edp = k.tp * replicas / (k.ep * k.etp);
  const int expert_opt_shards = k.zero != 0 && edp > 1 ? edp : 1;
  const double seq = static_cast<double>(s.seq_len()) / k.cp;
  // A block's saved activations: a dense block's, or an MoE block's attention, router and shared experts (its
  // routed experts' share, which only adds, left out).
  const double act_dense = hw::activation_bytes_per_block(s.model, seq, s.microbatch_size, s.recompute, k.tp, k.sp,
                                                          s.attention),
               act_moe = hw::activation_bytes_per_block(s.model, seq, s.microbatch_size, s.recompute, k.tp, k.sp,
                                                        s.attention, hw::BlockPart::MoeShared);
  std::vector<double> bytes(k.pp, 0.0);
  for (int l = 0; l < layers; ++l) {
    const int q = layer_rank[l];
    bytes[q] += sizes.wire_bytes(tp_slice(gen::weight_shard(l, 0, weight_shards), 0, k.tp));
    bytes[q] += sizes.wire_bytes(tp_slice(gen::opt_shard(l, 0, opt_shards), 0, k.tp));
    const int moe = sizes.layer_moe_blocks(l);
    if (moe > 0 && k.ep > 1) {
      bytes[q] += sizes.wire_bytes(tp_slice(expert_slice(gen::weight_shard(l, 0, 1), 0, k.ep), 0, k.etp));
      bytes[q] += sizes.wire_bytes(tp_slice(expert_slice(gen::opt_shard(l, 0, expert_opt_shards), 0, k.ep), 0, k.etp));
    }
    bytes[q] += (per_layer[l] - moe) * act_dense + moe * act_moe;
  }
  return *std::max_element(bytes.begin(), bytes.end());
}

double time_lower_bound(const Candidate& c, const PlanRequest& r) {
  const hw::HardwareSetting s = setting_of(c.config, r.device, r.network);
  const double tokens = static_cast<double>(r.global_batch) * s.seq_len();
  double flops = tokens * s.model.flops_per_token(s.seq_len());
  // Full recomputation runs every block's forward again: a third of the blocks' FLOPs (6·N per token; of an MoE
  // block its active parameters, the dense part and top_k experts).
  if (s.recompute == hw::Recompute::Full)
    for (int b = 0; b < s.model.blocks; ++b) flops += tokens * 2 * s.model.active_parameters(b);
  const double peak = s.fp8 && r.device.fp8_peak_flops > 0 ? std::max(r.device.fp8_peak_flops, r.device.peak_flops)
                                                          : r.device.peak_flops;
  return flops / (static_cast<double>(r.gpus) * peak);
}

}  // namespace trainsim::plan
