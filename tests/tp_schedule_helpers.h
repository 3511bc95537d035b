// Hand-built tensor-parallel schedules for the executor's tests (docs/design.md, "Tensor parallelism"): TP
// over t ranks, optionally pipelined over p stages (one schedule layer each) and replicated over d
// data-parallel ranks, plain (an all-reduce of the grads) or FSDP-sharded (W<j/t>[i/d]: an all-gather before
// use, a reduce-scatter of the grads). The op pattern is tests/test_tensor_parallel.cpp's: every
// row-parallel output is a partial sum all-reduced over the TP group before another rank or layer reads it,
// the last layer writes the logits' vocabulary slice, which the loss reads.
//
// Ranks are numbered TP fastest, then the pipeline stage, then the data-parallel replica (Megatron-LM's
// order): rank = (replica·p + stage)·t + slice. Each replica trains on its own microbatches,
// `microbatches` each, all forwards then all backwards (GPipe), and accumulates its grads.
#pragma once

#include <string>

#include <fmt/format.h>

namespace trainsim::testing {

struct TpScheduleOptions {
  int tp = 2;             ///< TP degree t
  int pp = 1;             ///< pipeline stages (= schedule layers)
  int dp = 1;             ///< data-parallel replicas
  bool fsdp = false;      ///< shard each TP slice over the replicas (FSDP), instead of all-reducing grads
  int microbatches = 2;   ///< per replica
  bool split_backward = false;  ///< backward-input and backward-weight instead of backward
  int tp_stream = 0;      ///< the stream of the TP all-reduces (0 = the compute stream)
};

/// The .sched text (format version 2) of such a schedule.
inline std::string tp_schedule_text(const TpScheduleOptions& o) {
  const int t = o.tp, p = o.pp, d = o.dp, m = o.microbatches, L = p, M = d * m;
  auto rank = [&](int replica, int stage, int j) { return (replica * p + stage) * t + j; };
  std::string out = fmt::format("trainsim-schedule 2\nworld_size {}\nlayers {}\nmicrobatches {}\ncost_model unit\n"
                                "p2p per-pair\n",
                                t * p * d, L, M);
  // Groups: the TP groups (replica, stage), then the data-parallel groups (stage, slice).
  int g = 0;
  auto tp_group = [&](int replica, int stage) { return 1 + replica * p + stage; };
  auto dp_group = [&](int stage, int j) { return 1 + d * p + stage * t + j; };
  for (int r = 0; r < d; ++r)
    for (int s = 0; s < p; ++s) {
      ++g;
      out += fmt::format("group {} tp{}", g, g - 1);
      for (int j = 0; j < t; ++j) out += fmt::format(" {}", rank(r, s, j));
      out += "\n";
    }
  if (d > 1)
    for (int s = 0; s < p; ++s)
      for (int j = 0; j < t; ++j) {
        ++g;
        out += fmt::format("group {} dp{}", g, s * t + j);
        for (int r = 0; r < d; ++r) out += fmt::format(" {}", rank(r, s, j));
        out += "\n";
      }
  const std::string stream = o.tp_stream ? fmt::format(" stream {}", o.tp_stream) : "";
  for (int r = 0; r < d; ++r)
    for (int s = 0; s < p; ++s)
      for (int j = 0; j < t; ++j) {
        const int l = s, tg = tp_group(r, s);
        const std::string sl = fmt::format("<{}/{}>", j, t), part = fmt::format("<+{}/{}>", j, t);
        const std::string shard = o.fsdp && d > 1 ? fmt::format("[{}/{}]", r, d) : "";
        const std::string all_shards = o.fsdp && d > 1 ? fmt::format("[0-{}/{}]", d - 1, d) : "";
        const std::string W = fmt::format("W{}{}{}", l, sl, shard), O = fmt::format("O{}{}{}", l, sl, shard);
        const std::string Wfull = fmt::format("W{}{}{}", l, sl, all_shards);
        out += fmt::format("rank {}\n  load -> {} {}\n", rank(r, s, j), W, O);
        if (o.fsdp && d > 1) out += fmt::format("  all-gather L{} group {} : {} -> {}\n", l, dp_group(s, j), W, Wfull);
        for (int k = 0; k < m; ++k) {
          const int b = r * m + k;
          if (s == 0) out += fmt::format("  load -> A0{{{}}}\n", b);
          else out += fmt::format("  recv from {} -> A{}{{{}}}\n", rank(r, s - 1, j), l, b);
          if (s == p - 1) {
            out += fmt::format("  forward L{} {{{}}} : A{}{{{}}} {} -> A{}{{{}}}{}\n", l, b, l, b, Wfull, L, b, sl);
          } else {
            out += fmt::format("  forward L{} {{{}}} : A{}{{{}}} {} -> A{}{{{}}}{}\n", l, b, l, b, Wfull, l + 1, b, part);
            out += fmt::format("  all-reduce group {}{} : A{}{{{}}}{} -> A{}{{{}}}\n", tg, stream, l + 1, b, part, l + 1, b);
            out += fmt::format("  send to {} : A{}{{{}}}\n", rank(r, s + 1, j), l + 1, b);
            out += fmt::format("  free : A{}{{{}}}{} A{}{{{}}}\n", l + 1, b, part, l + 1, b);
          }
        }
        for (int k = m - 1; k >= 0; --k) {
          const int b = r * m + k;
          std::string din;
          if (s == p - 1) {
            out += fmt::format("  loss {{{}}} : A{}{{{}}}{} -> dA{}{{{}}}{}\n", b, L, b, sl, L, b, sl);
            din = fmt::format("dA{}{{{}}}{}", L, b, sl);
          } else {
            out += fmt::format("  recv from {} -> dA{}{{{}}}\n", rank(r, s + 1, j), l + 1, b);
            din = fmt::format("dA{}{{{}}}", l + 1, b);
          }
          const std::string a = fmt::format("A{}{{{}}}", l, b), dw = fmt::format("dW{}{{{}}}{}", l, b, sl),
                            da = fmt::format("dA{}{{{}}}{}", l, b, part);
          if (o.split_backward) {
            out += fmt::format("  backward-input L{} {{{}}} : {} {} {} -> {}\n", l, b, a, din, Wfull, da);
            out += fmt::format("  backward-weight L{} {{{}}} : {} {} -> {}\n", l, b, a, din, dw);
          } else {
            out += fmt::format("  backward L{} {{{}}} : {} {} {} -> {} {}\n", l, b, a, din, Wfull, dw, da);
          }
          if (s > 0) {
            out += fmt::format("  all-reduce group {}{} : {} -> dA{}{{{}}}\n", tg, stream, da, l, b);
            out += fmt::format("  send to {} : dA{}{{{}}}\n", rank(r, s - 1, j), l, b);
            out += fmt::format("  free : dA{}{{{}}}\n", l, b);
          }
          out += fmt::format("  free : {} {} {}{}\n", a, din, da,
                             s == p - 1 ? fmt::format(" A{}{{{}}}{}", L, b, sl) : std::string());
        }
        const std::string mine = m == 1 ? fmt::format("{{{}}}", r * m) : fmt::format("{{{}-{}}}", r * m, r * m + m - 1);
        std::string grad = fmt::format("dW{}{}{}", l, mine, sl);
        if (m > 1) {
          out += "  accumulate :";
          for (int k = 0; k < m; ++k) out += fmt::format(" dW{}{{{}}}{}", l, r * m + k, sl);
          out += fmt::format(" -> {}\n  free :", grad);
          for (int k = 0; k < m; ++k) out += fmt::format(" dW{}{{{}}}{}", l, r * m + k, sl);
          out += "\n";
        }
        const std::string every = M == 1 ? "{0}" : fmt::format("{{0-{}}}", M - 1);
        if (d > 1) {
          const std::string summed = fmt::format("dW{}{}{}{}", l, every, sl, shard);
          out += fmt::format("  {} L{} group {} : {} -> {}\n  free : {}\n", o.fsdp ? "reduce-scatter" : "all-reduce", l,
                             dp_group(s, j), grad, summed, grad);
          grad = summed;
        }
        if (o.fsdp && d > 1) out += fmt::format("  free : {}\n", Wfull);
        out += fmt::format("  update L{} : {} {} {} -> W{}{}{}@1 O{}{}{}@1\n", l, grad, W, O, l, sl, shard, l, sl, shard);
      }
  return out;
}

}  // namespace trainsim::testing
