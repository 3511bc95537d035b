// Pipeline + FSDP (the LLM Training Puzzles' puzzle 7 layout): p stages x dp replicas, rank = replica * p +
// stage. Each replica runs 1F1B over its own m microbatches (replica j: batches j*m .. j*m+m-1); the weight
// and optimizer state of stage s are sharded over the dp ranks of that stage (header group 1+s, in replica
// order), all-gathered there before the first forward and kept until the last backward; the summed grads
// are reduce-scattered there and each rank updates its shard.
#include "schedules/generators/builder.h"

namespace trainsim::gen {

std::unique_ptr<RankSource> gen_pp_fsdp(const GenOptions& o) {
  require_at_least("pp-fsdp", "stages", o.stages, 1);
  require_at_least("pp-fsdp", "microbatches", o.microbatches, 1);
  require_at_least("pp-fsdp", "dp", o.dp, 1);
  const int p = o.stages, m = o.microbatches, dp = o.dp;
  PipelinePlan plan;
  plan.world_size = p * dp;
  plan.layers = p;
  plan.microbatches = m * dp;
  plan.dp = dp;
  plan.dp_stream = 1;  // FSDP's collectives on a communication stream (docs/design.md, "Overlap")
  plan.steps.resize(p * dp);
  plan.shard_index.resize(p * dp);
  plan.group_of.resize(p * dp);
  for (int s = 0; s < p; ++s) {
    plan.stage_map.push_back(s);
    std::vector<int> group;
    for (int j = 0; j < dp; ++j) group.push_back(j * p + s);
    plan.groups.push_back(group);
  }
  for (int j = 0; j < dp; ++j)
    for (int s = 0; s < p; ++s) {
      int r = j * p + s;
      plan.steps[r] = one_f_one_b(s, j * m, m, p - s - 1);
      plan.shard_index[r] = j;
      plan.group_of[r] = 1 + s;
    }
  return build_pipeline(plan);
}

}  // namespace trainsim::gen
