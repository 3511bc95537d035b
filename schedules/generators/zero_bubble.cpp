// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): the backward splits into backward-input (I,
// on the critical path: it makes the activation grad the previous stage waits for) and backward-weight (W,
// which nothing waits for). The order is 1F1B's with I in place of B, so at most min(m, p - s) microbatches
// are between forward and backward-input on stage s, as in 1F1B; stage s defers up to s W passes and runs
// them in its cool-down bubble, so no stage holds the activations of more than p microbatches (1F1B's
// bound, reached by its first stage). This is the authors' handcrafted H1 (their DeepSpeed
// ZeroBubbleH1Pipeline: warm-up p-s-1 forwards, s rounds of F I, then F I W, then I W, then the W left).
//
// ZBV (the same paper, section 6; PyTorch's ScheduleZBVZeroBubble): p ranks hold 2p stages in V placement
// (rank r holds stage r and stage 2p-1-r), backward split into I and W. Rank r warms up with 2(p-r)-1
// forwards of its first chunk, then r pairs of (second chunk, first chunk) forwards, then p-r rounds of
// F I W on its second chunk; the steady state alternates F I W on the first chunk with F I W on the second;
// the cool-down runs r pairs of I (first, second chunk), then p-r rounds of I and a deferred W on the first
// chunk, then the W left (second chunk, then first). With fewer than 2p-1 microbatches the order is that of
// 2p-1 microbatches without the passes of the microbatches that do not exist, as PyTorch does.
//
// DualPipeV (DeepSeek-V3's DualPipe folded into a V; PyTorch's ScheduleDualPipeV): the same placement; in the
// steady state a rank pairs the forward of one chunk with the full backward of the other (PyTorch's
// OVERLAP_F_B, here the two passes in order), and near the end splits backwards into I and a W taken from a
// queue, in eight phases (see gen_dualpipev). Needs at least 2p microbatches.
//
// Interleaved zero bubble (the paper's ZB1P over looped chunks; PyTorch's ScheduleInterleavedZeroBubble):
// interleaved 1F1B's order in rounds (as interleaved-1f1b for any microbatch count), with a warm-up shorter
// by one forward per hop (v - 1) * per_round + (p - 1 - rank), every backward split into I, and rank r
// deferring its first r weight passes: after that each I is followed by the oldest W not yet run.
#include <algorithm>
#include <deque>
#include <stdexcept>

#include <fmt/format.h>

#include "schedules/generators/builder.h"

namespace trainsim::gen {

std::unique_ptr<RankSource> gen_zb_h1(const GenOptions& o) {
  require_at_least("zb-h1", "stages", o.stages, 1);
  require_at_least("zb-h1", "microbatches", o.microbatches, 1);
  return build_pipeline(plan_zb_h1(o.stages, o.microbatches));
}

PipelinePlan plan_zb_h1(int p, int m) {
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
  return plan;
}

std::unique_ptr<RankSource> gen_zbv(const GenOptions& o) {
  require_at_least("zbv", "stages", o.stages, 1);
  require_at_least("zbv", "microbatches", o.microbatches, 1);
  return build_pipeline(plan_zbv(o.stages, o.microbatches));
}

PipelinePlan plan_zbv(int p, int m) {
  const int layers = 2 * p;
  PipelinePlan plan = v_shaped_plan(p, m);
  const int n = std::max(2 * p - 1, m);  // microbatches the order is made for
  for (int r = 0; r < p; ++r) {
    const int c0 = r, c1 = layers - 1 - r;  // the rank's first and second chunk
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    auto& out = plan.steps[r];
    auto add = [&](Pass pass, int layer, int mb) {
      if (mb < m) out.push_back({pass, layer, mb});
    };
    auto fiw = [&](int layer, int& f, int& b) {
      add(Pass::F, layer, f++);
      add(Pass::I, layer, b);
      add(Pass::W, layer, b++);
    };
    for (int k = 0; k < 2 * (p - r) - 1; ++k) add(Pass::F, c0, f0++);
    for (int k = 0; k < r; ++k) {
      add(Pass::F, c1, f1++);
      add(Pass::F, c0, f0++);
    }
    for (int k = 0; k < p - r; ++k) fiw(c1, f1, b1);
    while (f1 < f0 || f0 < n) {
      if (f0 < n) add(Pass::F, c0, f0++);
      add(Pass::I, c0, b0);
      add(Pass::W, c0, b0++);
      fiw(c1, f1, b1);
    }
    int w0 = b0, w1 = b1;
    for (int k = 0; k < r; ++k) {
      add(Pass::I, c0, b0++);
      add(Pass::I, c1, b1++);
    }
    for (int k = 0; k < p - r; ++k) {
      add(Pass::I, c0, b0++);
      add(Pass::W, c0, w0++);
    }
    while (w1 < b1) add(Pass::W, c1, w1++);
    while (w0 < b0) add(Pass::W, c0, w0++);
    if (f0 != n || b0 != n || w0 != n || f1 != n || b1 != n || w1 != n)
      throw std::logic_error(fmt::format("zbv: rank {} ran {}/{}/{} and {}/{}/{} passes of {} microbatches", r, f0, b0,
                                         w0, f1, b1, w1, n));
  }
  return plan;
}

std::unique_ptr<RankSource> gen_interleaved_zb(const GenOptions& o) {
  require_at_least("interleaved-zb", "stages", o.stages, 1);
  require_at_least("interleaved-zb", "microbatches", o.microbatches, 1);
  require_at_least("interleaved-zb", "chunks", o.chunks, 1);
  return build_pipeline(plan_interleaved_zb("interleaved-zb", o.stages, o.chunks, o.microbatches));
}

PipelinePlan plan_interleaved_zb(const std::string& kind, int p, int v, int m) {
  const int per_round = microbatches_per_round(kind, p, m), total = m * v;
  PipelinePlan plan = looped_plan(p, v, m);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min((v - 1) * per_round + (p - 1 - r), total);
    auto fwd_layer = [&](int k) { return ((k / per_round) % v) * p + r; };
    auto bwd_layer = [&](int k) { return (v - 1 - ((k - warmup) / per_round) % v) * p + r; };
    std::vector<int> next_f(p * v, 0), next_i(p * v, 0), next_w(p * v, 0);
    std::vector<int> inputs;  // the layers of the I passes run so far, in order (their W follow in that order)
    std::size_t weights = 0;
    auto& out = plan.steps[r];
    auto forward = [&](int k) {
      const int l = fwd_layer(k);
      out.push_back({Pass::F, l, next_f[l]++});
    };
    auto weight = [&] {
      const int l = inputs[weights++];
      out.push_back({Pass::W, l, next_w[l]++});
    };
    auto input = [&](int k) {
      const int l = bwd_layer(k);
      out.push_back({Pass::I, l, next_i[l]++});
      inputs.push_back(l);
      if (k - warmup >= r) weight();  // rank r keeps r weight passes back
    };
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = warmup; k < total; ++k) forward(k), input(k);
    for (int k = total; k < total + warmup; ++k) input(k);
    while (weights < inputs.size()) weight();
  }
  return plan;
}

std::unique_ptr<RankSource> gen_dualpipev(const GenOptions& o) {
  require_at_least("dualpipev", "stages", o.stages, 1);
  require_at_least("dualpipev", "microbatches", o.microbatches, 1);
  return build_pipeline(plan_dualpipev("dualpipev", "--stages", o.stages, o.microbatches));
}

PipelinePlan plan_dualpipev(const std::string& kind, const std::string& stages_option, int p, int m) {
  const int layers = 2 * p;
  if (m < layers)
    throw std::invalid_argument(fmt::format("{}: --microbatches must be at least the number of stages, 2 x "
                                            "{} = {} (got {}), as PyTorch's ScheduleDualPipeV requires",
                                            kind, stages_option, layers, m));
  PipelinePlan plan = v_shaped_plan(p, m);
  for (int r = 0; r < p; ++r) {
    const int s0 = r, s1 = layers - 1 - r;
    auto& out = plan.steps[r];
    // Next microbatch per chunk (0: s0, 1: s1) of forwards, of backwards (full or input half), of W passes.
    int f[2] = {0, 0}, b[2] = {0, 0}, w[2] = {0, 0};
    std::deque<std::pair<int, int>> weights;  // (chunk, microbatch) whose W is still to run, oldest first
    auto layer = [&](int c) { return c == 0 ? s0 : s1; };
    auto fwd = [&](int c) { out.push_back({Pass::F, layer(c), f[c]++}); };
    auto bwd = [&](int c, bool split) {
      if (split) weights.emplace_back(c, b[c]);
      else ++w[c];  // a full backward includes its weight grad
      out.push_back({split ? Pass::I : Pass::B, layer(c), b[c]++});
    };
    auto pending_weight = [&] {
      if (weights.empty()) return;
      auto [c, mb] = weights.front();
      weights.pop_front();
      ++w[c];
      out.push_back({Pass::W, layer(c), mb});
    };
    for (int k = 0; k < 2 * (p - r - 1); ++k) fwd(0);  // 1: F0
    for (int k = 0; k < r + 1; ++k) fwd(0), fwd(1);     // 2: F0 F1
    for (int k = 0; k < p - r - 1; ++k) {               // 3: I1 W F1
      bwd(1, true);
      pending_weight();
      fwd(1);
    }
    for (int k = 0; k < m - 2 * p + r + 1; ++k) {  // 4: F0 B1, F1 B0 (overlapped pairs)
      fwd(0), bwd(1, false);  // (rank p-1's first pair is not overlapped in PyTorch: the same passes)
      fwd(1), bwd(0, false);
    }
    for (int k = 0; k < p - r - 1; ++k) {  // 5: B1, F1 B0
      bwd(1, false);
      fwd(1), bwd(0, false);
    }
    bool split = false;  // 6: B1 B0, the second half split (odd ranks switch before chunk 1, even after)
    for (int k = 0; k < r + 1; ++k) {
      if (k == (r + 1) / 2 && r % 2 == 1) split = true;
      bwd(1, split);
      if (k == (r + 1) / 2 && r % 2 == 0) split = true;
      bwd(0, split);
    }
    for (int k = 0; k < p - r - 1; ++k) {  // 7: W, B0
      pending_weight();
      bwd(0, split);
    }
    for (int k = 0; k < r + 1; ++k) pending_weight();  // 8: the weights left
    for (int c : {0, 1})
      if (f[c] != m || b[c] != m || w[c] != m || !weights.empty())
        throw std::logic_error(fmt::format("dualpipev: rank {} chunk {} ran {}/{}/{} passes of {} microbatches", r, c,
                                           f[c], b[c], w[c], m));
  }
  return plan;
}

}  // namespace trainsim::gen
