// Pipeline schedules: GPipe, 1F1B (PipeDream-flush), Megatron's interleaved 1F1B and the breadth-first
// looped pipeline. One schedule "layer" per stage chunk.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "schedules/generators/builder.h"

namespace trainsim::gen {

namespace {

// Interleaved 1F1B when the microbatches are not a multiple of the ranks, as PyTorch's
// ScheduleInterleaved1F1B orders it (torch/distributed/pipelining/schedules.py): the m microbatches go in
// rounds = max(1, m / p) rounds of m / rounds each (m must divide evenly); a rank runs the chunks of one
// round in turn, round after round; its warm-up is (v - 1) * per_round + 2 * (p - 1 - rank) forwards (at most
// all of them), then one forward and one backward alternate. Each chunk's forwards (backwards) take the
// microbatches in order.
PipelinePlan interleaved_in_rounds(PipelinePlan plan, const std::string& kind, int p, int v, int m) {
  const int per_round = microbatches_per_round(kind, p, m), total = m * v;
  for (int s = 0; s < p; ++s) {
    const int warmup = std::min((v - 1) * per_round + 2 * (p - 1 - s), total);
    std::vector<int> next_f(v, 0), next_b(v, 0);  // the next microbatch of each chunk
    auto forward = [&](int k) {
      const int chunk = (k / per_round) % v;
      return Step{Pass::F, chunk * p + s, next_f[chunk]++};
    };
    auto backward = [&](int k) {
      const int chunk = v - 1 - (k / per_round) % v;
      return Step{Pass::B, chunk * p + s, next_b[chunk]++};
    };
    auto& out = plan.steps[s];
    for (int k = 0; k < warmup; ++k) out.push_back(forward(k));
    for (int k = 0; k < total - warmup; ++k) {
      out.push_back(forward(warmup + k));
      out.push_back(backward(k));
    }
    for (int k = total - warmup; k < total; ++k) out.push_back(backward(k));
  }
  return plan;
}

void check_pipeline(const std::string& kind, const GenOptions& o) {
  require_at_least(kind, "stages", o.stages, 1);
  require_at_least(kind, "microbatches", o.microbatches, 1);
}

}  // namespace

std::unique_ptr<RankSource> gen_gpipe(const GenOptions& o) {
  check_pipeline("gpipe", o);
  const int p = o.stages, m = o.microbatches;
  PipelinePlan plan = looped_plan(p, 1, m);
  for (int s = 0; s < p; ++s) {
    for (int b = 0; b < m; ++b) plan.steps[s].push_back({Pass::F, s, b});
    for (int b = 0; b < m; ++b) plan.steps[s].push_back({Pass::B, s, b});
  }
  return build_pipeline(plan);
}

PipelinePlan plan_1f1b(int p, int m) {
  PipelinePlan plan = looped_plan(p, 1, m);
  for (int s = 0; s < p; ++s) plan.steps[s] = one_f_one_b(s, 0, m, p - s - 1);
  return plan;
}

std::unique_ptr<RankSource> gen_1f1b(const GenOptions& o) {
  check_pipeline("1f1b", o);
  return build_pipeline(plan_1f1b(o.stages, o.microbatches));
}

PipelinePlan plan_interleaved_1f1b(const std::string& kind, int p, int v, int m) {
  PipelinePlan plan = looped_plan(p, v, m);
  if (v == 1) {  // no interleaving: plain 1F1B
    for (int s = 0; s < p; ++s) plan.steps[s] = one_f_one_b(s, 0, m, p - s - 1);
    return plan;
  }
  if (m % p != 0) return interleaved_in_rounds(std::move(plan), kind, p, v, m);
  // Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th forward (backward) of a rank runs
  // chunk (k mod p*v) / p (counted from the last chunk for backwards) on microbatch (k / (p*v)) * p + k mod p.
  const int total = m * v;
  auto step = [&](int s, int k, bool forward) {
    int in_group = k % (p * v);
    int chunk = in_group / p;
    if (!forward) chunk = v - 1 - chunk;
    int mb = (k / (p * v)) * p + in_group % p;
    return Step{forward ? Pass::F : Pass::B, chunk * p + s, mb};
  };
  for (int s = 0; s < p; ++s) {
    int warmup = m == p ? total : std::min((p - s - 1) * 2 + (v - 1) * p, total);
    auto& out = plan.steps[s];
    for (int k = 0; k < warmup; ++k) out.push_back(step(s, k, true));
    for (int k = 0; k < total - warmup; ++k) {
      out.push_back(step(s, warmup + k, true));
      out.push_back(step(s, k, false));
    }
    for (int k = total - warmup; k < total; ++k) out.push_back(step(s, k, false));
  }
  return plan;
}

std::unique_ptr<RankSource> gen_interleaved_1f1b(const GenOptions& o) {
  check_pipeline("interleaved-1f1b", o);
  require_at_least("interleaved-1f1b", "chunks", o.chunks, 1);
  return build_pipeline(plan_interleaved_1f1b("interleaved-1f1b", o.stages, o.chunks, o.microbatches));
}

std::unique_ptr<RankSource> gen_looped_bfs(const GenOptions& o) {
  check_pipeline("looped-bfs", o);
  require_at_least("looped-bfs", "chunks", o.chunks, 1);
  const int p = o.stages, m = o.microbatches, v = o.chunks;
  PipelinePlan plan = looped_plan(p, v, m);
  for (int s = 0; s < p; ++s) {
    for (int c = 0; c < v; ++c)
      for (int b = 0; b < m; ++b) plan.steps[s].push_back({Pass::F, c * p + s, b});
    for (int c = v - 1; c >= 0; --c)
      for (int b = 0; b < m; ++b) plan.steps[s].push_back({Pass::B, c * p + s, b});
  }
  return build_pipeline(plan);
}

}  // namespace trainsim::gen
