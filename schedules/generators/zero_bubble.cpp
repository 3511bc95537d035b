// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): the backward splits into backward-input (I,
// on the critical path: it makes the activation grad the previous stage waits for) and backward-weight (W,
// which nothing waits for). The order is 1F1B's with I in place of B, so at most min(m, p - s) microbatches
// are between forward and backward-input on stage s, as in 1F1B; stage s defers up to s W passes and runs
// them in its cool-down bubble, so no stage holds the activations of more than p microbatches (1F1B's
// bound, reached by its first stage). This is the authors' handcrafted H1 (their DeepSpeed
// ZeroBubbleH1Pipeline: warm-up p-s-1 forwards, s rounds of F I, then F I W, then I W, then the W left).
#include <algorithm>

#include "schedules/generators/builder.h"

namespace trainsim::gen {

Schedule gen_zb_h1(const GenOptions& o) {
  require_at_least("zb-h1", "stages", o.stages, 1);
  require_at_least("zb-h1", "microbatches", o.microbatches, 1);
  const int p = o.stages, m = o.microbatches;
  PipelinePlan plan;
  plan.world_size = p;
  plan.layers = p;
  plan.microbatches = m;
  plan.steps.resize(p);
  for (int s = 0; s < p; ++s) plan.stage_map.push_back(s);
  for (int s = 0; s < p; ++s) {
    auto& out = plan.steps[s];
    const int warmup = std::min(p - s - 1, m), deferred = s;
    int f = 0, i = 0, w = 0;
    auto input = [&] {
      out.push_back({Pass::I, s, i++});
      if (i - w > deferred) out.push_back({Pass::W, s, w++});
    };
    while (f < warmup) out.push_back({Pass::F, s, f++});
    while (f < m) {
      out.push_back({Pass::F, s, f++});
      input();
    }
    while (i < m) input();
    while (w < m) out.push_back({Pass::W, s, w++});
  }
  return build_pipeline(plan);
}

}  // namespace trainsim::gen
